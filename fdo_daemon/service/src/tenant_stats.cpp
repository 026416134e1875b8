#include "tenant_stats.h"

#include "fdo/daemon/metrics.h"

#include <prometheus/text_serializer.h>

namespace fdo::daemon {

void TenantStats::stage(uid_t uid, cache::Outcome outcome, double compile_ms) {
  std::lock_guard lk(mu_);
  TenantFigures& f = by_uid_[uid];
  ++f.stages;
  switch (outcome) {
  case cache::Outcome::memory_hit:
    ++f.memory_hits;
    break;
  case cache::Outcome::disk_hit:
    ++f.disk_hits;
    break;
  case cache::Outcome::remote_hit:
    ++f.remote_hits;
    break;
  case cache::Outcome::compiled:
    ++f.compiles;
    f.compile_ms_total += compile_ms;
    break;
  case cache::Outcome::joined:
    ++f.joined;
    break;
  case cache::Outcome::tier_up_pending:
    ++f.stale_serves;
    break;
  case cache::Outcome::background_compiled:
  case cache::Outcome::failed:
    break;
  }
}

void TenantStats::stage_failed(uid_t uid) {
  std::lock_guard lk(mu_);
  ++by_uid_[uid].stage_failures;
}

void TenantStats::prepare_failed(uid_t uid) {
  std::lock_guard lk(mu_);
  ++by_uid_[uid].prepare_failures;
}

TenantFigures TenantStats::of(uid_t uid) const {
  std::lock_guard lk(mu_);
  auto it = by_uid_.find(uid);
  return it == by_uid_.end() ? TenantFigures{} : it->second;
}

nlohmann::json tenant_cache_stats(uid_t uid, const TenantFigures& f) {
  return {{"scope", "tenant"},
          {"uid", uid},
          {"prepares", f.stages + f.prepare_failures},
          {"failures", f.prepare_failures},
          {"stage_failures", f.stage_failures},
          {"memory", {{"hits", f.memory_hits}}},
          {"disk", {{"hits", f.disk_hits}}},
          {"remote", {{"hits", f.remote_hits}}},
          {"compiles", f.compiles},
          {"joined", f.joined},
          {"compile_ms_total", f.compile_ms_total},
          {"tier_up", {{"stale_serves", f.stale_serves}}}};
}

std::string tenant_metrics_text(uid_t uid, const TenantFigures& f) {
  const std::string label = std::to_string(uid);
  auto counter = [&](const char* name, const char* help, double v) {
    return metric_family(name, help, prometheus::MetricType::Counter, {{label, v}}, "uid");
  };
  auto d = [](std::uint64_t v) { return static_cast<double>(v); };
  return prometheus::TextSerializer().Serialize({
      counter("fdo_tenant_stages_total", "Stages of this uid that got their code.", d(f.stages)),
      counter("fdo_tenant_stage_failures_total", "Stages of this uid that failed to run.",
              d(f.stage_failures)),
      counter("fdo_tenant_prepare_failures_total", "Stages of this uid that got no code.",
              d(f.prepare_failures)),
      counter("fdo_tenant_cache_memory_hits_total", "Stages of this uid served from memory.",
              d(f.memory_hits)),
      counter("fdo_tenant_cache_disk_hits_total", "Stages of this uid served from disk.",
              d(f.disk_hits)),
      counter("fdo_tenant_cache_remote_hits_total", "Stages of this uid served by the remote tier.",
              d(f.remote_hits)),
      counter("fdo_tenant_compiles_total", "Compiles run for stages of this uid.", d(f.compiles)),
      counter("fdo_tenant_compile_ms_total", "Milliseconds those compiles took.",
              f.compile_ms_total),
      counter("fdo_tenant_stale_serves_total",
              "Stages of this uid served older code during a tier-up.", d(f.stale_serves)),
  });
}

} // namespace fdo::daemon
