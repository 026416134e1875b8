// Hardware counter checks that need a PMU. Where there is none (this
// development machine, most VMs) they print why and skip.
#include "fdo/perf/counters.h"
#include "support/skip.h"

#include <catch2/catch.hpp>
#include <iostream>
#include <random>

using namespace fdo;
using namespace fdo::perf;

namespace {

// Returns the skip reason, or empty when `event` counts on this host.
std::string unavailable(CounterGroup& g, const std::string& event) {
  for (const auto& s : g.statuses())
    if (s.name == event && s.status != EventStatus::available) return s.reason;
  return {};
}

#if defined(__x86_64__)
// Exactly 2n + 1 user instructions: mov, then n x (dec, jnz).
__attribute__((noinline)) void known_loop(std::uint64_t n) {
  __asm__ volatile("mov %0, %%rcx\n"
                   "1:\n\t"
                   "dec %%rcx\n\t"
                   "jnz 1b\n"
                   :
                   : "r"(n)
                   : "rcx", "cc");
}

// One data-dependent conditional branch per byte, kept a branch (not a cmov).
__attribute__((noinline)) std::uint64_t branchy(const std::vector<std::uint8_t>& data) {
  std::uint64_t acc = 0;
  for (std::uint8_t b : data)
    __asm__ volatile("test $1, %b1\n\t"
                     "jz 1f\n\t"
                     "add $1, %0\n"
                     "1:\n"
                     : "+r"(acc)
                     : "q"(b)
                     : "cc");
  return acc;
}
#endif

} // namespace

TEST_CASE("instructions for a known loop are within 5% of expectation", "[perf][hardware]") {
#if !defined(__x86_64__)
  FDO_SKIP("skipped: the known-instruction-count loop is written for x86-64");
#else
  auto g = CounterGroup::open({"instructions"});
  REQUIRE(g);
  if (auto why = unavailable(*g, "instructions"); !why.empty()) {
    FDO_SKIP("skipped: no hardware instruction counter here: " + why);
  }
  constexpr std::uint64_t n = 10'000'000;
  Measurement m = measure(*g, [] { known_loop(n); });
  const EventReading* r = m.find("instructions");
  REQUIRE(r);
  INFO("reason: " << r->reason);
  REQUIRE(r->value);
  const double expected = 2.0 * n + 1;
  std::cout << "instructions: " << *r->value << " expected " << expected << " ("
            << to_string(m.method) << ", running ratio " << r->running_ratio << ")\n";
  CHECK(static_cast<double>(*r->value) == Approx(expected).epsilon(0.05));
#endif
}

TEST_CASE("branch misses are higher for a random branch than a predictable one",
          "[perf][hardware]") {
#if !defined(__x86_64__)
  FDO_SKIP("skipped: the branch kernel is written for x86-64");
#else
  auto g = CounterGroup::open({"branch-misses"});
  REQUIRE(g);
  if (auto why = unavailable(*g, "branch-misses"); !why.empty()) {
    FDO_SKIP("skipped: no hardware branch-miss counter here: " + why);
  }
  constexpr std::size_t n = 2'000'000;
  std::vector<std::uint8_t> random_bits(n), steady(n, 1);
  std::mt19937_64 rng(12345);
  for (auto& b : random_bits)
    b = static_cast<std::uint8_t>(rng() & 1);
  std::uint64_t sink = 0;
  Measurement predictable = measure(*g, [&] { sink += branchy(steady); });
  Measurement random = measure(*g, [&] { sink += branchy(random_bits); });
  CHECK(sink > 0);
  REQUIRE(predictable.events[0].value);
  REQUIRE(random.events[0].value);
  const auto p = *predictable.events[0].value;
  const auto r = *random.events[0].value;
  std::cout << "branch-misses: predictable " << p << ", random " << r << "\n";
  CHECK(r > 2 * p);
  CHECK(r > n / 10); // about n/2 expected for a coin flip
#endif
}
