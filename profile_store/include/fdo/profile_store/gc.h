// What garbage collection of the store would remove (docs/profile_store.md,
// "Garbage collection"; `fdoctl gc`, the daemon's gc method): programs not
// used for longer than a maximum age, and profiles not written, pinned,
// unpinned or reset for that long that no remaining program uses. A pinned
// profile is never collected. Planning reads only; the caller deletes what
// the plan names (the daemon also drops its caches of them) and decides
// which cached objects became orphans (plan.kept_programs).
#pragma once

#include "fdo/profile_store/profile_store.h"

#include <chrono>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace fdo::profile_store {

struct GcCriteria {
  std::chrono::milliseconds max_age{0};
  std::int64_t now_ms = 0; // unix ms the age is measured from
  // Only this uid's programs and profiles are candidates; nullopt: everyone's.
  // Either way a profile stays while any remaining program (of any owner) maps to it.
  std::optional<std::int64_t> owner;
};

struct GcPlan {
  std::int64_t cutoff_ms = 0;           // older than this (strictly) is collected
  std::vector<ProgramInfo> programs;    // last used before the cutoff
  std::vector<ProfileSummary> profiles; // unpinned, updated before the cutoff, unused
  std::set<std::string> kept_programs;  // every registered program that stays (any owner)
};

// invalid_argument for a negative age.
Expected<GcPlan> plan_gc(const ProfileStore& store, const GcCriteria& criteria);

} // namespace fdo::profile_store
