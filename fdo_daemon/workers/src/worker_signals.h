// What a worker process sets up for itself before its loop (worker_loop.h):
// dying with the daemon, one malloc arena, no core files, and handlers that
// report a fatal signal to the pool before the worker dies of it.
#pragma once

#include "fdo/util/expected.h"
#include "fdo/util/fd.h"

#include <cstdint>

namespace fdo::daemon::detail {

// Settings of the whole process a worker needs before its first job.
Status setup_worker_process();

// Address space currently mapped by this process (VmSize), from
// /proc/self/statm (kept open while a FatalSignalGuard is installed).
std::uint64_t read_vm_bytes() noexcept;

// Installs the fatal-signal handlers on an alternate stack (a stack overflow
// must still be reported) and removes them again on destruction. While a job
// runs (job_started .. job_ended), a fatal signal first sends the pool, on
// `fd`, the job's id and how much address space it had added (the pool tells
// "exhausted its memory" from "crashed" by it), then kills the worker.
class FatalSignalGuard {
public:
  static Expected<FatalSignalGuard> install(int fd);
  FatalSignalGuard() = default;
  FatalSignalGuard(FatalSignalGuard&& o) noexcept;
  FatalSignalGuard& operator=(FatalSignalGuard&&) = delete;
  ~FatalSignalGuard();

  // `vm`: read_vm_bytes() as the job starts.
  void job_started(std::uint64_t id, std::uint64_t vm) const;
  void job_ended() const;

private:
  Mapping stack_;
  Fd statm_;
  bool active_ = false;
};

} // namespace fdo::daemon::detail
