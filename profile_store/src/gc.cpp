#include "fdo/profile_store/gc.h"

namespace fdo::profile_store {

Expected<GcPlan> plan_gc(const ProfileStore& store, const GcCriteria& criteria) {
  if (criteria.max_age.count() < 0)
    return make_error(Errc::invalid_argument, "gc: the maximum age must not be negative");
  GcPlan plan;
  plan.cutoff_ms = criteria.now_ms - criteria.max_age.count();
  FDO_TRY(std::vector<ProgramInfo> programs, store.programs());
  // The profile keys some remaining program uses: its recorded key, or the
  // IK -> PK mapping for rows from before keys were recorded with programs.
  std::set<std::string> used_profiles;
  for (ProgramInfo& p : programs) {
    bool candidate = !criteria.owner || p.owner == *criteria.owner;
    if (candidate && p.last_used < plan.cutoff_ms) {
      plan.programs.push_back(std::move(p));
      continue;
    }
    plan.kept_programs.insert(p.ik);
    if (!p.pk.empty()) used_profiles.insert(p.pk);
    FDO_TRY(std::optional<std::string> mapped, store.lookup_profile_key(p.ik));
    if (mapped) used_profiles.insert(*mapped);
  }
  FDO_TRY(std::vector<ProfileSummary> profiles, store.list(criteria.owner));
  for (ProfileSummary& s : profiles)
    if (!s.pinned && s.updated_at < plan.cutoff_ms && !used_profiles.contains(s.pk))
      plan.profiles.push_back(std::move(s));
  return plan;
}

} // namespace fdo::profile_store
