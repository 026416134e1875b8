// What the service's method handlers share: the running configuration, the
// parts (store, pools, cache, registry, feedback loop) and the counters.
// Built by ServiceBuilder (service.cpp); members are declared so that each is
// destroyed before what it uses.
#pragma once

#include "adapters.h"
#include "fdo/cache/orchestrator.h"
#include "fdo/daemon/audit.h"
#include "fdo/daemon/config.h"
#include "fdo/daemon/feedback_loop.h"
#include "fdo/daemon/gpu_host.h"
#include "fdo/daemon/gpu_tuning.h"
#include "fdo/daemon/guard.h"
#include "fdo/daemon/isolation.h"
#include "fdo/daemon/job_runner.h"
#include "fdo/daemon/lease_sampling.h"
#include "fdo/daemon/leases.h"
#include "fdo/daemon/lifecycle.h"
#include "fdo/daemon/metrics.h"
#include "fdo/daemon/program_registry.h"
#include "fdo/daemon/store_fallback.h"
#include "fdo/daemon/tenant.h"
#include "fdo/jit/compiler.h"
#include "fdo/profile_store/profile_store.h"
#include "profile_service.h"
#include "tenant_stats.h"

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

namespace prometheus {
class Exposer;
}

namespace fdo::daemon {

// The configuration in force. Readers take a snapshot (a shared pointer, not a
// copy) so one request sees one configuration even across a reload.
class LiveConfig {
public:
  explicit LiveConfig(Config config) : config_(std::make_shared<const Config>(std::move(config))) {}
  std::shared_ptr<const Config> get() const {
    std::lock_guard lk(mu_);
    return config_;
  }
  void set(Config config) {
    auto next = std::make_shared<const Config>(std::move(config));
    std::lock_guard lk(mu_);
    config_ = std::move(next);
  }

private:
  mutable std::mutex mu_;
  std::shared_ptr<const Config> config_;
};

struct ServiceCounters {
  std::atomic<std::uint64_t> stages{0};
  std::atomic<std::uint64_t> stage_failures{0};
  std::atomic<std::uint64_t> inprocess_batches{0}; // feedback.submit batches folded
  TenantStats tenants;                             // the same, per uid (tenant_stats.h)
};

struct ServiceState {
  explicit ServiceState(Config c); // out of line: prometheus::Exposer is incomplete here

  LiveConfig config;
  std::string host;
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  jit::CompilerIdentity identity;
  std::shared_ptr<const Isolation> isolation;
  ServiceCounters counters;
  std::shared_ptr<AuditSink> audit; // never null once built

  std::unique_ptr<profile_store::ProfileStore> store;
  std::unique_ptr<JobRunner> compile_pool;
  std::unique_ptr<JobRunner> exec_pool;
  // What a sandboxed exec worker can measure (capabilities.perf): probed in
  // an exec worker while fdod already serves, so the probe's one-off worker
  // does not delay start-up. Declared after exec_pool: destroyed first, it
  // waits for a probe still running.
  std::shared_future<nlohmann::json> perf_caps;
  // The host's GPU (gpu_host.h): its workers, or none, and what the probe
  // found or why fdod runs no GPU programs.
  std::unique_ptr<JobRunner> gpu_pool;
  GpuHost gpu;
  // The adapters over `store`, and (a shared store only) the layer that
  // serves through its outages (store_fallback.h).
  std::unique_ptr<StoreKeys> store_keys;
  std::unique_ptr<StoreFeedback> store_feedback;
  std::unique_ptr<StorePrograms> store_programs;
  std::unique_ptr<StoreFallback> fallback;
  // What the parts use: the fallback's interfaces when there is one, else the adapters.
  cache::KeyStore* keys = nullptr;
  FeedbackStore* feedback_store = nullptr;
  ProgramIndex* program_index = nullptr;
  // Parts of recent partitioned builds, offered to the next compile of the
  // same program (held_parts.h); declared before `compiler`, which uses it.
  std::unique_ptr<HeldParts> held_parts;
  std::unique_ptr<RemoteCompiler> compiler;
  std::unique_ptr<ProgramRegistry> programs;
  // Every program's lifecycle (lifecycle.h): the stage path asks it what to
  // run, the feedback loop has it approve rewrites.
  std::unique_ptr<LifecycleTable> lifecycles = std::make_unique<LifecycleTable>();
  std::unique_ptr<FeedbackLoop> feedback;
  std::unique_ptr<Guard> guard;
  // GPU programs' tuned launches and launch-bound trials (gpu_tuning.h).
  std::unique_ptr<GpuTuner> gpu_tuner;
  std::unique_ptr<LeaseTable> leases = std::make_unique<LeaseTable>(); // in-process leases
  std::shared_ptr<SamplingHost> sampling_host;                         // never null once built
  std::unique_ptr<cache::Orchestrator> orch; // its tier-up threads use the parts above
  // What changes the store behind the stage path, and what each change makes
  // stale (profile_service.h): the method handlers' only way to change it.
  std::unique_ptr<ProfileService> profiles;
  std::unique_ptr<ServiceMetrics> metrics; // its live figures read the parts above
  // The HTTP endpoint (metrics_listen), or null; its threads read `metrics`.
  std::unique_ptr<prometheus::Exposer> exposer;

  ServiceState(const ServiceState&) = delete;
  ServiceState& operator=(const ServiceState&) = delete;
  ~ServiceState();

  // `profile_store` in health, capabilities and metrics.
  StoreHealth store_health() const;

  ProfileSharing sharing() const {
    return profile_sharing(config.get()->share_profiles_across_tenants);
  }
};

// The lifecycle's settings from the configuration in force.
inline LifecycleConfig lifecycle_config(const Config& c) {
  LifecycleConfig l;
  l.guard = c.guard.mode == GuardMode::on;
  l.sync_tier_up = c.tier_up == TierUp::sync;
  l.max_rewrites_per_hour = c.policy.max_recompiles_per_hour;
  l.cs_round = c.policy.cs_pgo_stages > 0;
  l.drift_window_stages = c.policy.time_share_window_stages;
  return l;
}

JobLimits compile_job_limits(const Config& c);
JobLimits exec_job_limits(const Config& c);

} // namespace fdo::daemon
