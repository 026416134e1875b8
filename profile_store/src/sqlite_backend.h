// The SQLite back end: the store in one database file (WAL), one write
// connection and a pool of read connections. Its state is SqliteBackend::Impl
// (internal.h); its members are defined across this folder by topic
// (open.cpp, profiles.cpp, mappings.cpp, feedback.cpp, bundle.cpp, backup.cpp).
#pragma once

#include "fdo/profile_store/backend.h"

#include <memory>

namespace fdo::profile_store {

class SqliteBackend final : public Backend {
public:
  // ProfileStore::open for a filesystem path.
  static Expected<std::unique_ptr<Backend>> open(const std::string& path, const Options& options);

  struct Impl; // public only so the implementation's helpers can name it
  explicit SqliteBackend(std::unique_ptr<Impl> impl);
  ~SqliteBackend() override;

  StoreKind kind() const override;
  std::string location() const override;
  const std::string& path() const override;
  std::optional<bool> change_listener_up() const override { return std::nullopt; }
  Options options() const override;
  Status set_retention(int versions) override;
  Expected<int> schema_version() const override;
  Status integrity_check() const override;
  Expected<BackupSummary> restore_from(const std::string& from_path) override;

  Expected<std::optional<StoredProfile>> current(std::string_view pk) const override;
  std::optional<std::uint64_t> database_reads() const override;
  Expected<std::optional<StoredProfile>> get(std::string_view pk,
                                             std::int64_t version) const override;
  Expected<std::vector<StoredProfile>> history(std::string_view pk) const override;
  Expected<std::optional<std::int64_t>> owner(std::string_view pk) const override;
  Expected<std::optional<ProfileSummary>> summary(std::string_view pk) const override;
  Expected<std::int64_t> write(std::string_view pk, std::int64_t expected_version,
                               const ProfileDoc& doc, const WriteInfo& info) override;
  Expected<std::vector<std::int64_t>> write_batch(std::span<const WriteRequest> requests) override;
  Status pin(std::string_view pk, ActingOwner acting_owner) override;
  Status unpin(std::string_view pk, ActingOwner acting_owner) override;
  Status reset(std::string_view pk, ActingOwner acting_owner) override;
  Expected<RemoveSummary> remove(std::string_view pk, ActingOwner acting_owner) override;
  Expected<std::vector<ProfileSummary>> list(std::optional<std::int64_t> owner) const override;

  Expected<std::optional<std::string>> lookup_profile_key(std::string_view ik) const override;
  Expected<MappingResult> put_profile_key(std::string_view ik, std::string_view pk) override;
  Expected<bool> remove_profile_key(std::string_view ik) override;
  Expected<std::optional<std::string>> lookup_virtual_key(std::string_view ck) const override;
  Expected<MappingResult> put_virtual_key(std::string_view ck, std::string_view vk,
                                          std::string_view ik) override;
  Expected<bool> remove_virtual_key(std::string_view ck) override;
  Expected<MappingRemoval> remove_mappings(std::string_view ik) override;

  Expected<ProgramInfo> register_program(const ProgramInfo& program) override;
  Status touch_program(std::string_view ik) override;
  Expected<std::optional<ProgramInfo>> program(std::string_view ik) const override;
  Expected<std::vector<ProgramInfo>> programs(std::optional<std::int64_t> owner) const override;
  Expected<std::int64_t> count_programs(std::int64_t owner) const override;
  Expected<bool> remove_program(std::string_view ik) override;
  Expected<bool> owns_program_with_profile_key(std::int64_t owner,
                                               std::string_view pk) const override;

  Expected<AppendResult> append_feedback(std::span<const FeedbackRow> rows,
                                         std::string_view batch_id) override;
  Expected<std::optional<FeedbackTotals>> feedback(std::string_view pk,
                                                   std::int64_t version) const override;

  Expected<nlohmann::json> export_bundle(std::span<const std::string> pks,
                                         ExportHistory history) const override;
  Expected<nlohmann::json> export_all(ExportHistory history) const override;
  Expected<std::vector<ImportedProfile>> import_bundle(const nlohmann::json& bundle,
                                                       std::int64_t owner, ImportConflict policy,
                                                       ActingOwner acting_owner,
                                                       ImportNewKeys new_keys) override;

private:
  std::unique_ptr<Impl> impl_;
};

} // namespace fdo::profile_store
