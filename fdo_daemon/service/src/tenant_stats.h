// What each tenant (uid) has done through fdod: its stages, how the cache
// served them and what its compiles cost. A tenant's `cache.stats` and
// `metrics` show these figures alone; the host-wide ones (other tenants'
// activity, worker pids) are for root and fdod's own uid (docs/security.md).
#pragma once

#include "fdo/cache/orchestrator.h"

#include <cstdint>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <sys/types.h>

namespace fdo::daemon {

struct TenantFigures {
  std::uint64_t stages = 0;           // stages whose code was found or compiled
  std::uint64_t stage_failures = 0;   // ...that then failed to run
  std::uint64_t prepare_failures = 0; // stages that got no code (compile errors, limits)
  std::uint64_t memory_hits = 0, disk_hits = 0, remote_hits = 0;
  std::uint64_t compiles = 0;     // compiles this tenant's stages ran
  std::uint64_t joined = 0;       // stages that waited for a compile of the same key
  std::uint64_t stale_serves = 0; // stages served older code while a tier-up ran
  double compile_ms_total = 0;
};

class TenantStats {
public:
  // A stage of `uid` got its code (a StageOutput of the orchestrator).
  void stage(uid_t uid, cache::Outcome outcome, double compile_ms);
  void stage_failed(uid_t uid);
  void prepare_failed(uid_t uid);
  TenantFigures of(uid_t uid) const;

private:
  mutable std::mutex mu_;
  std::map<uid_t, TenantFigures> by_uid_;
};

// cache.stats for one tenant: {"scope": "tenant", "uid", "prepares",
// "failures", "memory": {"hits"}, "disk": {"hits"}, "remote": {"hits"},
// "compiles", "joined", "compile_ms_total", "tier_up": {"stale_serves"},
// "stage_failures"}.
nlohmann::json tenant_cache_stats(uid_t uid, const TenantFigures& f);
// The same figures as Prometheus text, labelled with the uid.
std::string tenant_metrics_text(uid_t uid, const TenantFigures& f);

} // namespace fdo::daemon
