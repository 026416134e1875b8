// The worker-process side of the pool: a loop that reads job requests from the
// daemon, applies each job's resource limits, calls a handler and sends the
// result back. Compiling client IR and running client code happen only inside
// this loop, in a separate process (LLVM is not hardened against hostile IR).
//
// A worker's main() is expected to look like:
//
//   int main(int argc, char** argv) {
//     auto fd = fdo::daemon::worker_fd_from_args(argc, argv);
//     if (!fd) { fdo::log::error(fd.error().describe()); return 64; }
//     return fdo::daemon::run_worker_loop(*fd, [](const Message& req) -> Expected<Message> {...});
//   }
#pragma once

#include "fdo/daemon/ipc.h"
#include "fdo/util/expected.h"

#include <cstdint>
#include <functional>
#include <optional>

namespace fdo::daemon {

// What a handler may want to know about the job it runs.
struct JobContext {
  std::uint64_t id = 0;
  JobLimits limits; // already applied to the process (RLIMIT_AS, RLIMIT_CPU)
};

using JobHandler = std::function<Expected<Message>(const Message& request)>;
// Enters the sandbox described by a pool's bind request (once per process,
// before its first job); returns a report the pool logs.
using BindHandler = std::function<Expected<nlohmann::json>(const nlohmann::json& spec)>;
using ContextJobHandler =
    std::function<Expected<Message>(const Message& request, const JobContext& context)>;

// Whether threads still running after a job mean the job left client code
// running (retire the worker) or are the worker's own (a GPU worker's driver
// keeps threads for its context; no client code runs on its host side).
enum class LeftoverThreads { retire, expected };

struct WorkerLoopOptions {
  // Requests come from the daemon (trusted), but still never allocate blindly.
  FrameLimits request_limits{64 * kMiB, 4 * kGiB, UINT64_MAX};
  // Without one, a bind request is refused (the pool then retires the worker).
  BindHandler bind;
  LeftoverThreads leftover_threads = LeftoverThreads::retire;
  // Asked after each job: a non-empty reason retires the worker (a GPU
  // worker whose context a kernel fault lost).
  std::function<std::string()> retire_after;
  // Asked after each job: the threads the handler counted as it ended (an
  // exec job counts them to know whether to leave its program mapped), so
  // the loop's own check need not count again; nullopt: the loop counts.
  std::function<std::optional<std::size_t>()> threads_after_job;
};

// Runs until the daemon closes the channel; returns the process exit status:
// 0 on end of stream, 1 if the process could not be set up, 2 on a broken
// channel (corrupt frame, I/O error).
//
// Once, at start: PR_SET_PDEATHSIG(SIGKILL) and a check that the parent named
// in $FDO_WORKER_PARENT_PID is still the parent; RLIMIT_CORE 0; handlers for
// fatal signals (on an alternate stack) that tell the pool how much memory the
// job had mapped before the worker dies of the signal; a handshake message.
//
// Binding: the first job a pool sends to a new worker may carry
// {"bind": {"spec": <sandbox spec>, "retire_growth_bytes": N}}. The loop hands
// the spec to options.bind (which enters the sandbox for that tenant) before
// running the job; a worker binds once. A failed bind is answered with the
// error and "retire".
//
// Descriptors that come with a job (ipc.h; at most kMaxMessageFds) are the
// handler's to use through request.fds and are closed once its reply is sent.
//
// Per job: RLIMIT_AS soft limit = current address space + limits.address_space_bytes
// (clamped to the hard limit), restored after the handler returns; RLIMIT_CPU
// soft limit = CPU used so far (whole seconds, rounded up) + effective_cpu_seconds,
// set only when that value changes, and lifted after a job whose wall time
// reached half its allowance over the host's CPUs (a shorter job cannot have
// used more than half of it, so the limit stays in force for the next one to
// reuse, saving two system calls a job). Then stdout
// and stderr are flushed (a pool capturing them reads them after the reply),
// and the worker checks it is still clean: a thread the job left running, or
// mapped memory grown by more than retire_growth_bytes since binding, adds
// "retire": "<why>" to the reply, and the pool replaces the worker. The handler's result is sent
// back; an Error is sent as {code, message}. std::bad_alloc escaping the handler becomes
// Errc::resource_exhausted "exceeded the memory limit of N MiB (allocation failed)"; other
// exceptions become Errc::internal. A result larger than limits.max_output_bytes is replaced by an
// Errc::resource_exhausted error.
int run_worker_loop(int fd, JobHandler handler, WorkerLoopOptions options = {});
int run_worker_loop(int fd, ContextJobHandler handler, WorkerLoopOptions options = {});

// Threads this process runs now: the link count of /proc/self/task (2 + the
// threads), from `task_dir_fd` when given (kept open by the loop), else
// opened for the call; 1 if unreadable.
std::size_t process_thread_count(int task_dir_fd = -1);

// Finds "--fd N" in argv and checks that N is an open socket.
Expected<int> worker_fd_from_args(int argc, const char* const* argv);

// Finds "--nice N" in argv (0..19; 0 when absent): how far below the daemon's
// own threads a worker's CPU priority is (compile workers: `compile_nice`,
// docs/workers.md "CPU priority").
Expected<int> worker_nice_from_args(int argc, const char* const* argv);

// nice > 0: this thread, and every thread it starts from now on, runs under
// SCHED_BATCH at that nice value, so it yields a CPU to the daemon's request
// threads and the exec workers (~1/10 of one it shares with them at nice 10). 0: nothing
// changes. Only lowers a priority, which needs no privilege.
Status lower_cpu_priority(int nice);

} // namespace fdo::daemon
