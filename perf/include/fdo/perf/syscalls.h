// The system-call seam of the perf library (Envoy's os_sys_calls.h pattern).
// Every perf_event_open, ioctl, mmap, munmap, read and close the library makes,
// the kernel tunables it reads, and the two user-space counter instructions
// (RDPMC, RDTSC) go through one Syscalls object, so tests can inject any
// errno and synthesize any kernel payload without a PMU.
//
// Error policy: a failing call never throws; it returns its errno in the
// result and the caller turns it into a per-event status (see events.h).
#pragma once

#include "fdo/util/expected.h"

#include <cstddef>
#include <cstdint>
#include <linux/perf_event.h>
#include <sys/types.h>

namespace fdo::perf {

// One system call's outcome: `value` on success (error == 0), otherwise the
// errno in `error` (value is then meaningless).
struct SysResult {
  long value = 0;
  int error = 0;
  bool ok() const { return error == 0; }
};

struct MapResult {
  void* addr = nullptr;
  int error = 0;
  bool ok() const { return error == 0; }
};

class Syscalls {
public:
  virtual ~Syscalls() = default;

  virtual SysResult perf_event_open(const perf_event_attr& attr, pid_t pid, int cpu, int group_fd,
                                    unsigned long flags) = 0;
  // `arg` is either a flag word (PERF_IOC_FLAG_GROUP) or a pointer cast to an
  // integer (PERF_EVENT_IOC_ID writes a u64 through it).
  virtual SysResult ioctl(int fd, unsigned long request, unsigned long arg) = 0;
  virtual MapResult mmap(std::size_t length, int prot, int flags, int fd, off_t offset) = 0;
  virtual SysResult munmap(void* addr, std::size_t length) = 0;
  virtual SysResult read(int fd, void* buf, std::size_t count) = 0;
  virtual SysResult close(int fd) = 0;

  // /proc/sys/kernel/perf_event_paranoid and perf_event_max_sample_rate.
  virtual Expected<int> perf_event_paranoid() = 0;
  virtual Expected<long> perf_event_max_sample_rate() = 0;

  // Not system calls, but part of the seam so the user-page (seqlock) protocol
  // can be driven by tests: RDPMC of hardware counter `counter` (the user page's
  // index - 1) and the time-stamp counter. Called only where the kernel's user
  // page says they are usable and has_user_counter_instructions() is true.
  virtual std::uint64_t rdpmc(std::uint32_t counter) = 0;
  virtual std::uint64_t rdtsc() = 0;
  // False where the library was built for an architecture whose user counter
  // read it does not implement (everything but x86-64): rdpmc is then never used.
  virtual bool has_user_counter_instructions() const = 0;

  // The process-wide real implementation (a function-local static; stateless).
  static Syscalls& real();
};

// sysconf(_SC_PAGESIZE), cached.
std::size_t page_size();

} // namespace fdo::perf
