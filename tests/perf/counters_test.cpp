// Counting groups on the real kernel and the pure pieces (payload parsing,
// multiplexing scaling).
#include "fdo/perf/counters.h"
#include "support/skip.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <iostream>
#include <thread>

using namespace fdo;
using namespace fdo::perf;

namespace {

// Something the optimiser cannot delete, taking a few milliseconds.
std::uint64_t small_loop(std::uint64_t n) {
  volatile std::uint64_t acc = 1;
  for (std::uint64_t i = 0; i < n; ++i)
    acc = acc * 6364136223846793005ull + i;
  return acc;
}

std::vector<std::uint8_t> group_payload(std::initializer_list<std::uint64_t> words) {
  std::vector<std::uint8_t> b(words.size() * 8);
  std::size_t i = 0;
  for (auto w : words)
    std::memcpy(b.data() + 8 * i++, &w, 8);
  return b;
}

} // namespace

TEST_CASE("a real measured execution returns software figures and no error", "[perf][counters]") {
  std::vector<std::string> events = default_hardware_events();
  auto group = CounterGroup::open(events);
  REQUIRE(group);
  std::uint64_t sink = 0;
  Measurement m = measure(*group, [&] { sink = small_loop(2'000'000); });
  CHECK(sink != 0);
  CHECK(m.wall_ns > 0);
  CHECK(m.thread_cpu_ns > 0);
  REQUIRE(m.events.size() == events.size());
  const HostContext host = host_context(Syscalls::real());
  if (group->task_clock_available()) {
    REQUIRE(m.task_clock_ns.has_value());
    CHECK(*m.task_clock_ns > 0);
  } else {
    CHECK_FALSE(m.task_clock_reason.empty());
  }
  if (!host.core_pmu) {
    // This development machine: no PMU. Every hardware event says so, none is 0.
    CHECK(group->counting_events() == 0);
    CHECK(m.method == ReadMethod::none);
    for (const auto& e : m.events) {
      INFO(e.name << ": " << e.reason);
      CHECK(e.status == EventStatus::no_pmu);
      CHECK(e.error == ENOENT);
      CHECK_FALSE(e.value.has_value());
    }
  } else {
    for (const auto& e : m.events) {
      INFO(e.name << ": " << e.reason);
      if (e.status == EventStatus::available)
        CHECK(e.value.has_value());
      else
        CHECK_FALSE(e.reason.empty());
    }
  }
  auto j = to_json(m);
  CHECK(j["thread_cpu_ns"].get<std::uint64_t>() == m.thread_cpu_ns);
  CHECK(j["process_cpu_ns"].get<std::uint64_t>() == m.process_cpu_ns);
  CHECK(j["events"].size() == events.size());
  std::cout << "real measurement: " << j.dump() << "\n";
}

TEST_CASE("process CPU time counts the threads the measured code starts, thread CPU time not",
          "[perf][counters]") {
  auto group = CounterGroup::open({});
  REQUIRE(group);
  std::uint64_t mine = 0, theirs = 0;
  // The calling thread only waits; another thread does the work.
  Measurement m = measure(*group, [&] {
    std::thread worker([&] { theirs = small_loop(20'000'000); });
    worker.join();
  });
  CHECK(theirs != 0);
  INFO("thread " << m.thread_cpu_ns << " ns, process " << m.process_cpu_ns << " ns, wall "
                 << m.wall_ns << " ns");
  // 20M dependent multiply-adds: well over 5 ms of CPU on any host.
  CHECK(m.process_cpu_ns > 5'000'000);
  CHECK(m.thread_cpu_ns * 4 < m.process_cpu_ns);
  // The same work on the calling thread: both clocks see it.
  Measurement own = measure(*group, [&] { mine = small_loop(20'000'000); });
  CHECK(mine != 0);
  CHECK(own.thread_cpu_ns > 5'000'000);
  CHECK(own.process_cpu_ns >= own.thread_cpu_ns);
}

TEST_CASE("a group can be read while it runs and measured repeatedly", "[perf][counters]") {
  auto group = CounterGroup::open({"task-clock", "cpu-clock"});
  REQUIRE(group);
  if (group->counting_events() == 0) {
    FDO_SKIP("skipped: software events cannot be opened here: " + group->statuses()[0].reason);
  }
  // Software events in the group: read(2), never rdpmc.
  CHECK(group->read_method() == ReadMethod::read_syscall);
  group->start();
  small_loop(500'000);
  Measurement mid = group->read();
  small_loop(500'000);
  group->stop();
  Measurement end = group->read();
  REQUIRE(mid.events[0].value);
  REQUIRE(end.events[0].value);
  CHECK(end.events[0].value > mid.events[0].value);
  CHECK(end.method == ReadMethod::read_syscall);
  CHECK(end.events[0].running_ratio == 1.0);
  CHECK_FALSE(end.events[0].multiplexed);
  // A second window starts from zero (the group is reset).
  Measurement again = measure(*group, [] { small_loop(1000); });
  REQUIRE(again.events[0].value);
  CHECK(*again.events[0].value < *end.events[0].value);
}

TEST_CASE("each window's task clock counts that window only", "[perf][counters]") {
  auto group = CounterGroup::open({});
  REQUIRE(group);
  if (!group->task_clock_available()) FDO_SKIP("skipped: task-clock cannot be opened here");
  Measurement big = measure(*group, [] { small_loop(20'000'000); });
  Measurement small = measure(*group, [] { small_loop(1000); });
  Measurement big_again = measure(*group, [] { small_loop(20'000'000); });
  REQUIRE(big.task_clock_ns);
  REQUIRE(small.task_clock_ns);
  REQUIRE(big_again.task_clock_ns);
  CHECK(*small.task_clock_ns < *big.task_clock_ns / 4);
  // Not a running total either: the third window is about the first's.
  CHECK(*big_again.task_clock_ns < *big.task_clock_ns * 3);
  CHECK(*big_again.task_clock_ns > *big.task_clock_ns / 3);
  // About the thread's CPU time over the same window (the two clocks are
  // kept apart by the kernel and differ by a little).
  CHECK(*big.task_clock_ns < big.thread_cpu_ns * 2);
  CHECK(*big.task_clock_ns > big.thread_cpu_ns / 2);
}

TEST_CASE("reading before start reports nothing measured", "[perf][counters]") {
  auto group = CounterGroup::open({"task-clock"});
  REQUIRE(group);
  Measurement m = group->read();
  CHECK(m.wall_ns == 0);
  CHECK(m.method == ReadMethod::none);
  CHECK_FALSE(m.events[0].value.has_value());
}

TEST_CASE("malformed group requests are errors", "[perf][counters]") {
  auto dup = CounterGroup::open({"cycles", "cycles"});
  REQUIRE_FALSE(dup);
  CHECK(dup.error().message().find("'cycles' listed twice") != std::string::npos);
  auto empty = CounterGroup::open({"cycles", ""});
  REQUIRE_FALSE(empty);
  CHECK(empty.error().code() == Errc::invalid_argument);
  std::vector<std::string> many;
  for (int i = 0; i < 40; ++i)
    many.push_back(std::to_string(i) + "e");
  CHECK_FALSE(CounterGroup::open(many));
  // An unknown event is not an error: it is reported and skipped.
  auto unknown = CounterGroup::open({"no_such_event_xyz", "task-clock"});
  REQUIRE(unknown);
  auto st = unknown->statuses();
  CHECK((st[0].status == EventStatus::unknown_event || st[0].status == EventStatus::no_pmu));
  CHECK(st[0].reason.find("no_such_event_xyz") != std::string::npos);
}

TEST_CASE("group read payloads are parsed and bounds-checked", "[perf][counters]") {
  auto p = group_payload({2, 500, 250, 1000, 11, 3000, 12});
  auto r = parse_group_read(p);
  REQUIRE(r);
  CHECK(r->time_enabled == 500);
  CHECK(r->time_running == 250);
  REQUIRE(r->values.size() == 2);
  CHECK(r->values[1].value == 3000);
  CHECK(r->values[1].id == 12);

  auto shortp = group_payload({2, 500, 250, 1000, 11});
  auto bad = parse_group_read(shortp);
  REQUIRE_FALSE(bad);
  CHECK(bad.error().code() == Errc::corrupt);
  CHECK_FALSE(parse_group_read(std::span<const std::uint8_t>(p.data(), 10)));
  auto huge = group_payload({~0ull, 1, 1});
  CHECK_FALSE(parse_group_read(huge));
}

TEST_CASE("multiplexed counts are scaled by enabled/running", "[perf][counters]") {
  auto r = scale_reading("branch-misses", 1000, 200, 100);
  REQUIRE(r.value);
  CHECK(*r.value == 2000);
  CHECK(r.running_ratio == Approx(0.5));
  CHECK(r.multiplexed);
  CHECK(r.status == EventStatus::available);

  auto full = scale_reading("x", 1000, 200, 200);
  CHECK(*full.value == 1000);
  CHECK_FALSE(full.multiplexed);
  CHECK(full.running_ratio == 1.0);

  auto zero = scale_reading("cycles", 0, 5000, 0);
  CHECK_FALSE(zero.value.has_value());
  CHECK(zero.status == EventStatus::multiplexed_to_zero);
  CHECK(zero.reason.find("time_running = 0") != std::string::npos);

  // raw * enabled overflows 64 bits; the 128-bit intermediate does not.
  auto big = scale_reading("x", 1ull << 62, 4'000'000'000ull, 2'000'000'000ull);
  CHECK(*big.value == (1ull << 63));
  auto sat = scale_reading("x", 1ull << 62, 1ull << 40, 1);
  CHECK(*sat.value == ~0ull);
}
