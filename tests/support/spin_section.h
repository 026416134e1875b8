// A CPU-bound loop whose code lies in its own section, so the linker's
// __start_/__stop_ symbols give its exact address range, as the JIT loader
// gives a program's: tests sample it and check the samples land in it.
#pragma once

#include <cstdint>
#include <ctime>

extern "C" {
extern const char __start_fdo_test_spin[];
extern const char __stop_fdo_test_spin[];
}

namespace fdo::testing {

__attribute__((noinline, section("fdo_test_spin"))) inline std::uint64_t
spin_in_section(std::uint64_t n, std::uint64_t seed) {
  std::uint64_t x = seed;
  for (std::uint64_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    __asm__ volatile("" : "+r"(x));
  }
  return x;
}

inline std::uint64_t spin_start() {
  return reinterpret_cast<std::uint64_t>(__start_fdo_test_spin);
}
inline std::uint64_t spin_size() {
  return reinterpret_cast<std::uint64_t>(__stop_fdo_test_spin) - spin_start();
}

// CPU time of the calling thread, in nanoseconds.
inline std::uint64_t thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ull + ts.tv_nsec;
}

} // namespace fdo::testing
