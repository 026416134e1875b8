#include "profile_service.h"

namespace fdo::daemon {

namespace ps = fdo::profile_store;

void ProfileService::forget_profile(const std::string& pk) {
  p_.feedback.forget(pk);
  p_.guard.forget(pk);
  p_.lifecycles.forget(pk);
}

Status ProfileService::forget_program(const std::string& ik) {
  FDO_TRY_STATUS(p_.programs.forget(ik));
  p_.orch.evict(ik); // storage keys start with the IK: VK and CK entries alike
  return ok();
}

Status ProfileService::pin(const std::string& pk, ps::ActingOwner acting) {
  return p_.store.pin(pk, acting);
}

Status ProfileService::unpin(const std::string& pk, ps::ActingOwner acting) {
  return p_.store.unpin(pk, acting);
}

Status ProfileService::reset(const std::string& pk, ps::ActingOwner acting) {
  FDO_TRY_STATUS(p_.store.reset(pk, acting));
  forget_profile(pk);
  return ok();
}

Expected<ps::RemoveSummary> ProfileService::remove_profile(const std::string& pk,
                                                           ps::ActingOwner acting) {
  FDO_TRY(ps::RemoveSummary r, p_.store.remove(pk, acting));
  forget_profile(pk);
  return r;
}

Expected<std::vector<ps::ImportedProfile>>
ProfileService::import_bundle(const nlohmann::json& bundle, std::int64_t owner,
                              ps::ActingOwner acting, ps::ImportNewKeys new_keys) {
  FDO_TRY(std::vector<ps::ImportedProfile> imported,
          p_.store.import_bundle(bundle, owner, ps::ImportConflict::overwrite, acting, new_keys));
  for (const auto& i : imported)
    if (i.action == ps::ImportAction::created || i.action == ps::ImportAction::updated)
      forget_profile(i.pk); // rewritten behind the feedback loop
  return imported;
}

Expected<bool> ProfileService::remove_program(const std::string& ik) {
  FDO_TRY(ps::MappingRemoval mappings, p_.store.remove_mappings(ik));
  (void)mappings;
  FDO_TRY(bool removed, p_.store.remove_program(ik));
  FDO_TRY_STATUS(forget_program(ik));
  return removed;
}

Expected<ps::BackupSummary> ProfileService::restore(const std::string& file) {
  // Rows batched before the restore belong to the old store's versions.
  FDO_TRY_STATUS(p_.feedback.flush());
  FDO_TRY(ps::BackupSummary r, p_.store.restore_from(file));
  p_.feedback.forget_all();
  p_.guard.forget_all();
  p_.lifecycles.forget_all();
  p_.programs.forget_loaded();
  // Compiled objects are keyed by content (IK and profile digest): still valid.
  return r;
}

Expected<bool> ProfileService::collect_program(const std::string& ik, std::int64_t cutoff_ms) {
  FDO_TRY(std::optional<ps::ProgramInfo> now, p_.store.program(ik));
  if (!now || now->last_used >= cutoff_ms) return false;
  return remove_program(ik);
}

Expected<bool> ProfileService::collect_profile(const std::string& pk, std::int64_t cutoff_ms) {
  FDO_TRY(std::optional<ps::ProfileSummary> now, p_.store.summary(pk));
  if (!now || now->pinned || now->updated_at >= cutoff_ms) return false;
  FDO_TRY(ps::RemoveSummary r, remove_profile(pk, std::nullopt));
  (void)r;
  return true;
}

std::size_t ProfileService::evict_object(const std::string& storage_key) {
  return p_.orch.evict(storage_key);
}

} // namespace fdo::daemon
