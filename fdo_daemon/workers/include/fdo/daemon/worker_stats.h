// What a worker pool reports about itself: per-worker state, failures by
// kind, restarts (health, cache.stats and metrics show these).
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <vector>

namespace fdo::daemon {

enum class WorkerState { starting, idle, busy, dead };
std::string_view to_string(WorkerState state);

struct WorkerInfo {
  int slot = 0;
  pid_t pid = 0; // 0 while no process is running in this slot
  WorkerState state = WorkerState::dead;
  std::uint64_t jobs = 0; // jobs served by the current process
  bool bound = false;     // the process took its first job and is bound to `tenant`
  std::string tenant;     // the tenant it is bound to ("" = the daemon's own jobs)
  int consecutive_spawn_failures = 0;
  std::string last_spawn_error;
};

struct FailureCounts {
  std::uint64_t handler_error = 0;    // the handler returned an Error (worker kept)
  std::uint64_t timeout = 0;          // wall-time limit: worker killed
  std::uint64_t cpu_limit = 0;        // RLIMIT_CPU (SIGXCPU)
  std::uint64_t crashed = 0;          // died of a signal
  std::uint64_t memory = 0;           // died near its memory limit
  std::uint64_t exited = 0;           // exited on its own mid-job (a failure unless the pool
                                      // reports a program's exit as its outcome)
  std::uint64_t output_too_large = 0; // response over max_output_bytes (pool-side check)
  std::uint64_t protocol = 0;         // malformed or out-of-sync response: worker killed
  std::uint64_t queue_full = 0;       // refused: too many callers waiting (in all or per tenant)
  std::uint64_t queue_timeout = 0;    // no worker became free in time
  std::uint64_t unavailable = 0;      // no live worker (respawning keeps failing) or shutdown
  std::uint64_t total() const;
};

struct PoolStats {
  std::string name;
  int size = 0;
  int live = 0;            // processes running (idle or busy)
  std::size_t waiting = 0; // callers waiting for a free worker
  std::uint64_t jobs = 0;  // jobs handed to a worker
  std::uint64_t succeeded = 0;
  FailureCounts failures;
  std::uint64_t restarts = 0;         // replacement processes started
  std::uint64_t spawn_failures = 0;   // failed attempts to start a process
  std::uint64_t idle_deaths = 0;      // workers found dead between jobs (replaced, job retried)
  std::uint64_t retired = 0;          // replaced after a job that left threads or memory behind
  std::uint64_t recycled = 0;         // idle workers of one tenant replaced to serve another
  std::uint64_t program_exits = 0;    // jobs whose program ended the worker with exit(n)
  std::uint64_t background_stops = 0; // background jobs stopped while foreground ones ran
  std::uint64_t preemptions = 0;      // background jobs whose worker a foreground job took (rerun)
  std::uint64_t promotions = 0;       // background jobs run on as foreground (stopped too long)
  std::vector<WorkerInfo> workers;
};
nlohmann::json to_json(const PoolStats& stats);

} // namespace fdo::daemon
