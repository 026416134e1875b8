// What the lifecycle's tests share (program_lifecycle_test.cpp,
// program_lifecycle_model_test.cpp): a fixed clock, profile facts, configs.
#pragma once

#include "fdo/daemon/lifecycle.h"

#include <string>
#include <vector>

namespace fdo::daemon::testing {

using Clock = ProgramLifecycle::Clock;

inline const Clock::time_point kT0 = Clock::time_point(std::chrono::hours(24 * 365 * 50));

inline ProfileFacts none() {
  ProfileFacts f;
  f.digest = std::string(no_profile_digest());
  return f;
}

inline ProfileFacts facts(std::int64_t version, std::string digest, CompileMode mode,
                          bool mode_set = false) {
  ProfileFacts f;
  f.version = version;
  f.digest = std::move(digest);
  f.mode = mode;
  f.mode_set = mode_set;
  return f;
}

inline LifecycleConfig config() {
  LifecycleConfig c;
  c.guard = true;
  c.sync_tier_up = true;
  c.max_rewrites_per_hour = 12;
  c.cs_round = true;
  return c;
}

inline StageRun ran_as_planned(std::int64_t stage, const std::string& digest, CompileMode mode,
                               bool trial = false) {
  StageRun r;
  r.stage = stage;
  r.planned_digest = digest;
  r.served_digest = digest;
  r.served_mode = mode;
  r.trial = trial;
  return r;
}

inline std::vector<Cause> causes(const ProgramLifecycle& lc) {
  std::vector<Cause> out;
  for (const Transition& t : lc.history())
    out.push_back(t.cause);
  return out;
}

} // namespace fdo::daemon::testing
