// How a job that took its worker down is reported: which limit it hit, or what
// killed it, and which failure counter it adds to. A pure function of what the
// pool saw, so every case is tested without starting a process.
#pragma once

#include "fdo/daemon/ipc.h"
#include "fdo/daemon/worker_stats.h"
#include "fdo/util/expected.h"
#include "worker_process.h"

#include <cstdint>
#include <optional>
#include <string>
#include <sys/types.h>

namespace fdo::daemon::detail {

// What the worker's fatal-signal handler reported before it died.
struct FatalReport {
  int signal = 0;
  std::uint64_t job_vm_bytes = 0;
};

// How the pool lost contact with the worker during a job.
enum class Failure {
  wall_timeout,     // deadline passed: kill now
  output_too_large, // response over the limit: the stream cannot be resynchronised, kill now
  protocol,         // malformed response: kill now
  broken,           // channel ended or failed: let the worker finish dying, then classify
};

// Whether the worker was still running when the pool gave up on it (so the
// pool's SIGKILL ended it) or had already ended on its own.
enum class EndedBy { pool, itself };

struct FailureContext {
  std::string pool_name; // "exec", "compile": named in messages
  Failure kind = Failure::broken;
  Error cause{Errc::internal, {}}; // what the channel reported
  JobLimits limits;                // the job's limits, quoted in messages
  std::optional<FatalReport> report;
  ExitInfo ended; // the reaped process's status and usage
  pid_t pid = 0;
  EndedBy ended_by = EndedBy::pool;
};

struct ClassifiedFailure {
  Error error;
  std::uint64_t FailureCounts::*counter = &FailureCounts::crashed;
};

ClassifiedFailure classify_failure(const FailureContext& ctx);

} // namespace fdo::daemon::detail
