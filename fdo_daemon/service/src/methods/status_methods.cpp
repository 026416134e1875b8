// health, capabilities, metrics, config. None of these touches the store, a
// worker or the cache's locks beyond counters, so they answer while stages run
// and are registered as control methods (the server's own small pool);
// health and capabilities read only counters and fixed state, so they are
// immediate: answered on the server's I/O thread without a hand-off.
#include "fdo/jit/compiler.h"
#include "fdo/util/json_text.h"
#include "methods.h"

#include <unistd.h>

namespace fdo::daemon::methods {

namespace {

// The remote object tier's state for health and capabilities; null when off.
void remote_tier_state(JsonText& t, ServiceState& s, bool with_limits) {
  std::optional<cache::RemoteTierStats> r = s.orch->stats().remote;
  if (!r) {
    t.null();
    return;
  }
  t.begin_object()
      .field("endpoint", r->endpoint)
      .field("state", cache::to_string(r->state))
      .field("last_error", r->last_error);
  if (with_limits) {
    auto c = s.config.get();
    t.field("timeout_ms", static_cast<std::int64_t>(c->object_cache_remote_timeout.count()))
        .field("max_entry_bytes", c->object_cache_remote_max_entry_bytes);
  }
  t.end_object();
}

// The profile store's state (docs/fleet.md, "When the profile store is down").
void profile_store_state(JsonText& t, ServiceState& s, bool with_limits) {
  StoreHealth h = s.store_health();
  t.begin_object()
      .field("kind", h.kind)
      .field("location", h.location)
      .field("state", to_string(h.state))
      .field("last_error", h.last_error)
      .field("spooled_batches", h.spool.feedback_batches)
      .field("spooled_writes", h.spool.profile_writes)
      .field("spooled_other", h.spool.other)
      .field("spool_bytes", h.spool.bytes);
  std::optional<std::uint64_t> reads = s.store ? s.store->database_reads() : std::nullopt;
  if (reads)
    t.field("database_reads", *reads);
  else
    t.null_field("database_reads");
  if (with_limits) t.field("spool_max_bytes", h.spool_max_bytes);
  t.end_object();
}

// Written as text, not built as a tree (fdo/util/json_text.h): health is the
// transport's own round trip for clients and benches, answered on the I/O
// thread.
Expected<ResultText> health(ServiceState& s, const json&, const CallContext&) {
  const double up =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - s.started).count();
  JsonText t;
  t.begin_object()
      .field("status", "ok")
      .field("version", jit::kFdoVersion)
      .field("pid", static_cast<std::int64_t>(::getpid()))
      .field("uptime_s", up)
      .key("workers")
      .begin_object()
      .field("compile", s.compile_pool->stats().live)
      .field("exec", s.exec_pool->stats().live)
      .end_object()
      .key("object_cache_remote");
  remote_tier_state(t, s, false);
  t.key("profile_store");
  profile_store_state(t, s, false);
  t.field("host", s.host)
      .key("inprocess")
      .begin_object()
      .field("leases", s.leases->size())
      .field("leases_granted", s.leases->granted())
      .field("batches", s.counters.inprocess_batches.load())
      .end_object()
      .end_object();
  return ResultText{std::move(t).take()};
}

Expected<ResultText> capabilities(ServiceState& s, const json&, const CallContext&) {
  auto c = s.config.get();
  JsonText t;
  t.begin_object()
      .field("fdo_version", jit::kFdoVersion)
      .field("llvm_version", s.identity.llvm_version)
      .key("target")
      .begin_object()
      .field("triple", s.identity.triple)
      .field("cpu", s.identity.cpu)
      .field("features", s.identity.features)
      .end_object()
      .field("compiler_identity", s.compiler->identity())
      .key("compile_modes")
      .begin_array();
  for (const char* mode : {"plain", "instrumented", "optimized", "cs_instrumented"})
    t.string(mode);
  t.end_array()
      .field("tier_up", cache::to_string(c->tier_up))
      .field("share_profiles_across_tenants", c->share_profiles_across_tenants)
      .field("perf", s.perf_caps.get()) // probed at start-up: waits for it the first time
      .field("sandbox", s.isolation->to_json())
      .field("gpu", to_json(s.gpu))
      .key("object_cache_remote");
  remote_tier_state(t, s, true);
  t.key("profile_store");
  profile_store_state(t, s, true);
  t.field("host", s.host).end_object();
  return ResultText{std::move(t).take()};
}

// The host's metrics for operators (as the Prometheus endpoint, which the
// operator controls); a tenant gets its own figures.
Expected<json> metrics(ServiceState& s, const json&, const CallContext& ctx) {
  if (!is_operator(ctx))
    return json{{"text", tenant_metrics_text(ctx.uid, s.counters.tenants.of(ctx.uid))},
                {"scope", "tenant"}};
  return json{{"text", s.metrics->text()}, {"scope", "host"}};
}

// The effective configuration, for operators: the daemon's own uid and root.
Expected<json> config(ServiceState& s, const json&, const CallContext& ctx) {
  if (!is_operator(ctx))
    return make_error(Errc::permission_denied,
                      "config is shown to root and to the daemon's own user only");
  auto c = s.config.get();
  json keys = json::array();
  for (const ConfigKeyInfo& k : Config::keys())
    keys.push_back({{"name", k.name},
                    {"value", c->get_shown(k.name)},
                    {"default", k.default_value},
                    {"reload", std::string(to_string(k.reload))}});
  return json{{"keys", std::move(keys)}};
}

} // namespace

std::vector<prometheus::MetricFamily> live_metrics(ServiceState& s) {
  using prometheus::MetricType;
  cache::Stats cs = s.orch->stats();
  PoolStats cp = s.compile_pool->stats(), ep = s.exec_pool->stats();
  auto one = [](std::string name, std::string help, MetricType type, double v) {
    return metric_family(std::move(name), std::move(help), type, {{"", v}});
  };
  auto by_pool = [](std::string name, std::string help, MetricType type, double compile,
                    double exec) {
    return metric_family(std::move(name), std::move(help), type,
                         {{"compile", compile}, {"exec", exec}}, "pool");
  };
  auto C = MetricType::Counter, G = MetricType::Gauge;
  auto d = [](std::uint64_t v) { return static_cast<double>(v); };
  GuardCounters g = s.guard->counters();
  std::vector<prometheus::MetricFamily> out = {
      one("fdo_stages_total", "Stages executed.", C, d(s.counters.stages.load())),
      one("fdo_stage_failures_total", "Stages whose execution failed.", C,
          d(s.counters.stage_failures.load())),
      one("fdo_profile_rewrites_total", "Profile versions written by feedback.", C,
          d(s.feedback->rewrites())),
      one("fdo_cache_memory_hits_total", "Memory-tier hits.", C, d(cs.memory_hits)),
      one("fdo_cache_disk_hits_total", "Disk-tier hits.", C, d(cs.disk_hits)),
      one("fdo_cache_compiles_total", "Compiler runs.", C, d(cs.compiles)),
      one("fdo_cache_recompiles_total", "Recompiles of known programs.", C, d(cs.recompiles)),
      one("fdo_cache_compile_failures_total", "Compiler runs that failed.", C,
          d(cs.compile_failures)),
      one("fdo_cache_corrupt_entries_total", "Corrupt disk entries removed.", C,
          d(cs.corrupt_entries)),
      one("fdo_cache_memory_bytes", "Bytes in the memory tier.", G, d(cs.memory_bytes)),
      one("fdo_cache_disk_bytes", "Bytes in the disk tier.", G, d(cs.disk_bytes)),
      one("fdo_cache_evictions_total", "Entries evicted from either tier.", C,
          d(cs.memory_evictions + cs.disk_evictions)),
      metric_family("fdo_tier_ups_total",
                    "Background recompiles with a new profile (tier_up = async), by result.", C,
                    {{"started", d(cs.tier_ups_started)},
                     {"installed", d(cs.tier_ups_installed)},
                     {"failed", d(cs.tier_ups_failed)}},
                    "result"),
      one("fdo_tier_ups_queued", "Background recompiles waiting or running.", G,
          d(cs.tier_ups_queued)),
      one("fdo_stale_serves_total",
          "Stages served an earlier profile's code while a tier-up was pending.", C,
          d(cs.stale_serves)),
      by_pool("fdo_worker_restarts_total", "Worker processes replaced.", C, d(cp.restarts),
              d(ep.restarts)),
      by_pool("fdo_worker_failures_total", "Jobs that failed in a worker.", C,
              d(cp.failures.total()), d(ep.failures.total())),
      by_pool("fdo_workers_live", "Live worker processes.", G, d(cp.live), d(ep.live)),
      one("fdo_guard_trials_started_total",
          "Live A/B trials of a candidate variant against the incumbent (docs/guard.md).", C,
          d(g.trials_started)),
      metric_family("fdo_guard_trials_total",
                    "Finished trials by verdict: accepted (a win: the candidate is served), "
                    "rejected (a revert: the incumbent stays), no_difference.",
                    C,
                    {{"accepted", d(g.accepted)},
                     {"rejected", d(g.rejected)},
                     {"no_difference", d(g.no_difference)}},
                    "verdict"),
      metric_family("fdo_guard_trial_stages_total", "Stages counted in trials, by arm.", C,
                    {{"incumbent", d(g.incumbent_stages)}, {"candidate", d(g.candidate_stages)}},
                    "arm"),
      one("fdo_guard_losing_stages_total",
          "Trial stages that ran the variant the trial then found slower (the guard's cost).", C,
          d(g.losing_stages)),
      one("fdo_guard_verdict_write_failures_total",
          "Verdicts the profile store did not take (retried at the next stage).", C,
          d(g.verdict_write_failures)),
      one("fdo_guard_checkpoints_total",
          "Running trials' samples saved in the profile (guard.checkpoint_pairs).", C,
          d(g.checkpoints)),
      one("fdo_guard_trials_resumed_total",
          "Trials continued from saved samples (after a restart) instead of starting over.", C,
          d(g.resumed)),
  };
  {
    // Every phase, 0 where no program is in it: a scrape sees each series.
    const std::map<Phase, std::size_t> phases = s.lifecycles->phases();
    std::vector<std::pair<std::string, double>> by_phase;
    for (Phase p : {Phase::profiling, Phase::cs_profiling, Phase::optimized, Phase::trial,
                    Phase::steady, Phase::reprofiling, Phase::pinned, Phase::failed}) {
      auto it = phases.find(p);
      by_phase.emplace_back(std::string(to_string(p)), d(it == phases.end() ? 0 : it->second));
    }
    out.push_back(metric_family("fdo_programs_by_phase",
                                "Profile keys by lifecycle phase (docs/lifecycle.md), of those a "
                                "stage ran under this fdod.",
                                G, std::move(by_phase), "phase"));
  }
  if (const std::optional<cache::RemoteTierStats>& r = cs.remote) {
    out.push_back(one("fdo_cache_remote_up", "1 while the remote object tier answers, else 0.", G,
                      r->state == cache::RemoteState::up ? 1 : 0));
    out.push_back(metric_family("fdo_cache_remote_lookups_total",
                                "Remote object tier lookups by result.", C,
                                {{"hit", d(r->hits)},
                                 {"miss", d(r->misses)},
                                 {"corrupt", d(r->corrupt)},
                                 {"identity_mismatch", d(r->identity_mismatches)},
                                 {"too_large", d(r->too_large)},
                                 {"unavailable", d(r->unavailable)}},
                                "result"));
    out.push_back(metric_family("fdo_cache_remote_writes_total",
                                "Remote object tier writes by result (failed includes dropped "
                                "while down or with the queue full).",
                                C, {{"stored", d(r->stores)}, {"failed", d(r->store_failures)}},
                                "result"));
    out.push_back(one("fdo_cache_remote_errors_total",
                      "Connect and command failures of the remote object tier.", C, d(r->errors)));
  }
  StoreHealth ph = s.store_health();
  out.push_back(one("fdo_profile_store_up",
                    "1 while the profile store answers and nothing is spooled, else 0.", G,
                    ph.state == StoreState::down ? 0 : 1));
  out.push_back(metric_family("fdo_profile_store_spooled",
                              "Entries waiting in the local spool for the profile store, by kind.",
                              G,
                              {{"feedback", d(ph.spool.feedback_batches)},
                               {"profile_write", d(ph.spool.profile_writes)},
                               {"other", d(ph.spool.other)}},
                              "kind"));
  out.push_back(
      one("fdo_profile_store_spool_bytes", "Bytes in the local spool.", G, d(ph.spool.bytes)));
  out.push_back(metric_family("fdo_profile_store_replayed_total",
                              "Spooled entries replayed into the profile store, by kind.", C,
                              {{"feedback", d(ph.replayed_batches)},
                               {"profile_write", d(ph.replayed_writes)},
                               {"other", d(ph.replayed_other)}},
                              "kind"));
  out.push_back(metric_family(
      "fdo_profile_store_dropped_total",
      "Spooled entries dropped: conflict (a profile write another writer overtook), "
      "cap_write / cap_feedback / cap_other (the spool cap), refused (the store refused it).",
      C,
      {{"conflict", d(ph.dropped_conflicts)},
       {"cap_write", d(ph.dropped_cap_writes)},
       {"cap_feedback", d(ph.dropped_cap_feedback)},
       {"cap_other", d(ph.dropped_cap_other)},
       {"refused", d(ph.dropped_refused)}},
      "reason"));
  out.push_back(
      one("fdo_profile_store_dropped_rows_total",
          "Spooled feedback rows dropped (their profile version was dropped, or the cap).", C,
          d(ph.dropped_rows)));
  return out;
}

void add_status_methods(Dispatcher& d, ServiceState& s) {
  bind(d, "health", s, health, MethodClass::immediate);
  bind(d, "capabilities", s, capabilities, MethodClass::immediate);
  bind(d, "metrics", s, metrics, MethodClass::control);
  bind(d, "config", s, config, MethodClass::control);
}

} // namespace fdo::daemon::methods
