// One worker process as the pool sees it: spawning it (argv, environment,
// exactly the descriptors it should have), its channel, its pidfd, the files
// that capture what the programs it runs print, and reaping it. Private to
// the pool (worker_pool.cpp).
#pragma once

#include "fdo/daemon/cgroup.h"
#include "fdo/daemon/ipc.h"
#include "fdo/daemon/job_runner.h"
#include "fdo/util/expected.h"
#include "fdo/util/fd.h"

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <sys/resource.h>
#include <sys/types.h>
#include <vector>

namespace fdo::daemon::detail {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Inside a worker: the channel is fd 3, the daemon's log fd 4 (when output is
// captured, fds 1 and 2 are the capture files).
constexpr int kWorkerChannelFd = 3;
constexpr int kWorkerLogFd = 4;
// How long a worker whose channel broke gets to finish dying on its own
// before it is killed (its real exit status is what we want to report).
constexpr milliseconds kExitGrace{1000};

struct ExitInfo {
  int status = -1; // wait status; -1 when it could not be collected
  rusage usage{};
  std::uint64_t oom_kills = 0; // killed by the kernel at its cgroup's memory.max
};
std::string describe_exit(const ExitInfo& e);

// Each worker leads its own process group so that whatever it started is
// killed with it. The destructor never leaves a zombie behind.
class Child {
public:
  Child(pid_t pid, Fd pidfd, Fd sock, Fd out, Fd err)
      : pid_(pid), pidfd_(std::move(pidfd)), sock_(std::move(sock)), out_(std::move(out)),
        err_(std::move(err)) {}
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child() {
    if (!reaped_) reap();
  }

  pid_t pid() const { return pid_; }
  int sock() const { return sock_.get(); }
  int pidfd() const { return pidfd_.get(); }
  void close_channel() { sock_.reset(); }
  bool captures_output() const { return out_.valid(); }
  // The worker's own cgroup (null when the pool has none); removed, with
  // whatever is still in it, after the worker is reaped.
  Cgroup* cgroup() const { return cgroup_.get(); }
  void set_cgroup(std::unique_ptr<Cgroup> group) { cgroup_ = std::move(group); }

  void signal_group(int sig) const;
  // True once the worker has exited (it is left unreaped, so its group and
  // status stay valid); false if it is still running after `timeout`.
  bool wait_exited(milliseconds timeout) const;
  // Kills whatever is left of the worker's process group and collects the
  // worker's exit status (its real one if it had already died).
  ExitInfo reap();

  // Empties the capture files before a job (no system call when the last
  // read_output found both empty: nothing runs in the worker between jobs).
  void reset_output();
  // What the last job printed, at most `limit` bytes per stream.
  JobOutput read_output(std::uint64_t limit) const;

private:
  pid_t pid_;
  Fd pidfd_;
  Fd sock_;
  Fd out_, err_; // capture files (memfds), shared with the worker's fds 1 and 2
  // Both capture files were empty when last read, and no job ran since.
  mutable bool outputs_empty_ = false;
  bool reaped_ = false;
  ExitInfo exit_;
  std::unique_ptr<Cgroup> cgroup_;
};

struct SpawnOptions {
  std::string name; // for messages: "exec", "compile"
  std::string path;
  std::vector<std::string> args;
  milliseconds startup_timeout{10000};
  // Non-zero: fds 1 and 2 of the worker are capture files the pool reads
  // after each job; otherwise the worker shares the daemon's stdout/stderr.
  std::uint64_t capture_output_bytes = 0;
  // Each worker is placed in a cgroup of its own under this tree when set.
  std::shared_ptr<CgroupTree> cgroups;
};

// Starts a worker and waits for its handshake (killing it on failure).
Expected<std::unique_ptr<Child>> spawn_worker(const SpawnOptions& o);

} // namespace fdo::daemon::detail
