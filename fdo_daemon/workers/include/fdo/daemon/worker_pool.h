// A supervised pool of worker processes (compile or exec workers). Each worker
// is a separate process started from `worker_path` and talks to the pool over a
// socketpair with the messages of ipc.h; the worker side is run_worker_loop().
// A worker that crashes, hangs, exhausts its memory or breaks the protocol is
// killed, reaped and replaced; the caller gets an error naming what happened
// and the daemon carries on. See docs/workers.md for the failure table.
#pragma once

#include "fdo/daemon/cgroup.h"
#include "fdo/daemon/ipc.h"
#include "fdo/daemon/job_runner.h"
#include "fdo/daemon/worker_stats.h"
#include "fdo/util/expected.h"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <vector>

namespace fdo::daemon {

enum class ExitOutcome { failure, result };

struct PoolOptions {
  std::string worker_path;              // executable (absolute path recommended)
  std::vector<std::string> worker_args; // e.g. {"--role", "exec"}; "--fd 3" is appended
  int size = 1;                         // number of worker processes (1..256)
  std::string name = "worker";          // for logs and errors: "exec", "compile"
  JobLimits defaults;                   // used by run(request) without limits
  // Callers that may wait for a free worker; one more is refused with
  // Errc::resource_exhausted.
  std::size_t max_waiting = 1024;
  // How long a caller waits for a free worker before Errc::timeout.
  std::chrono::milliseconds queue_timeout{60000};
  // Time a new worker has to start and send its handshake.
  std::chrono::milliseconds startup_timeout{10000};
  // Shutdown: time between SIGTERM and SIGKILL.
  std::chrono::milliseconds shutdown_grace{2000};
  // Delay before retrying a failed respawn, doubling per consecutive failure.
  std::chrono::milliseconds respawn_backoff_initial{50};
  std::chrono::milliseconds respawn_backoff_max{5000};

  // Tenancy. With a bind_spec, a worker serves one tenant: the first job a
  // fresh worker gets carries {"bind": bind_spec(tenant)} and the worker
  // enters that tenant's sandbox (worker_loop.h); it is never given another
  // tenant's job (an idle worker of one tenant is replaced to serve another).
  // Without one, workers serve every tenant (the tests' workers).
  std::function<Expected<nlohmann::json>(const std::string& tenant)> bind_spec;
  // Non-zero: workers' stdout and stderr are captured per job, at most this
  // many bytes each (run()'s JobOutput); zero: they share the daemon's.
  std::uint64_t capture_output_bytes = 0;
  // A worker that exits on its own mid-job (a program calling exit(n)):
  // an error (ExitOutcome::failure), or the job's outcome,
  // {"exited": {"status": n}} (ExitOutcome::result).
  ExitOutcome exit_outcome = ExitOutcome::failure;
  // Callers of one tenant that may wait at once (set_max_waiting_per_tenant).
  std::size_t max_waiting_per_tenant = 1024;
  // Jobs of one tenant running at once (0: no cap). A tenant at its cap waits
  // while other tenants' jobs take the free workers: with a cap below `size`,
  // one tenant flooding the pool cannot hold every worker.
  std::size_t max_running_per_tenant = 0;
  // A background job stopped for this long in all (JobPriority) runs on as a
  // foreground one: continued, never stopped or preempted again, so builds
  // ahead of need are put off, not starved. 0: stopped for as long as
  // foreground jobs run.
  std::chrono::milliseconds background_max_stopped{30000};
  // cgroups (cgroup.h, v2 or v1): each worker gets a group of its own under this
  // tree; at its first job the group gets memory.max (what the worker holds
  // + the job's address_space_bytes) and pids.max = cgroup_pids_max (0: none).
  // A job the kernel kills at memory.max is reported as exceeding its memory
  // limit. Null: no cgroups (rlimits only).
  std::shared_ptr<CgroupTree> cgroups;
  std::uint64_t cgroup_pids_max = 0;
};

// "SIGSEGV (segmentation fault)", "SIGABRT (aborted)", ...
std::string describe_signal(int sig);

class WorkerPool final : public JobRunner {
public:
  // Starts `size` workers and waits for each handshake. Fails (and leaves no
  // process behind) if any cannot be started: bad path, not executable, or a
  // program that does not speak the protocol.
  static Expected<std::unique_ptr<WorkerPool>> create(PoolOptions options);

  // Waits for in-flight jobs (each bounded by its wall limit), refuses waiting
  // callers, then closes every channel, SIGTERMs the workers' process groups,
  // SIGKILLs what is left after shutdown_grace and reaps everything.
  ~WorkerPool() override;
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Runs one job on a free worker; thread-safe; blocks while all workers are
  // busy (FIFO). Outcomes (messages name the pool, e.g. "exec"):
  //   success                 -> the handler's Message
  //   handler error           -> that Error, unchanged (worker kept)
  //   wall time exceeded      -> Errc::timeout "exec worker exceeded the wall-time limit of N ms
  //   (killed)" CPU limit (SIGXCPU)     -> Errc::timeout "... exceeded the CPU-time limit of N s
  //   ..." died of a signal        -> Errc::crashed "program crashed: SIGSEGV (segmentation fault);
  //   ..." memory exhausted        -> Errc::resource_exhausted "... exceeded the memory limit of N
  //   MiB ..." exited mid-job          -> Errc::crashed "... exited unexpectedly with status N ..."
  //   response too large      -> Errc::resource_exhausted (worker killed if it sent it anyway)
  //   protocol violation      -> Errc::internal (worker killed)
  //   queue full / wait timed out / no live worker / shutting down
  //                           -> Errc::resource_exhausted / timeout / unavailable / unavailable
  // Any worker that failed is replaced (asynchronously, with backoff when
  // starting it keeps failing).
  Expected<Message> run(const Message& request, const JobOptions& options,
                        JobOutput* output) override;
  Expected<Message> run(const Message& request, const JobLimits& limits);
  Expected<Message> run(const Message& request);
  // Waiting callers allowed per tenant from now on (configuration reloads).
  void set_max_waiting_per_tenant(std::size_t n) override;

  PoolStats stats() const override;
  const PoolOptions& options() const;

  class Impl;

private:
  explicit WorkerPool(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

} // namespace fdo::daemon
