// Reading a self-monitored counter from its mmap'd perf_event_mmap_page with
// RDPMC, following the seqlock protocol documented in <linux/perf_event.h>:
// re-read everything until `lock` is unchanged across the read, so a
// reschedule or counter update in the middle is never observed half-done.
#pragma once

#include "fdo/perf/syscalls.h"

#include <atomic>
#include <cstdint>

namespace fdo::perf::detail {

struct PageSnapshot {
  std::uint64_t count = 0;
  std::uint64_t enabled = 0;
  std::uint64_t running = 0;
};

enum class SnapshotResult { ok, no_user_time, no_rdpmc, unstable };

// Reads count, time_enabled and time_running as of now. `running` advances
// only while the counter is live on the PMU (index != 0); when it is not, the
// kernel keeps the full count in `offset`.
inline SnapshotResult read_user_page(const volatile perf_event_mmap_page* pc, Syscalls& sys,
                                     PageSnapshot& out) {
  // A writer holds the lock only for a few instructions; a thousand retries
  // means something is badly wrong, not contention.
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const std::uint32_t seq = pc->lock;
    std::atomic_signal_fence(std::memory_order_seq_cst);
    std::uint64_t enabled = pc->time_enabled;
    std::uint64_t running = pc->time_running;
    const bool cap_rdpmc = pc->cap_user_rdpmc;
    const bool cap_time = pc->cap_user_time;
    const bool cap_short = pc->cap_user_time_short;
    const std::uint32_t index = pc->index;
    const std::int64_t offset = pc->offset;
    if (!cap_time) return SnapshotResult::no_user_time;
    if (index != 0 && !cap_rdpmc) return SnapshotResult::no_rdpmc;
    const std::uint16_t time_shift = pc->time_shift;
    const std::uint32_t time_mult = pc->time_mult;
    const std::uint64_t time_offset = pc->time_offset;
    const std::uint64_t time_cycles = pc->time_cycles;
    const std::uint64_t time_mask = pc->time_mask;
    const std::uint16_t width = pc->pmc_width;
    std::uint64_t cyc = sys.rdtsc();
    std::uint64_t pmc = index != 0 ? sys.rdpmc(index - 1) : 0;
    std::atomic_signal_fence(std::memory_order_seq_cst);
    if (pc->lock != seq) continue;

    if (cap_short) cyc = time_cycles + ((cyc - time_cycles) & time_mask);
    const std::uint64_t quot = time_shift < 64 ? cyc >> time_shift : 0;
    const std::uint64_t rem = time_shift < 64 ? cyc & ((std::uint64_t(1) << time_shift) - 1) : cyc;
    const std::uint64_t delta =
        time_offset + quot * time_mult + ((rem * time_mult) >> (time_shift < 64 ? time_shift : 0));
    enabled += delta;
    std::int64_t count = offset;
    if (index != 0) {
      running += delta;
      if (width > 0 && width < 64) {
        // The counter is `width` bits wide: sign-extend it.
        const unsigned shift = 64u - width;
        count += static_cast<std::int64_t>(pmc << shift) >> shift;
      } else {
        count += static_cast<std::int64_t>(pmc);
      }
    }
    out.count = static_cast<std::uint64_t>(count);
    out.enabled = enabled;
    out.running = running;
    return SnapshotResult::ok;
  }
  return SnapshotResult::unstable;
}

} // namespace fdo::perf::detail
