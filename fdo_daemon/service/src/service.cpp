#include "fdo/daemon/service.h"

#include "fdo/cache/redis_tier.h"
#include "fdo/daemon/state_dir.h"
#include "fdo/daemon/worker_pool.h"
#include "fdo/perf/capabilities.h"
#include "fdo/util/log.h"
#include "methods/methods.h"
#include "state.h"

#include <filesystem>
#include <prometheus/exposer.h>
#include <unistd.h>

namespace fdo::daemon {

namespace fs = std::filesystem;
namespace ps = fdo::profile_store;

namespace {

std::string this_host() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

} // namespace

JobLimits compile_job_limits(const Config& c) {
  JobLimits l;
  l.wall = c.compile_timeout;
  l.address_space_bytes = c.compile_memory_mb * kMiB;
  l.max_output_bytes = c.max_output_bytes;
  return l;
}

JobLimits exec_job_limits(const Config& c) {
  JobLimits l;
  l.wall = c.exec_timeout;
  l.address_space_bytes = c.exec_memory_mb * kMiB;
  l.max_output_bytes = c.max_output_bytes;
  return l;
}

// --- Service -------------------------------------------------------------

ServiceState::ServiceState(Config c) : config(std::move(c)) {}
ServiceState::~ServiceState() = default;

StoreHealth ServiceState::store_health() const {
  if (fallback) return fallback->health();
  StoreHealth h; // the SQLite file: local, answers or fails, never unavailable
  h.kind = store ? std::string(profile_store::to_string(store->kind())) : "sqlite";
  h.location = store ? store->location() : std::string();
  h.state = StoreState::up;
  return h;
}

Service::Service(std::unique_ptr<ServiceState> state) : state_(std::move(state)) {}

Service::~Service() {
  if (!state_) return;
  if (state_->orch) state_->orch->wait_idle();
  if (state_->feedback)
    if (auto st = state_->feedback->flush(); !st) log::error(st.error().describe());
  // After the flush: a trial whose profile that flush rewrote is void anyway.
  if (state_->guard) state_->guard->save_running(state_->config.get()->guard);
}

void Service::register_methods(Dispatcher& d) {
  methods::add_status_methods(d, *state_);
  methods::add_program_methods(d, *state_);
  methods::add_profile_methods(d, *state_);
  methods::add_cache_methods(d, *state_);
  methods::add_lifecycle_methods(d, *state_);
  methods::add_maintenance_methods(d, *state_);
  methods::add_inprocess_methods(d, *state_);
  methods::add_program_source_method(d, *state_);
  methods::add_handshake_methods(d, *state_);
}

Status Service::flush_feedback() {
  return state_->feedback->flush();
}

void Service::reconfigure(const Config& next) {
  Config applied = with_runtime_keys(*state_->config.get(), next);
  log::set_level(applied.log_level);
  if (auto st = state_->store->set_retention(static_cast<int>(applied.profile_retention)); !st)
    log::error("config: profile_retention: " + st.error().describe());
  state_->compile_pool->set_max_waiting_per_tenant(applied.max_queued_jobs_per_uid);
  state_->exec_pool->set_max_waiting_per_tenant(applied.max_queued_jobs_per_uid);
  state_->config.set(std::move(applied));
}

Config Service::config() const {
  return *state_->config.get();
}

void Service::wait_idle() {
  state_->orch->wait_idle();
}

// --- ServiceBuilder ------------------------------------------------------

ServiceBuilder::ServiceBuilder(Config config) : config_(std::move(config)) {}

ServiceBuilder& ServiceBuilder::worker_path(std::string path) {
  worker_path_ = std::move(path);
  return *this;
}
ServiceBuilder& ServiceBuilder::store(StoreCreator creator) {
  store_ = std::move(creator);
  return *this;
}
ServiceBuilder& ServiceBuilder::runners(RunnerCreator creator) {
  runners_ = std::move(creator);
  return *this;
}
ServiceBuilder& ServiceBuilder::perf_probe(PerfProbe probe) {
  perf_probe_ = std::move(probe);
  return *this;
}
ServiceBuilder& ServiceBuilder::sandbox_probe(SandboxProbe probe) {
  sandbox_probe_ = std::move(probe);
  return *this;
}
ServiceBuilder& ServiceBuilder::host_name(std::string host) {
  host_ = std::move(host);
  return *this;
}
ServiceBuilder& ServiceBuilder::audit_sink(std::shared_ptr<AuditSink> sink) {
  audit_ = std::move(sink);
  return *this;
}
ServiceBuilder& ServiceBuilder::sampling_host(std::shared_ptr<SamplingHost> host) {
  sampling_host_ = std::move(host);
  return *this;
}

Expected<std::unique_ptr<ps::ProfileStore>> ServiceBuilder::default_store(const Config& c) {
  ps::Options so;
  so.retention = static_cast<int>(c.profile_retention);
  // A shared store that is down at start is served through StoreFallback's
  // spool like an outage later on (docs/fleet.md): fdod starts anyway.
  so.when_unreachable = ps::WhenUnreachable::defer;
  // fdod is its SQLite store's only writer (it holds the state directory's
  // lock; fdoctl's offline writes refuse while it runs): current profiles and
  // key mappings are served from memory, so a steady stage reads nothing from
  // the file (profile_store's read view). PostgreSQL keeps its own cache.
  so.read_view = ps::ReadView::in_process;
  // Anything but "sqlite" was checked to be a postgresql:// URI by the config.
  const std::string location =
      c.profile_store == kSqliteStore ? c.state_dir + "/profiles.db" : c.profile_store;
  FDO_TRY(ps::ProfileStore store, ps::ProfileStore::open(location, so));
  log::info("profile store: " + std::string(ps::to_string(store.kind())) + " " + store.location());
  return std::make_unique<ps::ProfileStore>(std::move(store));
}

Expected<std::unique_ptr<JobRunner>>
ServiceBuilder::worker_pool(const std::string& worker_path, WorkerRole role, const Config& c,
                            std::shared_ptr<const Isolation> isolation,
                            std::function<std::shared_ptr<const Config>()> live_config) {
  PoolOptions o;
  o.worker_path = worker_path;
  o.worker_args = {"--role", std::string(to_string(role))};
  // Compiles run below the stages they serve (docs/workers.md, "CPU priority").
  if (role == WorkerRole::compile && c.compile_nice > 0)
    o.worker_args.insert(o.worker_args.end(), {"--nice", std::to_string(c.compile_nice)});
  o.name = std::string(to_string(role));
  o.size = static_cast<int>(role == WorkerRole::compile ? c.compile_workers
                            : role == WorkerRole::exec  ? c.exec_workers
                                                        : c.gpu_workers);
  o.defaults = role == WorkerRole::compile ? compile_job_limits(c)
               : role == WorkerRole::exec  ? exec_job_limits(c)
                                           : gpu_job_limits(c);
  o.max_waiting_per_tenant = c.max_queued_jobs_per_uid;
  if (role == WorkerRole::compile) {
    o.max_running_per_tenant = c.effective_max_running_compiles_per_uid();
    o.background_max_stopped = c.compile_background_max_stopped;
  }
  o.bind_spec = [role, isolation,
                 live_config](const std::string& tenant) -> Expected<nlohmann::json> {
    return isolation->bind_request(role, tenant, *live_config());
  };
  o.cgroups = isolation->cgroups();
  o.cgroup_pids_max = c.job_max_tasks;
  // Both roles: what a job prints never reaches fdod's own stdout/stderr (the
  // journal) unattributed; exec output goes back to the caller, compile
  // output (LLVM's own diagnostics: no client code runs there, so no file
  // size limit is needed to bound it) to fdod's log as a record naming the
  // program (adapters.cpp).
  o.capture_output_bytes = c.job_output_bytes;
  if (role == WorkerRole::exec) o.exit_outcome = ExitOutcome::result;
  FDO_TRY(std::unique_ptr<WorkerPool> pool, WorkerPool::create(o));
  return std::unique_ptr<JobRunner>(std::move(pool));
}

namespace {

// What a sandboxed exec worker can measure: the capabilities fdod reports are
// those of the jobs, not of the daemon.
nlohmann::json probe_in_worker(const Config& c, JobRunner& exec) {
  Message req;
  req.header = {{"op", "probe"}, {"events", c.perf_events}};
  auto r = exec.run(req, JobOptions{exec_job_limits(c), "", AfterJob::retire}, nullptr);
  if (r) return std::move(r->header);
  log::warning("perf probe in a sandboxed exec worker failed (" + r.error().describe() +
               "); reporting what the daemon itself can count");
  return perf::to_json(perf::probe());
}

} // namespace

Expected<std::unique_ptr<Service>> ServiceBuilder::create() {
  const Config& c = config_;
  FDO_TRY_STATUS(prepare_state_dir(c.state_dir, store_ || c.profile_store != kSqliteStore
                                                    ? StoreLocation::elsewhere
                                                    : StoreLocation::state_dir));
  FDO_TRY(std::size_t swept, sweep_interrupted_writes(c.state_dir));
  if (swept > 0)
    log::info("removed " + std::to_string(swept) +
              " temp file(s) of writes interrupted when fdod last stopped");
  SandboxSupport host = sandbox_probe_ ? sandbox_probe_() : probe_sandbox_support();
  if (!host.seccomp)
    return make_error(Errc::unsupported,
                      "this kernel has no seccomp: fdod cannot run client code safely");
  FDO_TRY(Isolation isolation, Isolation::choose(c, host));
  // Real pools only: a test's fake runners start no processes to place.
  if (!runners_) FDO_TRY_STATUS(isolation.open_cgroups(c));

  auto s = std::make_unique<ServiceState>(c);
  s->isolation = std::make_shared<const Isolation>(std::move(isolation));
  s->host = !host_.empty() ? host_ : !c.host_name.empty() ? c.host_name : this_host();
  s->audit = audit_ ? audit_ : journal_audit_sink();
  s->sampling_host = sampling_host_ ? sampling_host_ : SamplingHost::real();
  s->identity = jit::host_identity();
  StoreCreator open_store = store_ ? store_ : StoreCreator(default_store);
  FDO_TRY(s->store, open_store(c));
  std::string path = worker_path_;
  RunnerCreator runners = runners_;
  if (!runners) runners = [path](auto... args) { return worker_pool(path, args...); };
  ServiceState* raw = s.get();
  auto live_config = [raw] { return raw->config.get(); };
  FDO_TRY(s->compile_pool, runners(WorkerRole::compile, c, s->isolation, live_config));
  FDO_TRY(s->exec_pool, runners(WorkerRole::exec, c, s->isolation, live_config));
  s->perf_caps =
      std::async(std::launch::async, [probe = perf_probe_, c, exec = s->exec_pool.get()] {
        return probe ? probe(c, *exec) : probe_in_worker(c, *exec);
      }).share();

  // The GPU is part of the compiler identity, so it is known before the
  // first program is keyed: probed now, in a GPU worker (fdod never loads
  // the driver itself).
  if (gpu_wanted(c)) {
    FDO_TRY(s->gpu_pool, runners(WorkerRole::gpu, c, s->isolation, live_config));
    s->gpu = probe_gpu_host(c, *s->gpu_pool);
  } else {
    s->gpu = no_gpu(c.gpu == GpuUse::off ? "gpu = off"
                                         : "no NVIDIA device node (/dev/nvidia*) on this host");
  }
  if (s->gpu.usable()) {
    const gpu::GpuInfo& g = s->gpu.gpus.front();
    log::info("GPU: " + g.name + ", " + jit::sm_name(g.sm) + ", driver " +
              std::to_string(g.driver_version) + ": NVPTX programs run on it");
  } else {
    if (s->gpu_pool) log::warning("GPU: NVPTX programs will be refused: " + s->gpu.reason);
    s->gpu_pool.reset();
  }

  s->store_keys = std::make_unique<StoreKeys>(*s->store);
  s->store_feedback = std::make_unique<StoreFeedback>(*s->store);
  s->store_programs = std::make_unique<StorePrograms>(*s->store);
  s->keys = s->store_keys.get();
  s->feedback_store = s->store_feedback.get();
  s->program_index = s->store_programs.get();
  if (c.profile_store != kSqliteStore) {
    StoreFallbackOptions fo;
    fo.kind = std::string(ps::to_string(s->store->kind()));
    fo.location = s->store->location();
    fo.spool_path = c.state_dir + "/store-spool.db";
    fo.spool_max_bytes = c.profile_store_spool_max_bytes;
    FDO_TRY(s->fallback,
            StoreFallback::create(*s->keys, *s->feedback_store, *s->program_index, std::move(fo)));
    s->keys = &s->fallback->keys();
    s->feedback_store = &s->fallback->feedback();
    s->program_index = &s->fallback->programs();
  }
  // On a GPU host the identity names the GPU too: an output is never served
  // to another GPU or driver (nor, after a driver upgrade, a CPU program's:
  // it is recompiled once).
  const std::string identity =
      s->identity.canonical() + (s->gpu.usable() ? ";gpu=" + s->gpu.identity : "");
  s->held_parts = std::make_unique<HeldParts>(kHeldPartsBytes);
  s->compiler = std::make_unique<RemoteCompiler>(
      identity, *s->compile_pool,
      [raw] {
        auto cfg = raw->config.get();
        return CompileJobLimits{compile_job_limits(*cfg), cfg->max_program_bytes,
                                cfg->effective_compile_threads(), cfg->compile_parts};
      },
      s->gpu.target, s->held_parts.get());
  cache::Config cc;
  cc.state_dir = c.state_dir;
  cc.memory_budget_bytes = c.memory_cache_bytes;
  cc.disk_budget_bytes = c.disk_cache_bytes;
  cc.tier_up = c.tier_up;
  if (!c.object_cache_remote.empty()) {
    cache::RedisTierConfig rc;
    FDO_TRY(rc.endpoint, cache::parse_redis_endpoint(c.object_cache_remote));
    rc.timeout = c.object_cache_remote_timeout;
    rc.max_entry_bytes = c.object_cache_remote_max_entry_bytes;
    FDO_TRY(cc.remote, cache::RedisTier::create(std::move(rc)));
    log::info("remote object tier: " + c.object_cache_remote + " (connects on first use)");
  }
  FDO_TRY(s->orch, cache::Orchestrator::create(cc, *s->keys, *s->compiler));
  cache::Orchestrator* orch = s->orch.get();
  s->programs = std::make_unique<ProgramRegistry>(
      c.state_dir + "/programs", *s->compiler, *s->program_index,
      [orch](cache::Program& p) { return orch->stamp_initial_key(p); });
  s->feedback = std::make_unique<FeedbackLoop>(*s->feedback_store, s->host, s->lifecycles.get());
  s->guard = std::make_unique<Guard>(*s->keys, *s->feedback_store, s->host);
  s->gpu_tuner = std::make_unique<GpuTuner>(*s->feedback_store, s->host);
  s->profiles = std::make_unique<ProfileService>(ProfileService::Parts{
      *s->store, *s->feedback, *s->guard, *s->lifecycles, *s->programs, *s->orch});
  s->metrics = std::make_unique<ServiceMetrics>([raw] { return methods::live_metrics(*raw); });
  if (!c.metrics_listen.empty()) {
    // "PORT" alone is loopback; civetweb takes "HOST:PORT" and "[v6]:PORT".
    std::string address = c.metrics_listen.find(':') == std::string::npos
                              ? "127.0.0.1:" + c.metrics_listen
                              : c.metrics_listen;
    try {
      s->exposer = std::make_unique<prometheus::Exposer>(address, 1);
    } catch (const std::exception& e) {
      return make_error(Errc::io, "cannot serve metrics on metrics_listen = " + c.metrics_listen +
                                      " (" + address + "): " + e.what());
    }
    s->exposer->RegisterCollectable(s->metrics->collectable());
    log::info("Prometheus metrics on http://" + address + "/metrics");
  }
  log::info("service ready: state dir " + c.state_dir + ", compiler " + s->identity.triple + " " +
            s->identity.cpu + ", " + std::to_string(c.compile_workers) + " compile + " +
            std::to_string(c.exec_workers) + " exec workers; " + s->isolation->describe());
  return std::unique_ptr<Service>(new Service(std::move(s)));
}

} // namespace fdo::daemon
