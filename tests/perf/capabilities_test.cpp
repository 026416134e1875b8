#include "fdo/perf/capabilities.h"
#include "perf_fixtures.h"

#include <catch2/catch.hpp>
#include <fstream>
#include <iostream>

using namespace fdo;
using namespace fdo::perf;
using namespace fdo::perf::testing;

TEST_CASE("the real probe says what this host can measure", "[perf][capabilities][real]") {
  Capabilities caps = probe();
  std::cout << "probe: " << caps.summary << "\n";
  const HostContext host = host_context(Syscalls::real());
  int paranoid = 99;
  std::ifstream("/proc/sys/kernel/perf_event_paranoid") >> paranoid;
  REQUIRE(caps.perf_event_paranoid);
  CHECK(*caps.perf_event_paranoid == paranoid);

  for (const auto& name : default_hardware_events()) {
    const EventCapability* e = caps.find(name);
    REQUIRE(e);
    INFO(name << ": " << e->detail);
    CHECK(e->kind == EventKind::hardware);
    if (!host.core_pmu) {
      // This development machine: no PMU.
      CHECK_FALSE(e->available);
      CHECK(e->status == EventStatus::no_pmu);
      CHECK(e->error == ENOENT);
      CHECK(e->detail.find("no PMU") != std::string::npos);
    } else if (!e->available) {
      CHECK(e->status != EventStatus::available);
      CHECK_FALSE(e->detail.empty());
    }
  }
  if (!host.core_pmu) {
    CHECK_FALSE(caps.hardware_counters_usable);
    CHECK_FALSE(caps.rdpmc_usable);
    CHECK_FALSE(caps.sampling_usable);
    CHECK_FALSE(caps.branch_stack_usable);
    CHECK(caps.rdpmc_detail.find("no_pmu") != std::string::npos);
    CHECK(caps.summary.find("hardware counters: none (no_pmu, ENOENT)") != std::string::npos);
  }
  // The software figures.
  const EventCapability* tc = caps.find("task-clock");
  REQUIRE(tc);
  CHECK(tc->kind == EventKind::software);
  CHECK(tc->available);
  CHECK(caps.find("thread-cpu-time")->available);
  CHECK(caps.find("wall-clock")->available);
  CHECK(caps.summary.find("task-clock, thread-cpu-time, wall-clock") != std::string::npos);

  auto j = to_json(caps);
  CHECK(j["events"].size() == caps.events.size());
  CHECK(j["perf_event_paranoid"] == paranoid);
  CHECK(j.contains("rdpmc_usable"));
  CHECK(j.contains("branch_stack_usable"));
  CHECK(j["summary"] == caps.summary);
}

TEST_CASE("probe with everything denied at paranoid 3", "[perf][capabilities]") {
  FakeSyscalls fake;
  fake.paranoid = 3;
  fake.fail_all(EACCES);
  Capabilities caps = probe({"RETIRED_INSTRUCTIONS_NOT_REAL"}, fake);
  for (const auto& name : default_hardware_events()) {
    const EventCapability* e = caps.find(name);
    REQUIRE(e);
    CHECK(e->status == EventStatus::not_permitted);
    CHECK(e->error == EACCES);
    CHECK(e->detail.find("CAP_PERFMON") != std::string::npos);
    CHECK(e->detail.find("perf_event_paranoid=3") != std::string::npos);
  }
  const EventCapability* extra = caps.find("RETIRED_INSTRUCTIONS_NOT_REAL");
  REQUIRE(extra);
  CHECK((extra->status == EventStatus::unknown_event || extra->status == EventStatus::no_pmu));
  CHECK(caps.find("task-clock")->status == EventStatus::not_permitted);
  CHECK_FALSE(caps.software_sampling_usable);
  // The clocks never fail.
  CHECK(caps.find("thread-cpu-time")->available);
  CHECK(caps.find("wall-clock")->available);
  CHECK(caps.summary.find("not_permitted") != std::string::npos);
  CHECK(caps.summary.find("software: thread-cpu-time, wall-clock") != std::string::npos);
  CHECK(caps.paranoid_detail.find("forbidden") != std::string::npos);
}

TEST_CASE("probe on a host with a PMU - rdpmc - and no branch stack", "[perf][capabilities]") {
  FakeSyscalls fake;
  fake.user_counters = true;
  fake.page_template.cap_user_rdpmc = 1;
  fake.page_template.cap_user_time = 1;
  fake.fail_branch_stack(EOPNOTSUPP);
  fake.fail_event(PERF_TYPE_HW_CACHE, 0x10004, ENOENT); // iTLB: not on this CPU
  Capabilities caps = probe(fake);
  CHECK(caps.hardware_counters_usable);
  CHECK(caps.find("instructions")->available);
  CHECK_FALSE(caps.find("iTLB-load-misses")->available);
  CHECK(caps.find("iTLB-load-misses")->status == EventStatus::no_pmu);
  CHECK(caps.rdpmc_usable);
  CHECK(caps.sampling_usable);
  CHECK_FALSE(caps.branch_stack_usable);
  CHECK(caps.branch_stack_detail.find("EOPNOTSUPP") != std::string::npos);
  CHECK(caps.software_sampling_usable);
  CHECK(caps.summary.find("hardware counters: 5/6") != std::string::npos);
  CHECK(caps.summary.find("rdpmc: yes") != std::string::npos);
  // Every probe fd and mapping was released.
  CHECK(fake.open_fds() == 0);
  CHECK(fake.mappings.empty());

  FakeSyscalls no_rdpmc;
  no_rdpmc.user_counters = true;
  Capabilities c2 = probe(no_rdpmc);
  CHECK_FALSE(c2.rdpmc_usable);
  CHECK(c2.rdpmc_detail.find("cap_user_rdpmc = 0") != std::string::npos);
  CHECK(c2.branch_stack_usable);
}
