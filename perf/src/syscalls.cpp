#include "fdo/perf/syscalls.h"

#include "fdo/util/fd.h"

#include <cerrno>
#include <charconv>
#include <string>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace fdo::perf {
namespace {

template <class T> Expected<T> read_number(const char* path) {
  auto text = read_file(path, 4096);
  if (!text) return std::move(text).error();
  const std::string& s = *text;
  std::size_t begin = 0;
  while (begin < s.size() && (s[begin] == ' ' || s[begin] == '\t'))
    ++begin;
  T value{};
  auto [ptr, ec] = std::from_chars(s.data() + begin, s.data() + s.size(), value);
  if (ec != std::errc() || ptr == s.data() + begin)
    return make_error(Errc::parse, std::string(path) + ": not a number: '" + s + "'");
  return value;
}

class RealSyscalls final : public Syscalls {
public:
  SysResult perf_event_open(const perf_event_attr& attr, pid_t pid, int cpu, int group_fd,
                            unsigned long flags) override {
    // PERF_FLAG_FD_CLOEXEC: the exec worker forks helpers; counters must not leak into them.
    long fd =
        ::syscall(SYS_perf_event_open, &attr, pid, cpu, group_fd, flags | PERF_FLAG_FD_CLOEXEC);
    if (fd < 0) return {-1, errno};
    return {fd, 0};
  }
  SysResult ioctl(int fd, unsigned long request, unsigned long arg) override {
    int r = ::ioctl(fd, request, arg);
    if (r < 0) return {-1, errno};
    return {r, 0};
  }
  MapResult mmap(std::size_t length, int prot, int flags, int fd, off_t offset) override {
    void* p = ::mmap(nullptr, length, prot, flags, fd, offset);
    if (p == MAP_FAILED) return {nullptr, errno};
    return {p, 0};
  }
  SysResult munmap(void* addr, std::size_t length) override {
    if (::munmap(addr, length) < 0) return {-1, errno};
    return {0, 0};
  }
  SysResult read(int fd, void* buf, std::size_t count) override {
    ssize_t n = ::read(fd, buf, count);
    if (n < 0) return {-1, errno};
    return {static_cast<long>(n), 0};
  }
  SysResult close(int fd) override {
    // close(2) must not be retried on EINTR on Linux: the fd is gone either way.
    if (::close(fd) < 0) return {-1, errno};
    return {0, 0};
  }
  Expected<int> perf_event_paranoid() override {
    return read_number<int>("/proc/sys/kernel/perf_event_paranoid");
  }
  Expected<long> perf_event_max_sample_rate() override {
    return read_number<long>("/proc/sys/kernel/perf_event_max_sample_rate");
  }
#if defined(__x86_64__)
  std::uint64_t rdpmc(std::uint32_t counter) override {
    return __builtin_ia32_rdpmc(static_cast<int>(counter));
  }
  std::uint64_t rdtsc() override {
    return __rdtsc();
  }
  bool has_user_counter_instructions() const override {
    return true;
  }
#else
  std::uint64_t rdpmc(std::uint32_t) override {
    return 0;
  }
  std::uint64_t rdtsc() override {
    return 0;
  }
  bool has_user_counter_instructions() const override {
    return false;
  }
#endif
};

} // namespace

Syscalls& Syscalls::real() {
  static RealSyscalls instance;
  return instance;
}

std::size_t page_size() {
  static const std::size_t size = [] {
    long s = ::sysconf(_SC_PAGESIZE);
    return s > 0 ? static_cast<std::size_t>(s) : std::size_t(4096);
  }();
  return size;
}

} // namespace fdo::perf
