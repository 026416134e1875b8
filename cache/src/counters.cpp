#include "counters.h"

namespace fdo::cache {

namespace detail {

void StageCounters::copy_to(Stats& s) const {
  s.prepares = prepares;
  s.failures = failures;
  s.memory_hits = memory_hits;
  s.memory_misses = memory_misses;
  s.disk_hits = disk_hits;
  s.disk_misses = disk_misses;
  s.compiles = compiles;
  s.recompiles = recompiles;
  s.compile_failures = compile_failures;
  s.compile_ms_total = static_cast<double>(compile_us.load()) / 1000.0;
  s.tier_ups_started = tier_ups_started;
  s.tier_ups_installed = tier_ups_installed;
  s.tier_ups_failed = tier_ups_failed;
  s.ahead_started = ahead_started;
  s.ahead_installed = ahead_installed;
  s.ahead_failed = ahead_failed;
  s.stale_serves = stale_serves;
  s.key_store_errors = key_store_errors;
  s.queued_dropped_by_evict = queued_dropped_by_evict;
}

} // namespace detail

namespace {

// Everything but the remote tier.
nlohmann::json local_json(const Stats& s) {
  return {{"prepares", s.prepares},
          {"failures", s.failures},
          {"memory",
           {{"hits", s.memory_hits},
            {"misses", s.memory_misses},
            {"entries", s.memory_entries},
            {"bytes", s.memory_bytes},
            {"budget_bytes", s.memory_budget_bytes},
            {"held_entries", s.memory_held_entries},
            {"held_bytes", s.memory_held_bytes},
            {"evictions", s.memory_evictions}}},
          {"disk",
           {{"hits", s.disk_hits},
            {"misses", s.disk_misses},
            {"entries", s.disk_entries},
            {"bytes", s.disk_bytes},
            {"budget_bytes", s.disk_budget_bytes},
            {"evictions", s.disk_evictions},
            {"corrupt", s.corrupt_entries},
            {"store_failures", s.disk_store_failures},
            {"stray_files_removed", s.stray_files_removed}}},
          {"compiles", s.compiles},
          {"recompiles", s.recompiles},
          {"compile_failures", s.compile_failures},
          {"compile_ms_total", s.compile_ms_total},
          {"single_flight_waits", s.single_flight_waits},
          {"tier_up",
           {{"started", s.tier_ups_started},
            {"installed", s.tier_ups_installed},
            {"failed", s.tier_ups_failed},
            {"queued", s.tier_ups_queued},
            {"stale_serves", s.stale_serves},
            {"ahead_started", s.ahead_started},
            {"ahead_installed", s.ahead_installed},
            {"ahead_failed", s.ahead_failed},
            {"dropped_after_evict", s.dropped_after_evict},
            {"queued_dropped_by_evict", s.queued_dropped_by_evict}}},
          {"key_store_errors", s.key_store_errors}};
}

} // namespace

nlohmann::json to_json(const Stats& s) {
  nlohmann::json j = local_json(s);
  if (s.remote) j["remote"] = to_json(*s.remote);
  return j;
}

} // namespace fdo::cache
