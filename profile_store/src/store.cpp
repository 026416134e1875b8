// The ProfileStore facade: picks the back end from the location and forwards
// every call to it (backend.h).
#include "fdo/profile_store/backend.h"
#include "fdo/profile_store/location.h"
#include "pg/backend.h"
#include "read_view.h"
#include "sqlite_backend.h"

namespace fdo::profile_store {

std::string_view to_string(StoreKind kind) {
  return kStoreKindNames.name(kind);
}

bool ProfileStore::is_postgres_location(std::string_view location) {
  return is_postgres_uri(location);
}

ProfileStore::ProfileStore(std::unique_ptr<Backend> backend) : impl_(std::move(backend)) {}
ProfileStore::ProfileStore(ProfileStore&&) noexcept = default;
ProfileStore& ProfileStore::operator=(ProfileStore&&) noexcept = default;
ProfileStore::~ProfileStore() = default;

Expected<ProfileStore> ProfileStore::open(const std::string& location, const Options& options) {
  const bool pg = is_postgres_location(location);
  FDO_TRY(std::unique_ptr<Backend> backend,
          pg ? PgBackend::open(location, options) : SqliteBackend::open(location, options));
  if (!pg && options.read_view == ReadView::in_process && options.mode == OpenMode::read_write)
    backend = std::make_unique<ReadViewBackend>(std::move(backend));
  return ProfileStore(std::move(backend));
}

StoreKind ProfileStore::kind() const {
  return impl_->kind();
}

std::string ProfileStore::location() const {
  return impl_->location();
}

std::optional<bool> ProfileStore::change_listener_up() const {
  return impl_->change_listener_up();
}

const std::string& ProfileStore::path() const {
  return impl_->path();
}

Options ProfileStore::options() const {
  return impl_->options();
}

Status ProfileStore::set_retention(int versions) {
  return impl_->set_retention(versions);
}

Expected<int> ProfileStore::schema_version() const {
  return impl_->schema_version();
}

Status ProfileStore::integrity_check() const {
  return impl_->integrity_check();
}

Expected<BackupSummary> ProfileStore::restore_from(const std::string& from_path) {
  return impl_->restore_from(from_path);
}

Expected<std::optional<StoredProfile>> ProfileStore::current(std::string_view pk) const {
  return impl_->current(pk);
}

Expected<std::shared_ptr<const StoredProfile>>
ProfileStore::current_shared(std::string_view pk) const {
  return impl_->current_shared(pk);
}

std::optional<std::uint64_t> ProfileStore::database_reads() const {
  return impl_->database_reads();
}

Expected<std::shared_ptr<const StoredProfile>> Backend::current_shared(std::string_view pk) const {
  FDO_TRY(std::optional<StoredProfile> cur, current(pk));
  if (!cur) return std::shared_ptr<const StoredProfile>();
  return std::shared_ptr<const StoredProfile>(std::make_shared<StoredProfile>(std::move(*cur)));
}

Expected<std::optional<StoredProfile>> ProfileStore::get(std::string_view pk,
                                                         std::int64_t version) const {
  return impl_->get(pk, version);
}

Expected<std::vector<StoredProfile>> ProfileStore::history(std::string_view pk) const {
  return impl_->history(pk);
}

Expected<std::optional<std::int64_t>> ProfileStore::owner(std::string_view pk) const {
  return impl_->owner(pk);
}

Expected<std::optional<ProfileSummary>> ProfileStore::summary(std::string_view pk) const {
  return impl_->summary(pk);
}

Expected<std::int64_t> ProfileStore::write(std::string_view pk, std::int64_t expected_version,
                                           const ProfileDoc& doc, const WriteInfo& info) {
  return impl_->write(pk, expected_version, doc, info);
}

Expected<std::vector<std::int64_t>>
ProfileStore::write_batch(std::span<const WriteRequest> requests) {
  return impl_->write_batch(requests);
}

Status ProfileStore::pin(std::string_view pk, ActingOwner acting_owner) {
  return impl_->pin(pk, acting_owner);
}

Status ProfileStore::unpin(std::string_view pk, ActingOwner acting_owner) {
  return impl_->unpin(pk, acting_owner);
}

Status ProfileStore::reset(std::string_view pk, ActingOwner acting_owner) {
  return impl_->reset(pk, acting_owner);
}

Expected<RemoveSummary> ProfileStore::remove(std::string_view pk, ActingOwner acting_owner) {
  return impl_->remove(pk, acting_owner);
}

Expected<std::vector<ProfileSummary>> ProfileStore::list(std::optional<std::int64_t> owner) const {
  return impl_->list(owner);
}

Expected<std::optional<std::string>> ProfileStore::lookup_profile_key(std::string_view ik) const {
  return impl_->lookup_profile_key(ik);
}

Expected<MappingResult> ProfileStore::put_profile_key(std::string_view ik, std::string_view pk) {
  return impl_->put_profile_key(ik, pk);
}

Expected<bool> ProfileStore::remove_profile_key(std::string_view ik) {
  return impl_->remove_profile_key(ik);
}

Expected<std::optional<std::string>> ProfileStore::lookup_virtual_key(std::string_view ck) const {
  return impl_->lookup_virtual_key(ck);
}

Expected<MappingResult> ProfileStore::put_virtual_key(std::string_view ck, std::string_view vk,
                                                      std::string_view ik) {
  return impl_->put_virtual_key(ck, vk, ik);
}

Expected<bool> ProfileStore::remove_virtual_key(std::string_view ck) {
  return impl_->remove_virtual_key(ck);
}

Expected<MappingRemoval> ProfileStore::remove_mappings(std::string_view ik) {
  return impl_->remove_mappings(ik);
}

Expected<ProgramInfo> ProfileStore::register_program(const ProgramInfo& program) {
  return impl_->register_program(program);
}

Status ProfileStore::touch_program(std::string_view ik) {
  return impl_->touch_program(ik);
}

Expected<std::optional<ProgramInfo>> ProfileStore::program(std::string_view ik) const {
  return impl_->program(ik);
}

Expected<std::vector<ProgramInfo>> ProfileStore::programs(std::optional<std::int64_t> owner) const {
  return impl_->programs(owner);
}

Expected<std::int64_t> ProfileStore::count_programs(std::int64_t owner) const {
  return impl_->count_programs(owner);
}

Expected<bool> ProfileStore::remove_program(std::string_view ik) {
  return impl_->remove_program(ik);
}

Expected<bool> ProfileStore::owns_program_with_profile_key(std::int64_t owner,
                                                           std::string_view pk) const {
  return impl_->owns_program_with_profile_key(owner, pk);
}

Expected<AppendResult> ProfileStore::append_feedback(std::span<const FeedbackRow> rows,
                                                     std::string_view batch_id) {
  return impl_->append_feedback(rows, batch_id);
}

Expected<std::optional<FeedbackTotals>> ProfileStore::feedback(std::string_view pk,
                                                               std::int64_t version) const {
  return impl_->feedback(pk, version);
}

Expected<nlohmann::json> ProfileStore::export_bundle(std::span<const std::string> pks,
                                                     ExportHistory history) const {
  return impl_->export_bundle(pks, history);
}

Expected<nlohmann::json> ProfileStore::export_all(ExportHistory history) const {
  return impl_->export_all(history);
}

Expected<std::vector<ImportedProfile>>
ProfileStore::import_bundle(const nlohmann::json& bundle, std::int64_t owner, ImportConflict policy,
                            ActingOwner acting_owner, ImportNewKeys new_keys) {
  return impl_->import_bundle(bundle, owner, policy, acting_owner, new_keys);
}

} // namespace fdo::profile_store
