// cache.stats, cache.explain.
#include "fdo/daemon/worker_stats.h"
#include "fdo/util/time.h"
#include "methods.h"

namespace fdo::daemon::methods {

namespace {

// The host's figures (every tenant's activity, the workers and their pids)
// for operators; a tenant sees its own (tenant_stats.h).
Expected<json> cache_stats(ServiceState& s, const json&, const CallContext& ctx) {
  if (!is_operator(ctx)) return tenant_cache_stats(ctx.uid, s.counters.tenants.of(ctx.uid));
  json j = cache::to_json(s.orch->stats());
  j["scope"] = "host";
  j["workers"] = {{"compile", to_json(s.compile_pool->stats())},
                  {"exec", to_json(s.exec_pool->stats())}};
  return j;
}

json explain_record_json(const cache::ExplainRecord& r) {
  return {{"stage", r.sequence},
          {"time", rfc3339_ms(r.unix_ms)},
          {"outcome", std::string(cache::to_string(r.outcome))},
          {"reason", std::string(cache::to_string(r.reason))},
          {"detail", r.text},
          {"cache_key", r.ck},
          {"storage_key", r.storage_key},
          {"profile_version", r.to_version},
          {"from_version", r.from_version},
          {"mode", std::string(to_string(r.mode))},
          {"compile_ms", r.compile_ms},
          {"exec_ns", r.exec_ns ? json(*r.exec_ns) : json(nullptr)},
          {"variant", r.variant_role.empty()
                          ? json(nullptr)
                          : json{{"role", r.variant_role}, {"name", r.variant_name}}},
          {"error", r.error}};
}

Expected<json> cache_explain(ServiceState& s, const json& p, const CallContext& ctx) {
  FDO_TRY(std::string ik, require_param<std::string>(p, "program"));
  // limit: only the most recent N records (0 = every record kept).
  FDO_TRY(std::uint64_t limit, optional_param<std::uint64_t>(p, "limit", 0));
  FDO_TRY(ProgramRef rec, s.programs->find(ik, ctx.uid, s.sharing()));
  auto kept = s.orch->explain(ik);
  std::size_t skip = limit != 0 && kept.size() > limit ? kept.size() - limit : 0;
  json records = json::array();
  for (std::size_t i = skip; i < kept.size(); ++i)
    records.push_back(explain_record_json(kept[i]));
  // The guard's decisions for the program's profile: the variant served and
  // the trials behind it (docs/guard.md). Null when none are recorded.
  json guard = nullptr;
  if (auto current = s.feedback_store->current(rec->pk);
      current && *current && !(*current)->doc.guard.empty())
    guard = to_json((*current)->doc.guard);
  return json{{"program", ik},
              {"profile_key", rec->pk},
              {"records", std::move(records)},
              {"records_kept", kept.size()},
              {"guard", std::move(guard)},
              {"lifecycle", s.lifecycles->describe(rec->pk)}};
}

} // namespace

void add_cache_methods(Dispatcher& d, ServiceState& s) {
  bind(d, "cache.stats", s, cache_stats);
  bind(d, "cache.explain", s, cache_explain);
}

} // namespace fdo::daemon::methods
