// health, capabilities, metrics, config. None of these touches the store, a
// worker or the cache's locks beyond counters, so they answer while stages run
// and are registered as control methods (the server's own small pool).
#include "fdo/jit/compiler.h"
#include "methods.h"

#include <sstream>
#include <unistd.h>

namespace fdo::daemon::methods {

namespace {

Expected<json> health(ServiceState& s, const json&, const CallContext&) {
  double up = std::chrono::duration<double>(std::chrono::steady_clock::now() - s.started).count();
  return json{{"status", "ok"},
              {"version", std::string(jit::kFdoVersion)},
              {"pid", static_cast<std::int64_t>(::getpid())},
              {"uptime_s", up},
              {"workers",
               {{"compile", s.compile_pool->stats().live}, {"exec", s.exec_pool->stats().live}}}};
}

Expected<json> capabilities(ServiceState& s, const json&, const CallContext&) {
  auto c = s.config.get();
  return json{
      {"fdo_version", std::string(jit::kFdoVersion)},
      {"llvm_version", s.identity.llvm_version},
      {"target",
       {{"triple", s.identity.triple}, {"cpu", s.identity.cpu}, {"features", s.identity.features}}},
      {"compiler_identity", s.identity.canonical()},
      {"compile_modes", {"plain", "instrumented", "optimized"}},
      {"tier_up", std::string(cache::to_string(c->tier_up))},
      {"share_profiles_across_tenants", c->share_profiles_across_tenants},
      {"perf", s.perf_caps},
      {"sandbox", s.isolation->to_json()}};
}

// Prometheus text exposition format.
class MetricsText {
public:
  template <class V> void add(const char* name, const char* type, const char* help, V value) {
    head(name, type, help);
    o_ << name << ' ' << value << '\n';
  }
  template <class V>
  void add_by_pool(const char* name, const char* type, const char* help, V compile, V exec) {
    head(name, type, help);
    o_ << name << "{pool=\"compile\"} " << compile << '\n'
       << name << "{pool=\"exec\"} " << exec << '\n';
  }
  std::string str() const { return o_.str(); }

private:
  void head(const char* name, const char* type, const char* help) {
    o_ << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n';
  }
  std::ostringstream o_;
};

Expected<json> metrics(ServiceState& s, const json&, const CallContext&) {
  cache::Stats cs = s.orch->stats();
  PoolStats cp = s.compile_pool->stats(), ep = s.exec_pool->stats();
  MetricsText m;
  m.add("fdo_stages_total", "counter", "Stages executed.", s.counters.stages.load());
  m.add("fdo_stage_failures_total", "counter", "Stages whose execution failed.",
        s.counters.stage_failures.load());
  m.add("fdo_profile_rewrites_total", "counter", "Profile versions written by feedback.",
        s.feedback->rewrites());
  m.add("fdo_cache_memory_hits_total", "counter", "Memory-tier hits.", cs.memory_hits);
  m.add("fdo_cache_disk_hits_total", "counter", "Disk-tier hits.", cs.disk_hits);
  m.add("fdo_cache_compiles_total", "counter", "Compiler runs.", cs.compiles);
  m.add("fdo_cache_recompiles_total", "counter", "Recompiles of known programs.", cs.recompiles);
  m.add("fdo_cache_corrupt_entries_total", "counter", "Corrupt disk entries removed.",
        cs.corrupt_entries);
  m.add("fdo_cache_memory_bytes", "gauge", "Bytes in the memory tier.", cs.memory_bytes);
  m.add("fdo_cache_disk_bytes", "gauge", "Bytes in the disk tier.", cs.disk_bytes);
  m.add_by_pool("fdo_worker_restarts_total", "counter", "Worker processes replaced.", cp.restarts,
                ep.restarts);
  m.add_by_pool("fdo_worker_failures_total", "counter", "Jobs that failed in a worker.",
                cp.failures.total(), ep.failures.total());
  return json{{"text", m.str()}};
}

// The effective configuration, for operators: the daemon's own uid and root.
Expected<json> config(ServiceState& s, const json&, const CallContext& ctx) {
  if (ctx.uid != 0 && ctx.uid != ::geteuid())
    return make_error(Errc::permission_denied,
                      "config is shown to root and to the daemon's own user only");
  auto c = s.config.get();
  json keys = json::array();
  for (const ConfigKeyInfo& k : Config::keys())
    keys.push_back({{"name", k.name},
                    {"value", c->get(k.name)},
                    {"default", k.default_value},
                    {"reload", std::string(to_string(k.reload))}});
  return json{{"keys", std::move(keys)}};
}

} // namespace

void add_status_methods(Dispatcher& d, ServiceState& s) {
  bind(d, "health", s, health, MethodClass::control);
  bind(d, "capabilities", s, capabilities, MethodClass::control);
  bind(d, "metrics", s, metrics, MethodClass::control);
  bind(d, "config", s, config, MethodClass::control);
}

} // namespace fdo::daemon::methods
