// The orchestrator's own counters (the tiers keep theirs). Atomics, so stage
// threads and tier-up threads bump them without sharing a lock.
#pragma once

#include "fdo/cache/orchestrator.h"

#include <atomic>
#include <cstdint>

namespace fdo::cache::detail {

struct StageCounters {
  std::atomic<std::uint64_t> prepares{0}, failures{0};
  std::atomic<std::uint64_t> memory_hits{0}, memory_misses{0}, disk_hits{0}, disk_misses{0};
  std::atomic<std::uint64_t> compiles{0}, recompiles{0}, compile_failures{0}, compile_us{0};
  std::atomic<std::uint64_t> tier_ups_started{0}, tier_ups_installed{0}, tier_ups_failed{0};
  std::atomic<std::uint64_t> ahead_started{0}, ahead_installed{0}, ahead_failed{0};
  std::atomic<std::uint64_t> stale_serves{0}, key_store_errors{0};
  std::atomic<std::uint64_t> queued_dropped_by_evict{0};

  // Fills the fields of `s` these counters own; the tier and queue figures
  // come from their owners.
  void copy_to(Stats& s) const;
};

} // namespace fdo::cache::detail
