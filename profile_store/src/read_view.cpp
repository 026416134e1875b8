#include "read_view.h"

namespace fdo::profile_store {

ReadViewBackend::ReadViewBackend(std::unique_ptr<Backend> inner, std::size_t profile_budget_bytes)
    : inner_(std::move(inner)), budget_(profile_budget_bytes) {}

// --- reads ---

std::uint64_t ReadViewBackend::begin_read() const {
  std::lock_guard lk(mu_);
  return epoch_;
}

void ReadViewBackend::drop(std::list<ProfileSlot>::iterator it) const {
  bytes_ -= it->bytes;
  profiles_.erase(it->pk);
  lru_.erase(it);
}

void ReadViewBackend::keep_profile(const std::string& pk, std::uint64_t epoch,
                                   const Shared& value) const {
  const std::size_t bytes = pk.size() + (value ? value->body.size() : 0);
  std::lock_guard lk(mu_);
  if (epoch != epoch_ || bytes > budget_ / 4) return;
  if (auto it = profiles_.find(pk); it != profiles_.end()) drop(it->second);
  lru_.push_front(ProfileSlot{pk, value, bytes});
  profiles_[pk] = lru_.begin();
  bytes_ += bytes;
  while (bytes_ > budget_)
    drop(std::prev(lru_.end()));
}

Expected<std::shared_ptr<const StoredProfile>>
ReadViewBackend::current_shared(std::string_view pk) const {
  const std::string key(pk);
  std::uint64_t epoch = 0;
  {
    std::lock_guard lk(mu_);
    if (auto it = profiles_.find(key); it != profiles_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      return it->second->value;
    }
    epoch = epoch_;
  }
  FDO_TRY(Shared value, inner_->current_shared(pk));
  keep_profile(key, epoch, value);
  return value;
}

Expected<std::optional<StoredProfile>> ReadViewBackend::current(std::string_view pk) const {
  FDO_TRY(Shared value, current_shared(pk));
  if (!value) return std::optional<StoredProfile>();
  return std::optional<StoredProfile>(*value);
}

void ReadViewBackend::keep_mapping(Mapping& m, const std::string& key, std::uint64_t epoch,
                                   const std::optional<std::string>& value) const {
  std::lock_guard lk(mu_);
  if (epoch != epoch_) return;
  if (m.size() >= kMaxMappings) m.clear();
  m[key] = value;
}

Expected<std::optional<std::string>> ReadViewBackend::lookup(Mapping& m, std::string_view key,
                                                             bool profile_key) const {
  const std::string k(key);
  std::uint64_t epoch = 0;
  {
    std::lock_guard lk(mu_);
    if (auto it = m.find(k); it != m.end()) return it->second;
    epoch = epoch_;
  }
  FDO_TRY(std::optional<std::string> value,
          profile_key ? inner_->lookup_profile_key(key) : inner_->lookup_virtual_key(key));
  keep_mapping(m, k, epoch, value);
  return value;
}

Expected<std::optional<std::string>>
ReadViewBackend::lookup_profile_key(std::string_view ik) const {
  return lookup(profile_keys_, ik, true);
}

Expected<std::optional<std::string>>
ReadViewBackend::lookup_virtual_key(std::string_view ck) const {
  return lookup(virtual_keys_, ck, false);
}

// --- changes: each forgets what it may have changed, whatever it returned ---

void ReadViewBackend::forget_profile(std::string_view pk) {
  std::lock_guard lk(mu_);
  ++epoch_;
  if (auto it = profiles_.find(std::string(pk)); it != profiles_.end()) drop(it->second);
}

void ReadViewBackend::forget_mapping(Mapping& m, std::string_view key) {
  std::lock_guard lk(mu_);
  ++epoch_;
  m.erase(std::string(key));
}

void ReadViewBackend::forget_mappings() {
  std::lock_guard lk(mu_);
  ++epoch_;
  profile_keys_.clear();
  virtual_keys_.clear();
}

void ReadViewBackend::forget_all() {
  std::lock_guard lk(mu_);
  ++epoch_;
  profile_keys_.clear();
  virtual_keys_.clear();
  profiles_.clear();
  lru_.clear();
  bytes_ = 0;
}

Expected<BackupSummary> ReadViewBackend::restore_from(const std::string& from_path) {
  auto out = inner_->restore_from(from_path);
  forget_all();
  return out;
}

Expected<std::int64_t> ReadViewBackend::write(std::string_view pk, std::int64_t expected_version,
                                              const ProfileDoc& doc, const WriteInfo& info) {
  auto out = inner_->write(pk, expected_version, doc, info);
  forget_profile(pk);
  return out;
}

Expected<std::vector<std::int64_t>>
ReadViewBackend::write_batch(std::span<const WriteRequest> requests) {
  auto out = inner_->write_batch(requests);
  for (const WriteRequest& r : requests)
    forget_profile(r.pk);
  return out;
}

Status ReadViewBackend::pin(std::string_view pk, ActingOwner acting_owner) {
  auto out = inner_->pin(pk, acting_owner);
  forget_profile(pk);
  return out;
}

Status ReadViewBackend::unpin(std::string_view pk, ActingOwner acting_owner) {
  auto out = inner_->unpin(pk, acting_owner);
  forget_profile(pk);
  return out;
}

Status ReadViewBackend::reset(std::string_view pk, ActingOwner acting_owner) {
  auto out = inner_->reset(pk, acting_owner);
  forget_profile(pk);
  return out;
}

Expected<RemoveSummary> ReadViewBackend::remove(std::string_view pk, ActingOwner acting_owner) {
  auto out = inner_->remove(pk, acting_owner);
  // The mappings to the key and those of its programs went with it.
  forget_profile(pk);
  forget_mappings();
  return out;
}

Expected<MappingResult> ReadViewBackend::put_profile_key(std::string_view ik, std::string_view pk) {
  auto out = inner_->put_profile_key(ik, pk);
  forget_mapping(profile_keys_, ik);
  return out;
}

Expected<bool> ReadViewBackend::remove_profile_key(std::string_view ik) {
  auto out = inner_->remove_profile_key(ik);
  forget_mapping(profile_keys_, ik);
  return out;
}

Expected<MappingResult> ReadViewBackend::put_virtual_key(std::string_view ck, std::string_view vk,
                                                         std::string_view ik) {
  auto out = inner_->put_virtual_key(ck, vk, ik);
  forget_mapping(virtual_keys_, ck);
  return out;
}

Expected<bool> ReadViewBackend::remove_virtual_key(std::string_view ck) {
  auto out = inner_->remove_virtual_key(ck);
  forget_mapping(virtual_keys_, ck);
  return out;
}

Expected<MappingRemoval> ReadViewBackend::remove_mappings(std::string_view ik) {
  auto out = inner_->remove_mappings(ik);
  forget_mappings(); // the CK -> VK mappings recorded for ik are not known here
  return out;
}

Expected<bool> ReadViewBackend::remove_program(std::string_view ik) {
  auto out = inner_->remove_program(ik);
  forget_mappings();
  return out;
}

Expected<std::vector<ImportedProfile>> ReadViewBackend::import_bundle(const nlohmann::json& bundle,
                                                                      std::int64_t owner,
                                                                      ImportConflict policy,
                                                                      ActingOwner acting_owner,
                                                                      ImportNewKeys new_keys) {
  auto out = inner_->import_bundle(bundle, owner, policy, acting_owner, new_keys);
  forget_all();
  return out;
}

} // namespace fdo::profile_store
