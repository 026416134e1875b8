// The back end behind the ProfileStore facade: one implementation per
// storage engine (SQLite in src/sqlite_backend.h, PostgreSQL in src/pg/).
// Every member has the meaning documented on the ProfileStore member of the
// same name; a back end that cannot do something (restore_from on
// PostgreSQL, say) returns Errc::unsupported naming the back end.
#pragma once

#include "fdo/profile_store/profile_store.h"

namespace fdo::profile_store {

class Backend {
public:
  virtual ~Backend() = default;

  virtual StoreKind kind() const = 0;
  virtual std::string location() const = 0;
  virtual const std::string& path() const = 0;
  virtual std::optional<bool> change_listener_up() const = 0;
  virtual Options options() const = 0;
  virtual Status set_retention(int versions) = 0;
  virtual Expected<int> schema_version() const = 0;
  virtual Status integrity_check() const = 0;
  virtual Expected<BackupSummary> restore_from(const std::string& from_path) = 0;

  virtual Expected<std::optional<StoredProfile>> current(std::string_view pk) const = 0;
  // By default a copy of current() in a shared pointer; the read view
  // (read_view.h) keeps and hands out one.
  virtual Expected<std::shared_ptr<const StoredProfile>> current_shared(std::string_view pk) const;
  virtual std::optional<std::uint64_t> database_reads() const { return std::nullopt; }
  virtual Expected<std::optional<StoredProfile>> get(std::string_view pk,
                                                     std::int64_t version) const = 0;
  virtual Expected<std::vector<StoredProfile>> history(std::string_view pk) const = 0;
  virtual Expected<std::optional<std::int64_t>> owner(std::string_view pk) const = 0;
  virtual Expected<std::optional<ProfileSummary>> summary(std::string_view pk) const = 0;
  virtual Expected<std::int64_t> write(std::string_view pk, std::int64_t expected_version,
                                       const ProfileDoc& doc, const WriteInfo& info) = 0;
  virtual Expected<std::vector<std::int64_t>>
  write_batch(std::span<const WriteRequest> requests) = 0;
  virtual Status pin(std::string_view pk, ActingOwner acting_owner) = 0;
  virtual Status unpin(std::string_view pk, ActingOwner acting_owner) = 0;
  virtual Status reset(std::string_view pk, ActingOwner acting_owner) = 0;
  virtual Expected<RemoveSummary> remove(std::string_view pk, ActingOwner acting_owner) = 0;
  virtual Expected<std::vector<ProfileSummary>> list(std::optional<std::int64_t> owner) const = 0;

  virtual Expected<std::optional<std::string>> lookup_profile_key(std::string_view ik) const = 0;
  virtual Expected<MappingResult> put_profile_key(std::string_view ik, std::string_view pk) = 0;
  virtual Expected<bool> remove_profile_key(std::string_view ik) = 0;
  virtual Expected<std::optional<std::string>> lookup_virtual_key(std::string_view ck) const = 0;
  virtual Expected<MappingResult> put_virtual_key(std::string_view ck, std::string_view vk,
                                                  std::string_view ik) = 0;
  virtual Expected<bool> remove_virtual_key(std::string_view ck) = 0;
  virtual Expected<MappingRemoval> remove_mappings(std::string_view ik) = 0;

  virtual Expected<ProgramInfo> register_program(const ProgramInfo& program) = 0;
  virtual Status touch_program(std::string_view ik) = 0;
  virtual Expected<std::optional<ProgramInfo>> program(std::string_view ik) const = 0;
  virtual Expected<std::vector<ProgramInfo>> programs(std::optional<std::int64_t> owner) const = 0;
  virtual Expected<std::int64_t> count_programs(std::int64_t owner) const = 0;
  virtual Expected<bool> remove_program(std::string_view ik) = 0;
  virtual Expected<bool> owns_program_with_profile_key(std::int64_t owner,
                                                       std::string_view pk) const = 0;

  virtual Expected<AppendResult> append_feedback(std::span<const FeedbackRow> rows,
                                                 std::string_view batch_id) = 0;
  virtual Expected<std::optional<FeedbackTotals>> feedback(std::string_view pk,
                                                           std::int64_t version) const = 0;

  virtual Expected<nlohmann::json> export_bundle(std::span<const std::string> pks,
                                                 ExportHistory history) const = 0;
  virtual Expected<nlohmann::json> export_all(ExportHistory history) const = 0;
  virtual Expected<std::vector<ImportedProfile>>
  import_bundle(const nlohmann::json& bundle, std::int64_t owner, ImportConflict policy,
                ActingOwner acting_owner, ImportNewKeys new_keys) = 0;
};

} // namespace fdo::profile_store
