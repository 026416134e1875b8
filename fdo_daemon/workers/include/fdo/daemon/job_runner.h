// Something that runs worker jobs: the supervised WorkerPool in fdod, a fake
// in the service's unit tests.
#pragma once

#include "fdo/daemon/ipc.h"
#include "fdo/daemon/worker_stats.h"
#include "fdo/util/expected.h"
#include "fdo/util/urgency.h"

#include <functional>
#include <memory>

namespace fdo::daemon {

// What a job's program printed (when the runner captures output).
struct JobOutput {
  std::string out;        // stdout
  std::string err;        // stderr
  bool truncated = false; // a stream was longer than the capture limit
};

// What becomes of the worker after the job (besides what the job itself
// leaves behind, which may retire it anyway).
enum class AfterJob {
  keep,   // serve the tenant's next job
  retire, // replace it: a one-off job (the daemon's probe) should not hold a worker
};

// Whether anyone waits for a job. A pool stops its background jobs (SIGSTOP)
// while any of its foreground jobs runs and continues them (SIGCONT) when
// none does, so a compile no stage waits for (the guard's build ahead of
// need) never takes cores from one a stage waits for. The time a job spends
// stopped does not count against its wall limit; its CPU limit is
// unchanged (a stopped process uses none). docs/workers.md.
enum class JobPriority { foreground, background };

struct JobOptions {
  JobLimits limits;
  // Jobs of different tenants never run in the same worker process. Empty:
  // the daemon's own jobs (a probe).
  std::string tenant;
  AfterJob after = AfterJob::keep;
  // Checks a successful reply before the worker goes back to the pool: an
  // error is the worker breaking the protocol (it is killed and replaced, the
  // job fails with what the check said). For replies whose body the pool's
  // framing does not look into (the exec reply's typed body: exec_messages.h).
  // A runner that does not check (a test's fake) leaves it to the caller.
  std::function<Status(const Message&)> check_reply{};
  JobPriority priority = JobPriority::foreground;
  // A background job's: raised when a caller comes to wait for its result
  // (a stage joins a build ahead of need); from then on it is a foreground
  // job, waiting or running. Null: the priority stays.
  std::shared_ptr<Urgency> urgency{};
};

class JobRunner {
public:
  virtual ~JobRunner() = default;
  // Runs one job to completion; thread-safe. `output`, when given, receives
  // what the job printed, whatever the outcome.
  virtual Expected<Message> run(const Message& request, const JobOptions& options,
                                JobOutput* output) = 0;
  virtual PoolStats stats() const = 0;
  // Callers of one tenant that may wait at once (configuration reloads).
  virtual void set_max_waiting_per_tenant(std::size_t n) = 0;
};

} // namespace fdo::daemon
