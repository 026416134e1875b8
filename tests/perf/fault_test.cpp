// Faults injected through the Syscalls seam: every errno the kernel can give
// a self-monitoring counting group, and synthesized read()/user-page payloads.
#include "fdo/perf/counters.h"
#include "perf_fixtures.h"

#include <catch2/catch.hpp>
#include <sys/mman.h>

using namespace fdo;
using namespace fdo::perf;
using fdo::perf::testing::FakeSyscalls;

namespace {

std::uint64_t spin(std::uint64_t n) {
  volatile std::uint64_t acc = 1;
  for (std::uint64_t i = 0; i < n; ++i)
    acc = acc + i * 3;
  return acc;
}

void check_software_figures(const Measurement& m) {
  CHECK(m.wall_ns > 0);
  CHECK(m.thread_cpu_ns > 0);
}

} // namespace

TEST_CASE("EACCES: not_permitted - naming perf_event_paranoid and CAP_PERFMON", "[perf][fault]") {
  FakeSyscalls fake;
  fake.paranoid = 3;
  fake.fail_pmu_events(EACCES);
  auto g = CounterGroup::open({"instructions", "branch-misses"}, fake);
  REQUIRE(g);
  CHECK(g->counting_events() == 0);
  Measurement m = measure(*g, [] { spin(100000); });
  check_software_figures(m);
  for (const auto& e : m.events) {
    CHECK(e.status == EventStatus::not_permitted);
    CHECK(e.error == EACCES);
    CHECK_FALSE(e.value.has_value());
    CHECK(e.reason.find("perf_event_paranoid=3") != std::string::npos);
    CHECK(e.reason.find("CAP_PERFMON") != std::string::npos);
  }
  // task-clock is software: it still opens and counts.
  REQUIRE(m.task_clock_ns.has_value());
}

TEST_CASE("EPERM at paranoid 2 points at seccomp / CAP_PERFMON", "[perf][fault]") {
  FakeSyscalls fake;
  fake.paranoid = 2;
  fake.fail_all(EPERM);
  auto g = CounterGroup::open({"cycles"}, fake);
  REQUIRE(g);
  Measurement m = measure(*g, [] { spin(1000); });
  check_software_figures(m);
  CHECK(m.events[0].status == EventStatus::not_permitted);
  CHECK(m.events[0].reason.find("seccomp") != std::string::npos);
  CHECK(m.events[0].reason.find("CAP_PERFMON") != std::string::npos);
  CHECK_FALSE(m.task_clock_ns.has_value());
  CHECK(m.task_clock_reason.find("EPERM") != std::string::npos);
}

TEST_CASE("EOPNOTSUPP - ENOENT and EINVAL are recorded per event - the rest still counts",
          "[perf][fault]") {
  FakeSyscalls fake;
  fake.fail_event(PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS, ENOENT);
  fake.fail_event(PERF_TYPE_HARDWARE, PERF_COUNT_HW_BRANCH_MISSES, EOPNOTSUPP);
  fake.fail_event(PERF_TYPE_HW_CACHE, 0x10004, EINVAL); // iTLB-load-misses
  fake.set_value(PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES, 777);
  fake.set_value(PERF_TYPE_HW_CACHE, 0x10001, 55);
  auto g = CounterGroup::open(
      {"instructions", "cycles", "branch-misses", "L1-icache-load-misses", "iTLB-load-misses"},
      fake);
  REQUIRE(g);
  CHECK(g->counting_events() == 2);

  // cycles leads (instructions failed first), L1-icache joins its group.
  REQUIRE(fake.opened.size() >= 3);
  const auto& leader = fake.opened[0];
  CHECK(leader.attr.config == PERF_COUNT_HW_CPU_CYCLES);
  CHECK(leader.group_fd == -1);
  CHECK(leader.attr.exclude_kernel == 1);
  CHECK(leader.attr.disabled == 1);
  CHECK(leader.attr.read_format == (PERF_FORMAT_GROUP | PERF_FORMAT_TOTAL_TIME_ENABLED |
                                    PERF_FORMAT_TOTAL_TIME_RUNNING | PERF_FORMAT_ID));
  CHECK(fake.opened[1].group_fd == leader.fd);

  Measurement m = measure(*g, [] { spin(1000); });
  check_software_figures(m);
  CHECK(m.method == ReadMethod::read_syscall);
  CHECK(m.find("instructions")->status == EventStatus::no_pmu);
  CHECK(m.find("branch-misses")->status == EventStatus::not_supported);
  CHECK(m.find("branch-misses")->reason.find("EOPNOTSUPP") != std::string::npos);
  CHECK(m.find("iTLB-load-misses")->status == EventStatus::not_supported);
  CHECK(m.find("iTLB-load-misses")->reason.find("group member") != std::string::npos);
  CHECK(*m.find("cycles")->value == 777);
  CHECK(*m.find("L1-icache-load-misses")->value == 55);

  // Enable/disable went to the leader with PERF_IOC_FLAG_GROUP.
  bool group_enable = false;
  for (const auto& c : fake.ioctls)
    if (c.request == PERF_EVENT_IOC_ENABLE && c.fd == leader.fd && c.arg == PERF_IOC_FLAG_GROUP)
      group_enable = true;
  CHECK(group_enable);
  CHECK(fake.count_ioctls(PERF_EVENT_IOC_DISABLE) >= 2); // group + task-clock
}

TEST_CASE("EINTR on read is retried and the value is right", "[perf][fault]") {
  FakeSyscalls fake;
  fake.set_value(PERF_TYPE_HARDWARE, PERF_COUNT_HW_BRANCH_MISSES, 4242);
  auto g = CounterGroup::open({"branch-misses"}, fake);
  REQUIRE(g);
  g->start();
  g->stop();
  fake.eintr_reads = 3;
  const int before = fake.reads;
  Measurement m = g->read();
  CHECK(fake.reads - before >= 4); // three EINTRs, then the group read (then task-clock)
  REQUIRE(m.events[0].value);
  CHECK(*m.events[0].value == 4242);
  CHECK(m.events[0].status == EventStatus::available);
}

TEST_CASE("multiplexing: time_running < time_enabled is scaled", "[perf][fault]") {
  FakeSyscalls fake;
  fake.set_value(PERF_TYPE_HARDWARE, PERF_COUNT_HW_BRANCH_MISSES, 1000);
  fake.time_enabled = 200;
  fake.time_running = 100;
  auto g = CounterGroup::open({"branch-misses"}, fake);
  REQUIRE(g);
  Measurement m = measure(*g, [] {});
  const EventReading& r = m.events[0];
  REQUIRE(r.value);
  CHECK(*r.value == 2000);
  CHECK(r.raw == 1000);
  CHECK(r.enabled_ns == 200);
  CHECK(r.running_ns == 100);
  CHECK(r.running_ratio == Approx(0.5));
  CHECK(r.multiplexed);
  auto j = to_json(m);
  CHECK(j["events"][0]["value"] == 2000);
  CHECK(j["events"][0]["multiplexed"] == true);
}

TEST_CASE("time_running = 0 is reported as not counted - not as zero", "[perf][fault]") {
  FakeSyscalls fake;
  fake.set_value(PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS, 0);
  fake.time_enabled = 5000;
  fake.time_running = 0;
  auto g = CounterGroup::open({"instructions"}, fake);
  REQUIRE(g);
  Measurement m = measure(*g, [] { spin(100); });
  CHECK_FALSE(m.events[0].value.has_value());
  CHECK(m.events[0].status == EventStatus::multiplexed_to_zero);
  CHECK(to_json(m)["events"][0]["value"].is_null());
  CHECK(to_json(m)["events"][0]["status"] == "multiplexed_to_zero");
  check_software_figures(m);
}

TEST_CASE("read failures and short reads leave software figures intact", "[perf][fault]") {
  FakeSyscalls fake;
  fake.set_value(PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES, 10);
  auto g = CounterGroup::open({"cycles"}, fake);
  REQUIRE(g);
  SECTION("EIO") {
    fake.read_errno = EIO;
    Measurement m = measure(*g, [] { spin(1000); });
    CHECK(m.events[0].status == EventStatus::other);
    CHECK(m.events[0].error == EIO);
    CHECK(m.events[0].reason.find("EIO") != std::string::npos);
    CHECK_FALSE(m.events[0].value);
    CHECK_FALSE(m.task_clock_ns);
    check_software_figures(m);
  }
  SECTION("short read") {
    fake.short_read = 16;
    Measurement m = measure(*g, [] { spin(1000); });
    CHECK(m.events[0].status == EventStatus::other);
    CHECK(m.events[0].reason.find("fewer than") != std::string::npos);
    CHECK(m.task_clock_reason.find("expected 24") != std::string::npos);
    check_software_figures(m);
  }
  SECTION("EINTR forever is not an endless loop") {
    fake.eintr_reads = 1 << 30;
    Measurement m = measure(*g, [] {});
    CHECK(m.events[0].status == EventStatus::other);
    CHECK(m.events[0].reason.find("EINTR") != std::string::npos);
  }
}

TEST_CASE("ioctl failures are reported - not thrown", "[perf][fault]") {
  FakeSyscalls fake;
  SECTION("enable") {
    fake.ioctl_errors[PERF_EVENT_IOC_ENABLE] = EBADF;
    auto g = CounterGroup::open({"cycles"}, fake);
    REQUIRE(g);
    Measurement m = measure(*g, [] { spin(1000); });
    CHECK(m.events[0].status == EventStatus::other);
    CHECK(m.events[0].reason.find("PERF_EVENT_IOC_ENABLE") != std::string::npos);
    CHECK_FALSE(m.task_clock_ns);
    check_software_figures(m);
  }
  SECTION("id") {
    fake.ioctl_errors[PERF_EVENT_IOC_ID] = ENOTTY;
    auto g = CounterGroup::open({"cycles", "instructions"}, fake);
    REQUIRE(g);
    CHECK(g->counting_events() == 0);
    CHECK(g->statuses()[1].reason.find("PERF_EVENT_IOC_ID") != std::string::npos);
    CHECK(fake.open_fds() == 1); // only task-clock survives
  }
}

TEST_CASE("measure() stops the group even when the measured call throws", "[perf][fault]") {
  FakeSyscalls fake;
  auto g = CounterGroup::open({"cycles"}, fake);
  REQUIRE(g);
  CHECK_THROWS(measure(*g, [] { throw std::runtime_error("boom"); }));
  CHECK(fake.count_ioctls(PERF_EVENT_IOC_DISABLE) >= 1);
  Measurement m = g->read();
  CHECK(m.events[0].status == EventStatus::available);
}

TEST_CASE("every fd and mapping is released", "[perf][fault]") {
  FakeSyscalls fake;
  fake.user_counters = true;
  {
    auto g = CounterGroup::open({"cycles", "instructions", "branch-misses"}, fake);
    REQUIRE(g);
    CHECK(fake.open_fds() == 4);
    CHECK(fake.mappings.size() == 3);
    CounterGroup moved = std::move(*g);
    measure(moved, [] {});
  }
  CHECK(fake.open_fds() == 0);
  CHECK(fake.mappings.empty());
  CHECK(fake.bad_closes == 0);
  CHECK(fake.bad_unmaps == 0);
}

namespace {

// A user page as the kernel publishes it for a live counter: times advance by
// (tsc - t0) with mult 1, shift 0.
void live_page(perf_event_mmap_page* pc, std::uint32_t index, std::int64_t offset, std::uint64_t t0,
               std::uint64_t enabled, std::uint64_t running) {
  pc->cap_user_rdpmc = 1;
  pc->cap_user_time = 1;
  pc->index = index;
  pc->offset = offset;
  pc->pmc_width = 48;
  pc->time_enabled = enabled;
  pc->time_running = running;
  pc->time_mult = 1;
  pc->time_shift = 0;
  pc->time_offset = static_cast<std::uint64_t>(-static_cast<std::int64_t>(t0));
}

} // namespace

TEST_CASE("rdpmc through the user page: seqlock - width - times", "[perf][fault][rdpmc]") {
  FakeSyscalls fake;
  fake.user_counters = true;
  auto g = CounterGroup::open({"cycles", "branch-misses"}, fake);
  REQUIRE(g);
  REQUIRE(fake.opened.size() == 3);
  const int fd_cycles = fake.opened[0].fd;
  const int fd_bm = fake.opened[1].fd;
  CHECK(g->read_method() == ReadMethod::read_syscall); // caps not set yet
  live_page(fake.page_for(fd_cycles), 1, 1000, 1'000'000, 0, 0);
  live_page(fake.page_for(fd_bm), 2, 0, 1'000'000, 0, 0);
  CHECK(g->read_method() == ReadMethod::rdpmc);

  // Counter 0 (cycles) and counter 1 (branch-misses) as the hardware holds
  // them: the branch-miss counter wraps past 2^48 and must be sign-extended.
  std::uint64_t cycles_hw = 5000;
  std::uint64_t bm_hw = (1ull << 48) - 10;
  bool bump_lock_once = true;
  fake.on_rdpmc = [&](std::uint32_t counter) -> std::uint64_t {
    if (counter == 0) {
      if (bump_lock_once) {
        // A concurrent update between reading lock and reading the counter:
        // the reader must retry.
        bump_lock_once = false;
        fake.page_for(fd_cycles)->lock += 1;
      }
      return cycles_hw;
    }
    return bm_hw;
  };
  g->start();
  const int rdpmc_after_start = fake.rdpmc_calls;
  CHECK(rdpmc_after_start == 3); // cycles twice (retry), branch-misses once
  cycles_hw += 123456;
  bm_hw += 30; // wraps to 20 in 48 bits
  const int reads_before = fake.reads;
  g->stop();
  Measurement m = g->read();
  CHECK(m.method == ReadMethod::rdpmc);
  CHECK(fake.reads - reads_before == 1); // task-clock only: the group used no read(2)
  REQUIRE(m.find("cycles")->value);
  CHECK(*m.find("cycles")->value == 123456);
  REQUIRE(m.find("branch-misses")->value);
  CHECK(*m.find("branch-misses")->value == 30);
  // Times come from the page and the TSC: enabled == running (not multiplexed).
  CHECK(m.find("cycles")->enabled_ns > 0);
  CHECK(m.find("cycles")->enabled_ns == m.find("cycles")->running_ns);
  CHECK_FALSE(m.find("cycles")->multiplexed);
}

TEST_CASE("rdpmc: a counter descheduled at the end is scaled from page times",
          "[perf][fault][rdpmc]") {
  FakeSyscalls fake;
  fake.user_counters = true;
  fake.tsc_step = 0; // freeze the TSC so times are exact
  auto g = CounterGroup::open({"cycles"}, fake);
  REQUIRE(g);
  const int fd = fake.opened[0].fd;
  auto* pc = fake.page_for(fd);
  live_page(pc, 1, 0, fake.tsc, 0, 0);
  fake.on_rdpmc = [](std::uint32_t) -> std::uint64_t { return 0; };
  g->start();
  // The kernel took the counter away half-way: index 0, full count in offset,
  // enabled 200 ns, running 100 ns as of now.
  pc->index = 0;
  pc->offset = 1000;
  pc->time_enabled = 200;
  pc->time_running = 100;
  pc->time_offset = static_cast<std::uint64_t>(-static_cast<std::int64_t>(fake.tsc));
  g->stop();
  Measurement m = g->read();
  CHECK(m.method == ReadMethod::rdpmc);
  REQUIRE(m.events[0].value);
  CHECK(*m.events[0].value == 2000);
  CHECK(m.events[0].multiplexed);
  CHECK(m.events[0].running_ratio == Approx(0.5));
}

TEST_CASE("rdpmc not allowed or not wanted: read(2)", "[perf][fault][rdpmc]") {
  FakeSyscalls fake;
  fake.user_counters = true;
  fake.set_value(PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES, 99);
  SECTION("cap_user_rdpmc = 0") {
    auto g = CounterGroup::open({"cycles"}, fake);
    REQUIRE(g);
    auto* pc = fake.page_for(fake.opened[0].fd);
    live_page(pc, 1, 0, 0, 0, 0);
    pc->cap_user_rdpmc = 0;
    Measurement m = measure(*g, [] {});
    CHECK(m.method == ReadMethod::read_syscall);
    CHECK(*m.events[0].value == 99);
    CHECK(fake.rdpmc_calls == 0);
  }
  SECTION("read_syscall_only") {
    auto g = CounterGroup::open({"cycles"}, fake, GroupOptions{ReadPreference::read_syscall_only});
    REQUIRE(g);
    CHECK(fake.mappings.empty());
    Measurement m = measure(*g, [] {});
    CHECK(m.method == ReadMethod::read_syscall);
  }
  SECTION("mmap fails") {
    fake.mmap_errno = ENOMEM;
    auto g = CounterGroup::open({"cycles"}, fake);
    REQUIRE(g);
    Measurement m = measure(*g, [] {});
    CHECK(m.method == ReadMethod::read_syscall);
    CHECK(*m.events[0].value == 99);
  }
}

TEST_CASE("task-clock windows start where the last one ended, without a reset each",
          "[perf][fault]") {
  FakeSyscalls fake;
  fake.fail_pmu_events(ENOENT);
  auto g = CounterGroup::open({"instructions"}, fake);
  REQUIRE(g);
  REQUIRE(g->task_clock_available());
  const int tc = fake.opened.back().fd;
  auto resets = [&] {
    int n = 0;
    for (const auto& c : fake.ioctls)
      if (c.request == PERF_EVENT_IOC_RESET && c.fd == tc) ++n;
    return n;
  };
  auto set_clock = [&](std::uint64_t count, std::uint64_t enabled) {
    fake.set_value(PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK, count);
    fake.time_enabled = fake.time_running = enabled;
  };
  // One measured window with the clock at (count, enabled) when it is read.
  auto window = [&](std::uint64_t count, std::uint64_t enabled) {
    set_clock(count, enabled);
    Measurement m = measure(*g, [] { spin(1000); });
    REQUIRE(m.task_clock_ns);
    return *m.task_clock_ns;
  };
  // The first window has nothing to start from: reset.
  CHECK(window(5000, 6000) == 5000);
  CHECK(resets() == 1);
  // Later windows subtract the reading taken after the last stop.
  CHECK(window(5700, 6900) == 700);
  CHECK(window(6000, 7300) == 300);
  CHECK(resets() == 1);
  // A window stopped but never read leaves no start for the next: reset again.
  g->start();
  g->stop();
  CHECK(window(250, 400) == 250);
  CHECK(resets() == 2);
  // A read while running is not a start either: the window goes on counting.
  g->start();
  set_clock(400, 600);
  Measurement mid = g->read();
  REQUIRE(mid.task_clock_ns);
  CHECK(*mid.task_clock_ns == 150);
  g->stop();
  set_clock(450, 650);
  Measurement end = g->read();
  REQUIRE(end.task_clock_ns);
  CHECK(*end.task_clock_ns == 200);
  CHECK(resets() == 2);
}
