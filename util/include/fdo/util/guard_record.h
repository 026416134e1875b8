// The guard's part of a profile document (docs/guard.md): which compiled
// variant of the program is served (the incumbent), the knob tuning's
// progress, and the history of live A/B trials with their verdicts. It is
// bookkeeping: it never enters the profile digest. What it selects (the
// variant) is compiled from a document derived from the profile, so every
// variant's cache key still follows from the profile.
#pragma once

#include "fdo/util/expected.h"

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fdo {

struct Knobs;

// What a variant compiles from: nothing (the plain -O2 build, no profile) or
// the current profile's counts.
enum class VariantBase { plain, profiled };
std::string_view to_string(VariantBase b);

enum class TrialVerdict { accepted, rejected, no_difference };
std::string_view to_string(TrialVerdict v);
// "accepted", "rejected", "no_difference"; nullopt for anything else.
std::optional<TrialVerdict> parse_trial_verdict(std::string_view s);
std::string trial_verdict_alternatives();

// One finished trial, kept for people ("v1 profiled O2 rejected: 1.07x slower
// than plain O2 over 12+12 stages").
struct TrialRecord {
  std::string candidate; // the candidate as described at the time
  std::string incumbent; // what it was compared with
  TrialVerdict verdict = TrialVerdict::no_difference;
  double ratio = 1.0; // candidate time / incumbent time (median of pairs)
  int candidate_stages = 0;
  int incumbent_stages = 0;
  bool early_stop = false; // the early stop before the sequential test (always false since)
  std::int64_t profile_version = 0; // the profile version it was decided under
  std::string decided_at;           // RFC 3339 UTC
  std::string summary;              // the line above

  bool operator==(const TrialRecord&) const = default;
};

// A trial still running, saved every few pairs so that a daemon restart
// continues it instead of starting over (docs/guard.md).
struct TrialCheckpoint {
  static constexpr std::size_t kMaxSamples = 1024; // per arm, checked when read
  std::string id;           // the trial: both variants and the profile digest
  std::string shape;        // the comparable stage shape it counts
  std::int64_t version = 0; // the profile version the trial started under
  std::vector<std::uint64_t> incumbent_ns, candidate_ns; // exec times, in stage order

  bool operator==(const TrialCheckpoint&) const = default;
};

struct GuardRecord {
  static constexpr std::size_t kTrialsKept = 32;
  // The served variant's base and knobs; unset: the guard has not decided yet
  // (the profile is served as it is).
  std::optional<VariantBase> incumbent_base;
  nlohmann::json incumbent_knobs = nullptr; // knobs JSON (profile form) or null
  // A profiled incumbent: the profile version whose counts it compiles from
  // and its variant digest (checked when that version is read back). 0 / ""
  // in documents written before they existed: the current profile's counts.
  std::int64_t incumbent_version = 0;
  std::string incumbent_digest;
  // Profile digest whose profiled variant has been trialled: a different
  // current digest (a new profile) starts a new trial.
  std::string trialled_digest;
  int tuning_step = 0;                    // knob variants tried since the profile was trialled
  std::vector<TrialRecord> trials;        // oldest first, at most kTrialsKept
  std::optional<TrialCheckpoint> running; // the trial under way, if saved

  bool empty() const {
    return !incumbent_base && trialled_digest.empty() && tuning_step == 0 && trials.empty() &&
           !running;
  }
  bool operator==(const GuardRecord&) const = default;
};

nlohmann::json to_json(const GuardRecord& g);
// Validates types and ranges; errors name the offending field under "guard".
Expected<GuardRecord> guard_from_json(const nlohmann::json& j);

} // namespace fdo
