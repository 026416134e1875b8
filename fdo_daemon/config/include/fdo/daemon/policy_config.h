// The feedback policy's thresholds (the policy.* configuration keys). The
// policy itself (policy.h, in the service) is pure logic over these.
#pragma once

#include <cstdint>

namespace fdo::daemon {

struct PolicyConfig {
  // Stages observed under the current profile version before a rewrite.
  int min_stages = 3;
  // Sum of all instrumentation counts needed before counts are trusted.
  std::uint64_t min_counts = 1000;
  // Rewrite an existing count profile only when the new branch distribution
  // differs by at least this much (weighted total-variation distance, 0..1).
  double drift_threshold = 0.10;
  // At most this many rewrites per profile key in any sliding hour.
  int max_recompiles_per_hour = 12;
  // branch-misses / branch-instructions at or above this marks the near-50/50
  // branches of the hottest functions !unpredictable (PMU hosts only).
  double branch_miss_unpredictable_rate = 0.20;
  // Counted L1-icache-load-misses per 1000 instructions below this means no
  // i-cache pressure worth a layout change, whatever the samples say (where
  // the misses were counted; PMU hosts only).
  double icache_mpki_size_threshold = 20.0;
  // i-cache layout (icache_layout.h): the sampled i-cache misses under a
  // profile version needed before layout is judged, and the share of them a
  // function must hold to be laid out hot.
  std::uint64_t icache_layout_min_samples = 20;
  double icache_hot_share = 0.2;
  // Sampled time share per function of optimized stages against the share
  // recorded with the profile (total-variation distance, 0..1): at or past
  // this the program is re-profiled. 1 turns drift re-profiling off.
  double time_share_drift_threshold = 0.30;
  // The most recent sampled stages compared, and the clock samples in program
  // code they need before drift is judged.
  int time_share_window_stages = 3;
  std::uint64_t time_share_min_samples = 50;
  // A near-50/50 conditional branch with at least this many sampled branch
  // misses attributed to it (since the profile version) is marked
  // !unpredictable in the next compile (docs/perf.md, PMU hosts).
  std::uint64_t branch_miss_min_samples = 20;
  // Context-sensitive PGO (docs/jit.md): after a profile is made from
  // instrumentation counts, this many stages run the optimized build with
  // context-sensitive instrumentation, whose counts join the profile for the
  // next optimized compile. 0: no context-sensitive round. On by default:
  // measured faster (bench/fdo_effect/README.md), and the guard drops the
  // counts for a program that runs faster without them (docs/guard.md).
  int cs_pgo_stages = 2;
};

} // namespace fdo::daemon
