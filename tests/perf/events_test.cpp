#include "fdo/perf/events.h"
#include "support/skip.h"

#include <catch2/catch.hpp>
#include <cerrno>
#include <iostream>
#include <linux/perf_event.h>

using namespace fdo;
using namespace fdo::perf;

TEST_CASE("generic events map to the kernel's generic encodings", "[perf][events]") {
  auto ev = resolve_events(default_hardware_events());
  REQUIRE(ev);
  REQUIRE(ev->size() == 6);
  CHECK((*ev)[0].name == "instructions");
  CHECK((*ev)[0].type == PERF_TYPE_HARDWARE);
  CHECK((*ev)[0].config == PERF_COUNT_HW_INSTRUCTIONS);
  CHECK((*ev)[1].config == PERF_COUNT_HW_CPU_CYCLES);
  CHECK((*ev)[2].config == PERF_COUNT_HW_BRANCH_INSTRUCTIONS);
  CHECK((*ev)[3].config == PERF_COUNT_HW_BRANCH_MISSES);
  CHECK((*ev)[4].type == PERF_TYPE_HW_CACHE);
  CHECK((*ev)[4].config == (PERF_COUNT_HW_CACHE_L1I | (PERF_COUNT_HW_CACHE_OP_READ << 8) |
                            (PERF_COUNT_HW_CACHE_RESULT_MISS << 16)));
  CHECK((*ev)[5].config == (PERF_COUNT_HW_CACHE_ITLB | (PERF_COUNT_HW_CACHE_OP_READ << 8) |
                            (PERF_COUNT_HW_CACHE_RESULT_MISS << 16)));
  for (const auto& e : *ev) {
    CHECK(e.needs_pmu());
    CHECK(e.encoding == "generic");
  }
  auto tc = resolve_event("task-clock");
  REQUIRE(tc);
  CHECK(tc->type == PERF_TYPE_SOFTWARE);
  CHECK(tc->config == PERF_COUNT_SW_TASK_CLOCK);
  CHECK_FALSE(tc->needs_pmu());
}

TEST_CASE("other names are encoded by libpfm4", "[perf][events]") {
  auto bm = resolve_event("perf::branch-misses");
  REQUIRE(bm);
  CHECK(bm->source == EventSource::libpfm);
  CHECK(bm->type == PERF_TYPE_HARDWARE);
  CHECK(bm->config == PERF_COUNT_HW_BRANCH_MISSES);
  CHECK(bm->encoding.find("PERF_COUNT_HW_BRANCH_MISSES") != std::string::npos);
  // libpfm4 encodes user level only (PLM3): the canonical string says k=0.
  CHECK(bm->encoding.find(":k=0") != std::string::npos);

  auto sw = resolve_event("perf::cpu-clock");
  REQUIRE(sw);
  CHECK(sw->type == PERF_TYPE_SOFTWARE);
  CHECK(sw->config == PERF_COUNT_SW_CPU_CLOCK);
}

TEST_CASE("raw PMU event names resolve where libpfm4 knows the CPU", "[perf][events]") {
  auto pmus = libpfm_active_pmus();
  std::vector<std::string> hw;
  for (const auto& p : pmus)
    if (p != "perf" && p != "perf_raw") hw.push_back(p);
  if (hw.empty()) {
    FDO_SKIP("skipped: libpfm4 has no active hardware PMU model on this host");
  }
  // One retired-instructions event per vendor family libpfm4 ships tables for.
  const char* candidates[] = {"INST_RETIRED:ANY_P", "RETIRED_INSTRUCTIONS", "INST_RETIRED",
                              "INST_RETIRED:ANY"};
  bool any = false;
  for (const char* name : candidates) {
    auto ev = resolve_event(name);
    if (!ev) {
      CHECK(ev.error().message().find(name) != std::string::npos);
      continue;
    }
    any = true;
    CHECK(ev->needs_pmu());
    CHECK((ev->type == PERF_TYPE_RAW || ev->type >= PERF_TYPE_MAX));
    std::cout << "raw event " << name << " -> " << ev->encoding << "\n";
  }
  if (!any) WARN("no candidate raw name is known for PMU " + hw.front());
}

TEST_CASE("unknown and malformed names are clear errors naming the event", "[perf][events]") {
  auto e = resolve_event("no_such_event_xyz");
  REQUIRE_FALSE(e);
  CHECK((e.error().code() == Errc::not_found || e.error().code() == Errc::unsupported));
  CHECK(e.error().message().find("no_such_event_xyz") != std::string::npos);

  auto all = resolve_events({"instructions", "bogus::thing", "cycles"});
  REQUIRE_FALSE(all);
  CHECK(all.error().message().find("bogus::thing") != std::string::npos);

  auto empty = resolve_event("");
  REQUIRE_FALSE(empty);
  CHECK(empty.error().code() == Errc::invalid_argument);
  auto space = resolve_event("branch misses");
  REQUIRE_FALSE(space);
  CHECK(space.error().code() == Errc::invalid_argument);
  CHECK(space.error().message().find("branch misses") != std::string::npos);
  auto status = classify_resolve_error("no_such_event_xyz", e.error());
  CHECK((status.status == EventStatus::unknown_event || status.status == EventStatus::no_pmu));
}

TEST_CASE("perf_event_open errnos map to statuses with actionable reasons", "[perf][events]") {
  HostContext no_pmu{2, false};
  auto f = classify_open_error("instructions", ENOENT, no_pmu);
  CHECK(f.status == EventStatus::no_pmu);
  CHECK(f.error == ENOENT);
  CHECK(f.reason.find("ENOENT") != std::string::npos);
  CHECK(f.reason.find("no PMU") != std::string::npos);
  CHECK(f.reason.find("instructions") != std::string::npos);

  HostContext pmu{2, true};
  CHECK(classify_open_error("x", ENOENT, pmu).reason.find("has no such event") !=
        std::string::npos);

  HostContext locked{3, true};
  auto acc = classify_open_error("cycles", EACCES, locked);
  CHECK(acc.status == EventStatus::not_permitted);
  CHECK(acc.reason.find("perf_event_paranoid=3") != std::string::npos);
  CHECK(acc.reason.find("CAP_PERFMON") != std::string::npos);
  auto perm = classify_open_error("cycles", EPERM, pmu);
  CHECK(perm.status == EventStatus::not_permitted);
  CHECK(perm.reason.find("perf_event_paranoid=2") != std::string::npos);
  CHECK(perm.reason.find("seccomp") != std::string::npos);
  CHECK(classify_open_error("x", EACCES, HostContext{}).reason.find("could not be read") !=
        std::string::npos);

  CHECK(classify_open_error("x", EOPNOTSUPP, pmu).status == EventStatus::not_supported);
  CHECK(classify_open_error("x", EINVAL, pmu).status == EventStatus::not_supported);
  CHECK(classify_open_error("x", EBUSY, pmu).status == EventStatus::other);
  auto other = classify_open_error("x", EIO, pmu);
  CHECK(other.status == EventStatus::other);
  CHECK(other.reason.find("EIO") != std::string::npos);
}

TEST_CASE("paranoid levels are described", "[perf][events]") {
  CHECK(describe_paranoid(std::nullopt).find("could not be read") != std::string::npos);
  CHECK(describe_paranoid(-1).find("no restrictions") != std::string::npos);
  CHECK(describe_paranoid(2).find("user level") != std::string::npos);
  CHECK(describe_paranoid(4).find("forbidden") != std::string::npos);
  CHECK(is_core_pmu_name("cpu"));
  CHECK(is_core_pmu_name("cpu_core"));
  CHECK(is_core_pmu_name("armv8_pmuv3_0"));
  CHECK_FALSE(is_core_pmu_name("software"));
  CHECK_FALSE(is_core_pmu_name("tracepoint"));
  CHECK(to_string(EventStatus::multiplexed_to_zero) == "multiplexed_to_zero");
}
