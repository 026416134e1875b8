// The feedback policy: folds stage results into per-profile accumulators and
// decides when the profile for a profile key is rewritten. Pure logic, no I/O;
// the daemon persists accumulators as feedback rows and writes the decided
// profile through the store's versioned write.
#pragma once

#include "fdo/daemon/lifecycle.h"
#include "fdo/daemon/policy_config.h"
#include "fdo/util/profile.h"

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace fdo::daemon {

struct FunctionCounts {
  std::uint64_t cfg_hash = 0;
  std::vector<std::uint64_t> counts;
  // Value profiles, site by site (FunctionProfile::indirect_calls / memop_sizes).
  std::vector<ValueSite> indirect_calls{};
  std::vector<ValueSite> memop_sizes{};
  // Argument value profiles (FunctionProfile::arg_values).
  std::vector<ArgValues> arg_values{};
};

// Per-branch taken/not-taken figures the compiler reported for a function
// (from the profile-annotated IR), used to choose unpredictable branches,
// and the branch-miss samples attributed to the branch (block_samples.h).
struct BranchStat {
  std::uint32_t index = 0;
  std::uint64_t taken = 0;
  std::uint64_t not_taken = 0;
  std::uint64_t misses = 0; // sampled branch misses under the current version
};

// What one execution produced.
struct StageFeedback {
  std::map<std::string, FunctionCounts> counts;  // PGO name -> counters (instrumented stages)
  std::uint64_t exec_ns = 0;                     // wall time of the call
  std::map<std::string, std::uint64_t> counters; // hardware event -> count (only counted events)
  // CPU time of the worker process during the call (every thread); unset
  // when the reply has none.
  std::optional<std::uint64_t> cpu_ns;
};

// Running totals for one (profile key, profile version).
// Which parts of a stage's feedback an accumulator takes (the lifecycle's
// StageUse says which a stage may give).
enum class CountsPart { taken, left };
enum class CountersPart { taken, left };

class FeedbackAccumulator {
public:
  void add(const StageFeedback& stage);
  void add(const StageFeedback& stage, CountsPart counts, CountersPart counters);
  // Merge totals loaded from the store (feedback rows) into this accumulator.
  void merge(const FeedbackAccumulator& other);

  std::int64_t stages() const { return stages_; }
  std::uint64_t exec_ns_sum() const { return exec_ns_sum_; }
  std::uint64_t total_counts() const;
  const std::map<std::string, FunctionCounts>& counts() const { return counts_; }
  const std::map<std::string, std::uint64_t>& counters() const { return counters_; }

  void set_totals(std::int64_t stages, std::uint64_t exec_ns_sum) {
    stages_ = stages;
    exec_ns_sum_ = exec_ns_sum;
  }
  std::map<std::string, FunctionCounts>& mutable_counts() { return counts_; }
  std::map<std::string, std::uint64_t>& mutable_counters() { return counters_; }

private:
  std::int64_t stages_ = 0;
  std::uint64_t exec_ns_sum_ = 0;
  std::map<std::string, FunctionCounts> counts_;
  std::map<std::string, std::uint64_t> counters_;
};

enum class PolicyAction { keep, rewrite };

struct PolicyInput {
  const ProfileDoc* current = nullptr; // nullptr: no profile yet
  std::int64_t current_version = 0;
  bool pinned = false;
  const FeedbackAccumulator* feedback = nullptr; // totals under current_version
  // Branch statistics per function from the current optimized compile, if any.
  const std::map<std::string, std::vector<BranchStat>>* branch_stats = nullptr;
  // Sampled L1 i-cache misses per function (PGO name) under current_version
  // (icache_layout.h).
  const std::map<std::string, std::uint64_t>* icache_samples = nullptr;
  std::chrono::system_clock::time_point now;
};

// The rate cap is not the policy's: the program's lifecycle approves every
// rewrite (lifecycle.h), so it is counted in one place.
struct PolicyDecision {
  PolicyAction action = PolicyAction::keep;
  RewriteKind kind = RewriteKind::counts; // what the rewrite is for, when action == rewrite
  std::string reason; // why (for logs, explain and the new version's provenance)
  double drift = 0.0;
  ProfileDoc profile; // the new profile when action == rewrite
};

// Weighted total-variation distance between the branch distributions of an
// existing profile and fresh counts: 0 = same shape, 1 = disjoint or new.
double count_drift(const std::map<std::string, FunctionProfile>& old_functions,
                   const std::map<std::string, FunctionCounts>& fresh);
// How far fresh counts are from a profile's, as one figure (0..1): the
// larger of count_drift (the branch distributions within each function) and
// the total-variation distance between the functions' shares of all counts
// (which functions are hot). Below policy.drift_threshold a re-profile found
// what that profile already holds (docs/lifecycle.md).
double counts_distance(const std::map<std::string, FunctionProfile>& old_functions,
                       const std::map<std::string, FunctionCounts>& fresh);

PolicyDecision decide(const PolicyConfig& config, const PolicyInput& input);

} // namespace fdo::daemon
