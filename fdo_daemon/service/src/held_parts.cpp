#include "held_parts.h"

namespace fdo::daemon {

std::string HeldParts::key_of(const std::string& scope, const std::string& ik, CompileMode mode) {
  return scope + '\0' + ik + '\0' + std::string(to_string(mode));
}

std::string HeldParts::prefix_key_of(const std::string& scope, const std::string& ik) {
  // No mode is named "prefix": the prefix's key never meets a part set's.
  return scope + '\0' + ik + '\0' + "prefix";
}

HeldParts::Entry* HeldParts::touch_locked(const std::string& key) {
  auto it = index_.find(key);
  if (it == index_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);
  return &*it->second;
}

void HeldParts::replace_locked(std::string key, Entry entry, std::vector<Entry>& dropped) {
  auto drop = [&](std::list<Entry>::iterator at) {
    bytes_ -= at->bytes;
    if (at->prefix) --prefixes_;
    index_.erase(at->key);
    dropped.push_back(std::move(*at));
    lru_.erase(at);
  };
  if (auto it = index_.find(key); it != index_.end()) drop(it->second);
  if ((!entry.build && !entry.prefix) || entry.bytes > max_bytes_) return;
  entry.key = key;
  bytes_ += entry.bytes;
  if (entry.prefix) ++prefixes_;
  lru_.push_front(std::move(entry));
  index_.emplace(std::move(key), lru_.begin());
  while (bytes_ > max_bytes_ && !lru_.empty())
    drop(std::prev(lru_.end()));
}

std::shared_ptr<const HeldBuild> HeldParts::find(const std::string& scope, const std::string& ik,
                                                 CompileMode mode) {
  std::lock_guard lock(mu_);
  Entry* e = touch_locked(key_of(scope, ik, mode));
  return e ? e->build : nullptr;
}

void HeldParts::put(const std::string& scope, const std::string& ik, CompileMode mode,
                    std::shared_ptr<const HeldBuild> build) {
  Entry entry;
  if (build && build->parts.size() >= 2) {
    entry.bytes = build->objects.size();
    entry.build = std::move(build);
  }
  std::vector<Entry> dropped; // freed after the lock
  std::lock_guard lock(mu_);
  replace_locked(key_of(scope, ik, mode), std::move(entry), dropped);
}

std::shared_ptr<const HeldPrefixBuild> HeldParts::find_prefix(const std::string& scope,
                                                              const std::string& ik) {
  std::lock_guard lock(mu_);
  Entry* e = touch_locked(prefix_key_of(scope, ik));
  return e ? e->prefix : nullptr;
}

void HeldParts::put_prefix(const std::string& scope, const std::string& ik,
                           std::shared_ptr<const HeldPrefixBuild> prefix) {
  Entry entry;
  if (prefix && !prefix->bitcode.empty()) {
    entry.bytes = prefix->bitcode.size();
    entry.prefix = std::move(prefix);
  }
  std::vector<Entry> dropped;
  std::lock_guard lock(mu_);
  replace_locked(prefix_key_of(scope, ik), std::move(entry), dropped);
}

std::size_t HeldParts::bytes() const {
  std::lock_guard lock(mu_);
  return bytes_;
}

std::size_t HeldParts::builds() const {
  std::lock_guard lock(mu_);
  return lru_.size() - prefixes_;
}

std::size_t HeldParts::prefixes() const {
  std::lock_guard lock(mu_);
  return prefixes_;
}

} // namespace fdo::daemon
