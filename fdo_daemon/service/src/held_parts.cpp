#include "held_parts.h"

namespace fdo::daemon {

std::string HeldParts::key_of(const std::string& scope, const std::string& ik, CompileMode mode) {
  return scope + '\0' + ik + '\0' + std::string(to_string(mode));
}

std::shared_ptr<const HeldBuild> HeldParts::find(const std::string& scope, const std::string& ik,
                                                 CompileMode mode) {
  std::lock_guard lock(mu_);
  auto it = index_.find(key_of(scope, ik, mode));
  if (it == index_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->build;
}

void HeldParts::put(const std::string& scope, const std::string& ik, CompileMode mode,
                    std::shared_ptr<const HeldBuild> build) {
  std::string key = key_of(scope, ik, mode);
  std::shared_ptr<const HeldBuild> dropped; // freed after the lock
  std::lock_guard lock(mu_);
  if (auto it = index_.find(key); it != index_.end()) {
    bytes_ -= it->second->build->objects.size();
    dropped = std::move(it->second->build);
    lru_.erase(it->second);
    index_.erase(it);
  }
  if (!build || build->parts.size() < 2 || build->objects.size() > max_bytes_) return;
  bytes_ += build->objects.size();
  lru_.push_front(Entry{key, std::move(build)});
  index_.emplace(std::move(key), lru_.begin());
  while (bytes_ > max_bytes_ && !lru_.empty()) {
    Entry& last = lru_.back();
    bytes_ -= last.build->objects.size();
    index_.erase(last.key);
    lru_.pop_back();
  }
}

std::size_t HeldParts::bytes() const {
  std::lock_guard lock(mu_);
  return bytes_;
}

std::size_t HeldParts::builds() const {
  std::lock_guard lock(mu_);
  return lru_.size();
}

} // namespace fdo::daemon
