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
  std::lock_guard lk(mu_);
  if (epoch != epoch_ || changes_in_flight_ != 0) return;
  keep_profile_locked(pk, value);
}

void ReadViewBackend::keep_profile_locked(const std::string& pk, const Shared& value) const {
  const std::size_t bytes = pk.size() + (value ? value->body.size() : 0);
  if (bytes > budget_ / 4) return;
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
  if (epoch != epoch_ || changes_in_flight_ != 0) return;
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

void ReadViewBackend::forget_profile_locked(std::string_view pk) const {
  if (auto it = profiles_.find(std::string(pk)); it != profiles_.end()) drop(it->second);
}

void ReadViewBackend::forget_all_locked() const {
  profile_keys_.clear();
  virtual_keys_.clear();
  profiles_.clear();
  lru_.clear();
  bytes_ = 0;
}

// What a change may change is forgotten before the inner call (reads meanwhile
// ask the inner back end) and again after it; while any change is in flight
// no read keeps what it read: a read may see the new row before the change
// returns, another one the old row, and the old one must not be kept after a
// reader has been given the new one.
ReadViewBackend::Change::Change(const ReadViewBackend& view, std::function<void()> forget)
    : view_(view), forget_(std::move(forget)) {
  std::lock_guard lk(view_.mu_);
  ++view_.changes_in_flight_;
  begun_ = ++view_.epoch_;
  forget_();
}

void ReadViewBackend::Change::keep(std::string pk, Shared written) {
  keep_pk_ = std::move(pk);
  keep_ = std::move(written);
}

ReadViewBackend::Change::~Change() {
  std::lock_guard lk(view_.mu_);
  forget_();
  --view_.changes_in_flight_;
  // Alone: no change began since this one (each start moves the epoch) and
  // none was in flight beside it (one that began before would still count).
  const bool alone = view_.epoch_ == begun_ && view_.changes_in_flight_ == 0;
  ++view_.epoch_;
  if (keep_ && alone) view_.keep_profile_locked(keep_pk_, keep_);
}

ReadViewBackend::Change ReadViewBackend::profile_change(std::string_view pk) const {
  return Change(*this, [this, key = std::string(pk)] { forget_profile_locked(key); });
}

ReadViewBackend::Change ReadViewBackend::mapping_change(Mapping& m, std::string_view key) const {
  return Change(*this, [&m, k = std::string(key)] { m.erase(k); });
}

ReadViewBackend::Change ReadViewBackend::mappings_change() const {
  return Change(*this, [this] {
    profile_keys_.clear();
    virtual_keys_.clear();
  });
}

ReadViewBackend::Change ReadViewBackend::whole_change() const {
  return Change(*this, [this] { forget_all_locked(); });
}

Expected<BackupSummary> ReadViewBackend::restore_from(const std::string& from_path) {
  Change change = whole_change();
  return inner_->restore_from(from_path);
}

Expected<std::int64_t> ReadViewBackend::write(std::string_view pk, std::int64_t expected_version,
                                              const ProfileDoc& doc, const WriteInfo& info) {
  // The version written is kept as the view's current one (the writer's next
  // read, usually the same stage's, then fetches nothing).
  Shared stored;
  WriteInfo with = info;
  if (with.stored_out == nullptr) with.stored_out = &stored;
  Change change = profile_change(pk);
  auto version = inner_->write(pk, expected_version, doc, with);
  if (version && *with.stored_out) change.keep(std::string(pk), *with.stored_out);
  return version;
}

Expected<std::vector<std::int64_t>>
ReadViewBackend::write_batch(std::span<const WriteRequest> requests) {
  std::vector<std::string> pks;
  for (const WriteRequest& r : requests)
    pks.push_back(r.pk);
  Change change(*this, [this, pks] {
    for (const std::string& pk : pks)
      forget_profile_locked(pk);
  });
  return inner_->write_batch(requests);
}

Status ReadViewBackend::pin(std::string_view pk, ActingOwner acting_owner) {
  Change change = profile_change(pk);
  return inner_->pin(pk, acting_owner);
}

Status ReadViewBackend::unpin(std::string_view pk, ActingOwner acting_owner) {
  Change change = profile_change(pk);
  return inner_->unpin(pk, acting_owner);
}

Status ReadViewBackend::reset(std::string_view pk, ActingOwner acting_owner) {
  Change change = profile_change(pk);
  return inner_->reset(pk, acting_owner);
}

Expected<RemoveSummary> ReadViewBackend::remove(std::string_view pk, ActingOwner acting_owner) {
  // The mappings to the key and those of its programs go with it.
  Change change(*this, [this, key = std::string(pk)] {
    forget_profile_locked(key);
    profile_keys_.clear();
    virtual_keys_.clear();
  });
  return inner_->remove(pk, acting_owner);
}

Expected<MappingResult> ReadViewBackend::put_profile_key(std::string_view ik, std::string_view pk) {
  Change change = mapping_change(profile_keys_, ik);
  return inner_->put_profile_key(ik, pk);
}

Expected<bool> ReadViewBackend::remove_profile_key(std::string_view ik) {
  Change change = mapping_change(profile_keys_, ik);
  return inner_->remove_profile_key(ik);
}

Expected<MappingResult> ReadViewBackend::put_virtual_key(std::string_view ck, std::string_view vk,
                                                         std::string_view ik) {
  Change change = mapping_change(virtual_keys_, ck);
  return inner_->put_virtual_key(ck, vk, ik);
}

Expected<bool> ReadViewBackend::remove_virtual_key(std::string_view ck) {
  Change change = mapping_change(virtual_keys_, ck);
  return inner_->remove_virtual_key(ck);
}

Expected<MappingRemoval> ReadViewBackend::remove_mappings(std::string_view ik) {
  Change change = mappings_change(); // the CK -> VK mappings recorded for ik are not known here
  return inner_->remove_mappings(ik);
}

Expected<bool> ReadViewBackend::remove_program(std::string_view ik) {
  Change change = mappings_change();
  return inner_->remove_program(ik);
}

Expected<std::vector<ImportedProfile>> ReadViewBackend::import_bundle(const nlohmann::json& bundle,
                                                                      std::int64_t owner,
                                                                      ImportConflict policy,
                                                                      ActingOwner acting_owner,
                                                                      ImportNewKeys new_keys) {
  Change change = whole_change();
  return inner_->import_bundle(bundle, owner, policy, acting_owner, new_keys);
}

} // namespace fdo::profile_store
