// The operations that change the profile store behind the stage path, each
// with what it makes stale, in one place (docs/ARCHITECTURE.md, "Life of a
// stage"). The stage path keeps per key: the feedback loop's running totals
// and drift window, the guard's trial and record, the program's lifecycle;
// per program: the registry's record and the compiled objects in every tier.
//
//   pin, unpin     nothing: every stage reads the pin with the profile
//   reset          the key's feedback, guard and lifecycle state
//   remove_profile the same
//   import         the same, for each key it created or rewrote
//   remove_program the program's record and its compiled objects
//   restore        all of the above, for every key (feedback flushed first)
//   collect_*      gc: remove_program / remove_profile, re-checked against
//                  the cutoff just before removing
//
// The store's read view drops a key by itself on every write (and on other
// hosts' writes through PostgreSQL's notifications). Method handlers change
// the store only through this class.
#pragma once

#include "fdo/cache/orchestrator.h"
#include "fdo/daemon/feedback_loop.h"
#include "fdo/daemon/guard.h"
#include "fdo/daemon/lifecycle.h"
#include "fdo/daemon/program_registry.h"
#include "fdo/profile_store/profile_store.h"

#include <cstdint>
#include <string>
#include <vector>

namespace fdo::daemon {

class ProfileService {
public:
  struct Parts {
    profile_store::ProfileStore& store;
    FeedbackLoop& feedback;
    Guard& guard;
    LifecycleTable& lifecycles;
    ProgramRegistry& programs;
    cache::Orchestrator& orch;
  };
  explicit ProfileService(Parts parts) : p_(parts) {}

  // For reads (list, get, history, export, ownership checks).
  profile_store::ProfileStore& store() const { return p_.store; }

  Status pin(const std::string& pk, profile_store::ActingOwner acting);
  Status unpin(const std::string& pk, profile_store::ActingOwner acting);
  Status reset(const std::string& pk, profile_store::ActingOwner acting);
  Expected<profile_store::RemoveSummary> remove_profile(const std::string& pk,
                                                        profile_store::ActingOwner acting);
  Expected<std::vector<profile_store::ImportedProfile>>
  import_bundle(const nlohmann::json& bundle, std::int64_t owner, profile_store::ActingOwner acting,
                profile_store::ImportNewKeys new_keys);
  // The program's key mappings and row; whether the row was there.
  Expected<bool> remove_program(const std::string& ik);
  Expected<profile_store::BackupSummary> restore(const std::string& file);

  // gc's removals: false (nothing removed) when the program was used, or the
  // profile pinned or written, at or after `cutoff_ms` since gc planned.
  Expected<bool> collect_program(const std::string& ik, std::int64_t cutoff_ms);
  Expected<bool> collect_profile(const std::string& pk, std::int64_t cutoff_ms);
  // A cached object whose program is gone (gc): how many tiers held it.
  std::size_t evict_object(const std::string& storage_key);

private:
  void forget_profile(const std::string& pk);
  Status forget_program(const std::string& ik);

  Parts p_;
};

} // namespace fdo::daemon
