// The fdod service: everything behind the socket, as a composition root. It is
// handed its parts — the profile store, the compile and exec job runners, the
// perf capabilities — by ServiceBuilder (defaults: the SQLite store in the
// state dir, supervised fdo-worker pools, a probe of this host) and wires the
// service's own parts over them: the cache orchestrator, the program registry
// (program_registry.h), the feedback loop (feedback_loop.h) and one named
// handler per JSON-RPC method (docs/fdod.md, schemas/methods/).
//
// Tenancy: see tenant.h.
#pragma once

#include "fdo/daemon/audit.h"
#include "fdo/daemon/config.h"
#include "fdo/daemon/isolation.h"
#include "fdo/daemon/job_runner.h"
#include "fdo/daemon/jsonrpc.h"
#include "fdo/daemon/lease_sampling.h"
#include "fdo/profile_store/profile_store.h"
#include "fdo/util/expected.h"

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

namespace fdo::daemon {

struct ServiceState;

class Service {
public:
  // Waits for background compiles, flushes pending feedback.
  ~Service();
  Service(const Service&) = delete;
  Service& operator=(const Service&) = delete;

  void register_methods(Dispatcher& dispatcher);
  // Writes batched feedback rows to the store (one transaction); on failure
  // they are kept for the next call.
  Status flush_feedback();
  // Applies a reloaded configuration: every key the key table marks runtime
  // takes effect for requests that start afterwards; restart-only keys keep
  // their running values (config.h, with_runtime_keys).
  void reconfigure(const Config& config);
  // The configuration in force.
  Config config() const;
  // Blocks until no background compile is queued or running.
  void wait_idle();

private:
  friend class ServiceBuilder;
  explicit Service(std::unique_ptr<ServiceState> state);
  std::unique_ptr<ServiceState> state_;
};

class ServiceBuilder {
public:
  using StoreCreator =
      std::function<Expected<std::unique_ptr<profile_store::ProfileStore>>(const Config&)>;
  using RunnerCreator = std::function<Expected<std::unique_ptr<JobRunner>>(
      WorkerRole, const Config&, std::shared_ptr<const Isolation>,
      std::function<std::shared_ptr<const Config>()> live_config)>;
  // Given the exec runner, so the default probes inside a sandboxed worker.
  using PerfProbe = std::function<nlohmann::json(const Config&, JobRunner& exec)>;
  using SandboxProbe = std::function<SandboxSupport()>;

  explicit ServiceBuilder(Config config);

  // The fdo-worker executable for the default runners.
  ServiceBuilder& worker_path(std::string path);
  ServiceBuilder& store(StoreCreator creator);
  ServiceBuilder& runners(RunnerCreator creator);
  ServiceBuilder& perf_probe(PerfProbe probe);
  // What the host offers for sandboxing (default: probe_sandbox_support()).
  ServiceBuilder& sandbox_probe(SandboxProbe probe);
  ServiceBuilder& host_name(std::string host);
  // Where audit records go (default: journal_audit_sink()).
  ServiceBuilder& audit_sink(std::shared_ptr<AuditSink> sink);
  // What in-process sampling sees of the host (default: SamplingHost::real()).
  ServiceBuilder& sampling_host(std::shared_ptr<SamplingHost> host);

  // Creates the state dir, then the parts (store, runners, probe) and the service.
  Expected<std::unique_ptr<Service>> create();

  // The defaults, usable from a custom creator.
  static Expected<std::unique_ptr<profile_store::ProfileStore>> default_store(const Config& c);
  // A supervised pool of fdo-worker processes whose workers bind to one tenant
  // each and enter its sandbox (isolation.h).
  static Expected<std::unique_ptr<JobRunner>>
  worker_pool(const std::string& worker_path, WorkerRole role, const Config& c,
              std::shared_ptr<const Isolation> isolation,
              std::function<std::shared_ptr<const Config>()> live_config);

private:
  Config config_;
  std::string worker_path_;
  std::string host_;
  std::shared_ptr<AuditSink> audit_;
  StoreCreator store_;
  RunnerCreator runners_;
  PerfProbe perf_probe_;
  SandboxProbe sandbox_probe_;
  std::shared_ptr<SamplingHost> sampling_host_;
};

} // namespace fdo::daemon
