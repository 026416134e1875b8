// The in-process read view (Options::read_view = ReadView::in_process): a
// back end in front of the SQLite one that keeps current profiles and the
// IK -> PK and CK -> VK mappings in memory, so a steady program's stage reads
// nothing from the file and copies no profile.
//
// Coherence: the opening process is the store's only writer (fdod holds its
// state directory's lock), so every change goes through this object. Each
// change forgets what it may have changed before the inner call and again
// after it returns (also on failure: a failed transaction may still have been
// committed by a retry inside it); a whole-store change (import, restore)
// forgets everything. A read that raced with a change does not keep what it
// read: reads take the view's epoch before asking the inner back end and
// keep only if no change began or ended since and none is in flight (a read
// during a change may see the new row or the old one; the old one kept after
// another reader was given the new one would take a version back).
//
// Bounded: profiles by the bytes of their bodies (least recently used go
// first; a body over a quarter of the budget is served but not kept), mappings
// by count (forgotten wholesale past it; they refill on demand).
#pragma once

#include "fdo/profile_store/backend.h"

#include <functional>
#include <list>
#include <mutex>
#include <unordered_map>

namespace fdo::profile_store {

class ReadViewBackend final : public Backend {
public:
  static constexpr std::size_t kProfileBudgetBytes = 64u << 20;
  static constexpr std::size_t kMaxMappings = 1u << 16;

  explicit ReadViewBackend(std::unique_ptr<Backend> inner,
                           std::size_t profile_budget_bytes = kProfileBudgetBytes);

  StoreKind kind() const override { return inner_->kind(); }
  std::string location() const override { return inner_->location(); }
  const std::string& path() const override { return inner_->path(); }
  std::optional<bool> change_listener_up() const override { return inner_->change_listener_up(); }
  Options options() const override { return inner_->options(); }
  Status set_retention(int versions) override { return inner_->set_retention(versions); }
  Expected<int> schema_version() const override { return inner_->schema_version(); }
  Status integrity_check() const override { return inner_->integrity_check(); }
  Expected<BackupSummary> restore_from(const std::string& from_path) override;

  Expected<std::optional<StoredProfile>> current(std::string_view pk) const override;
  Expected<std::shared_ptr<const StoredProfile>> current_shared(std::string_view pk) const override;
  std::optional<std::uint64_t> database_reads() const override { return inner_->database_reads(); }
  Expected<std::optional<StoredProfile>> get(std::string_view pk,
                                             std::int64_t version) const override {
    return inner_->get(pk, version);
  }
  Expected<std::vector<StoredProfile>> history(std::string_view pk) const override {
    return inner_->history(pk);
  }
  Expected<std::optional<std::int64_t>> owner(std::string_view pk) const override {
    return inner_->owner(pk);
  }
  Expected<std::optional<ProfileSummary>> summary(std::string_view pk) const override {
    return inner_->summary(pk);
  }
  Expected<std::int64_t> write(std::string_view pk, std::int64_t expected_version,
                               const ProfileDoc& doc, const WriteInfo& info) override;
  Expected<std::vector<std::int64_t>> write_batch(std::span<const WriteRequest> requests) override;
  Status pin(std::string_view pk, ActingOwner acting_owner) override;
  Status unpin(std::string_view pk, ActingOwner acting_owner) override;
  Status reset(std::string_view pk, ActingOwner acting_owner) override;
  Expected<RemoveSummary> remove(std::string_view pk, ActingOwner acting_owner) override;
  Expected<std::vector<ProfileSummary>> list(std::optional<std::int64_t> owner) const override {
    return inner_->list(owner);
  }

  Expected<std::optional<std::string>> lookup_profile_key(std::string_view ik) const override;
  Expected<MappingResult> put_profile_key(std::string_view ik, std::string_view pk) override;
  Expected<bool> remove_profile_key(std::string_view ik) override;
  Expected<std::optional<std::string>> lookup_virtual_key(std::string_view ck) const override;
  Expected<MappingResult> put_virtual_key(std::string_view ck, std::string_view vk,
                                          std::string_view ik) override;
  Expected<bool> remove_virtual_key(std::string_view ck) override;
  Expected<MappingRemoval> remove_mappings(std::string_view ik) override;

  Expected<ProgramInfo> register_program(const ProgramInfo& program) override {
    return inner_->register_program(program);
  }
  Status touch_program(std::string_view ik) override { return inner_->touch_program(ik); }
  Expected<std::optional<ProgramInfo>> program(std::string_view ik) const override {
    return inner_->program(ik);
  }
  Expected<std::vector<ProgramInfo>> programs(std::optional<std::int64_t> owner) const override {
    return inner_->programs(owner);
  }
  Expected<std::int64_t> count_programs(std::int64_t owner) const override {
    return inner_->count_programs(owner);
  }
  Expected<bool> remove_program(std::string_view ik) override;
  Expected<bool> owns_program_with_profile_key(std::int64_t owner,
                                               std::string_view pk) const override {
    return inner_->owns_program_with_profile_key(owner, pk);
  }

  Expected<AppendResult> append_feedback(std::span<const FeedbackRow> rows,
                                         std::string_view batch_id) override {
    return inner_->append_feedback(rows, batch_id);
  }
  Expected<std::optional<FeedbackTotals>> feedback(std::string_view pk,
                                                   std::int64_t version) const override {
    return inner_->feedback(pk, version);
  }

  Expected<nlohmann::json> export_bundle(std::span<const std::string> pks,
                                         ExportHistory history) const override {
    return inner_->export_bundle(pks, history);
  }
  Expected<nlohmann::json> export_all(ExportHistory history) const override {
    return inner_->export_all(history);
  }
  Expected<std::vector<ImportedProfile>> import_bundle(const nlohmann::json& bundle,
                                                       std::int64_t owner, ImportConflict policy,
                                                       ActingOwner acting_owner,
                                                       ImportNewKeys new_keys) override;

private:
  using Shared = std::shared_ptr<const StoredProfile>;
  struct ProfileSlot {
    std::string pk;
    Shared value; // null: the key has no current profile
    std::size_t bytes = 0;
  };
  using Mapping = std::unordered_map<std::string, std::optional<std::string>>;

  std::uint64_t begin_read() const;
  void keep_profile(const std::string& pk, std::uint64_t epoch, const Shared& value) const;
  void keep_mapping(Mapping& m, const std::string& key, std::uint64_t epoch,
                    const std::optional<std::string>& value) const;
  Expected<std::optional<std::string>> lookup(Mapping& m, std::string_view key,
                                              bool profile_key) const;
  // A change in flight (read_view.cpp): `forget` (run under mu_) before the
  // inner call and again after it; reads keep nothing meanwhile.
  class Change {
  public:
    Change(const ReadViewBackend& view, std::function<void()> forget);
    ~Change();
    Change(const Change&) = delete;
    Change& operator=(const Change&) = delete;
    // What the change wrote of `pk`, to keep as the change ends if no other
    // change began or ended while it was in flight (then nothing but this
    // change can have moved the key since it wrote); else only forgotten.
    void keep(std::string pk, Shared written);

  private:
    const ReadViewBackend& view_;
    std::function<void()> forget_;
    std::uint64_t begun_ = 0; // the epoch this change's start made
    std::string keep_pk_;
    Shared keep_;
  };
  // Keeps `value` as pk's current profile (under mu_; within the budget).
  void keep_profile_locked(const std::string& pk, const Shared& value) const;
  Change profile_change(std::string_view pk) const;
  Change mapping_change(Mapping& m, std::string_view key) const;
  Change mappings_change() const; // every mapping
  Change whole_change() const;    // everything
  void forget_profile_locked(std::string_view pk) const;
  void forget_all_locked() const;
  void drop(std::list<ProfileSlot>::iterator it) const; // mu_ held

  std::unique_ptr<Backend> inner_;
  const std::size_t budget_;
  mutable std::mutex mu_;
  mutable std::uint64_t epoch_ = 0; // bumped as every change begins and ends
  mutable int changes_in_flight_ = 0;
  mutable std::size_t bytes_ = 0;
  mutable std::list<ProfileSlot> lru_; // most recently used first
  mutable std::unordered_map<std::string, std::list<ProfileSlot>::iterator> profiles_;
  mutable Mapping profile_keys_; // IK -> PK (nullopt: no mapping)
  mutable Mapping virtual_keys_; // CK -> VK
};

} // namespace fdo::profile_store
