#include "fdo/ctl/doctor.h"

#include <catch2/catch.hpp>

using namespace fdo::ctl;
using nlohmann::json;

namespace {

json event(const std::string& name, const std::string& kind, bool available,
           const std::string& status, int err, const std::string& detail) {
  return {{"name", name},     {"kind", kind}, {"available", available},
          {"status", status}, {"errno", err}, {"errno_name", err ? "ENOENT" : ""},
          {"detail", detail}};
}

json software_events() {
  return json::array({event("task-clock", "software", true, "available", 0, "ok"),
                      event("thread-cpu-time", "software", true, "available", 0, "ok"),
                      event("wall-clock", "software", true, "available", 0, "ok")});
}

// The shape perf::to_json(perf::probe()) writes, as on a VM without a PMU.
json vm_without_pmu() {
  json events = json::array({event("instructions", "hardware", false, "no_pmu", 2,
                                   "'instructions': no PMU: the kernel exposes no CPU PMU"),
                             event("branch-misses", "hardware", false, "no_pmu", 2, "no PMU")});
  for (const auto& e : software_events())
    events.push_back(e);
  return {{"events", events},
          {"perf_event_paranoid", 2},
          {"paranoid_detail", "perf_event_paranoid=2: user level"},
          {"privileged", false},
          {"hardware_counters_usable", false},
          {"rdpmc_usable", false},
          {"rdpmc_detail", "no hardware counter"},
          {"sampling_usable", false},
          {"sampling_detail", "no hardware counter"},
          {"branch_stack_usable", false},
          {"branch_stack_detail", "no hardware counter"},
          {"software_sampling_usable", true},
          {"software_sampling_detail", "cpu-clock sampling works"},
          {"kernel_pmus", {"software", "tracepoint"}},
          {"libpfm_pmus", {"perf"}},
          {"summary", "hardware counters: none (no_pmu, ENOENT)"}};
}

const Finding* topic(const std::vector<Finding>& f, const std::string& t) {
  for (const auto& x : f)
    if (x.topic == t) return &x;
  return nullptr;
}

} // namespace

TEST_CASE("a VM without a virtual PMU is named and the fix is given") {
  auto findings = diagnose(vm_without_pmu());
  REQUIRE_FALSE(findings.empty());
  const Finding& first = findings.front();
  CHECK(first.severity == Severity::problem);
  CHECK(first.topic == "hardware counters");
  CHECK_THAT(first.what, Catch::Contains("VM without a virtual PMU"));
  CHECK_THAT(first.advice, Catch::Contains("host-passthrough"));
  const Finding* paranoid = topic(findings, "perf_event_paranoid");
  REQUIRE(paranoid);
  CHECK(paranoid->severity == Severity::ok); // 2 allows user-level counting
  const Finding* sw = topic(findings, "software clocks");
  REQUIRE(sw);
  CHECK(sw->severity == Severity::ok);
  CHECK(topic(findings, "rdpmc") == nullptr); // moot without counters

  std::string text = render_doctor(vm_without_pmu(), findings);
  CHECK_THAT(text, Catch::Contains("perf: hardware counters: none"));
  CHECK_THAT(text, Catch::Contains("[problem] hardware counters"));
  CHECK_THAT(text, Catch::Contains("fix: give the VM a virtual PMU"));
  CHECK_THAT(text, Catch::Contains("branch-misses"));
}

TEST_CASE("a restrictive paranoid level gets the sysctl and CAP_PERFMON advice") {
  json perf = vm_without_pmu();
  for (auto& e : perf["events"])
    if (e["kind"] == "hardware") {
      e["status"] = "not_permitted";
      e["errno"] = 13;
    }
  perf["perf_event_paranoid"] = 3;
  perf["kernel_pmus"] = {"cpu", "software"};
  auto findings = diagnose(perf);
  CHECK(findings.front().severity == Severity::problem);
  CHECK_THAT(findings.front().advice, Catch::Contains("sysctl kernel.perf_event_paranoid=1"));
  CHECK_THAT(findings.front().advice, Catch::Contains("CAP_PERFMON"));
  // The paranoid finding does not repeat the same fix as a second problem.
  const Finding* paranoid = topic(findings, "perf_event_paranoid");
  REQUIRE(paranoid);
  CHECK(paranoid->severity == Severity::note);
}

TEST_CASE("denied although paranoid allows it points at seccomp") {
  json perf = vm_without_pmu();
  for (auto& e : perf["events"])
    if (e["kind"] == "hardware") e["status"] = "not_permitted";
  perf["kernel_pmus"] = {"cpu"};
  auto findings = diagnose(perf);
  CHECK_THAT(findings.front().what, Catch::Contains("seccomp"));
}

TEST_CASE("a host with a PMU reports what counts and what is optional") {
  json perf = vm_without_pmu();
  for (auto& e : perf["events"])
    if (e["kind"] == "hardware") {
      e["available"] = true;
      e["status"] = "available";
    }
  perf["events"].push_back(
      event("iTLB-load-misses", "hardware", false, "not_supported", 22, "rejected"));
  perf["hardware_counters_usable"] = true;
  perf["kernel_pmus"] = {"cpu"};
  perf["rdpmc_usable"] = false;
  auto findings = diagnose(perf);
  const Finding* hw = topic(findings, "hardware counters");
  REQUIRE(hw);
  CHECK(hw->severity == Severity::ok);
  CHECK_THAT(hw->what, Catch::Contains("2/3 events count: instructions, branch-misses"));
  const Finding* itlb = topic(findings, "event iTLB-load-misses");
  REQUIRE(itlb);
  CHECK(itlb->severity == Severity::note);
  const Finding* rdpmc = topic(findings, "rdpmc");
  REQUIRE(rdpmc);
  CHECK_THAT(rdpmc->advice, Catch::Contains("/sys/bus/event_source/devices/cpu/rdpmc"));
  // No problem findings at all: problems sort first, so the first is not one.
  CHECK(findings.front().severity != Severity::problem);

  json j = to_json(findings);
  REQUIRE(j.is_array());
  CHECK(j[0].contains("severity"));
  CHECK(j[0].contains("advice"));
}

TEST_CASE("doctor: the GPU finding says what fdod runs GPU programs on, or why not",
          "[doctor][gpu]") {
  const nlohmann::json h200 = {{"available", true},
                               {"arch", "sm_90"},
                               {"driver_version", 13000},
                               {"gpus", {{{"name", "NVIDIA H200"}, {"arch", "sm_90"}}}}};
  Finding f = diagnose_gpu(h200);
  CHECK(f.severity == Severity::ok);
  CHECK(f.what == "NVPTX programs run on GPU 0, NVIDIA H200 (sm_90, driver 13000)");

  Finding cpu_only =
      diagnose_gpu({{"available", false},
                    {"gpus", nlohmann::json::array()},
                    {"reason", "no NVIDIA device node (/dev/nvidia*) on this host"}});
  CHECK(cpu_only.severity == Severity::note);
  CHECK(cpu_only.advice.empty());
  // The host has the nodes but fdod does not see them: its unit hides them.
  Finding hidden = diagnose_gpu({{"available", false},
                                 {"gpus", nlohmann::json::array()},
                                 {"reason", "no NVIDIA device node (/dev/nvidia*) on this host"}},
                                HostGpuNodes::present);
  CHECK(hidden.severity == Severity::problem);
  CHECK_THAT(hidden.advice, Catch::Contains("fdod-gpu.conf"));
  CHECK_THAT(hidden.advice, Catch::Contains("PrivateDevices=yes"));

  Finding off = diagnose_gpu(
      {{"available", false}, {"gpus", nlohmann::json::array()}, {"reason", "gpu = off"}});
  CHECK(off.severity == Severity::problem);
  CHECK_THAT(off.advice, Catch::Contains("gpu = auto"));

  Finding no_lib = diagnose_gpu({{"available", false},
                                 {"gpus", nlohmann::json::array()},
                                 {"reason", "no NVIDIA driver: cannot load libcuda.so.1: ..."}});
  CHECK_THAT(no_lib.advice, Catch::Contains("gpu_driver"));
  Finding sandboxed =
      diagnose_gpu({{"available", false},
                    {"gpus", nlohmann::json::array()},
                    {"reason", "the GPU probe failed: cuInit: CUDA_ERROR_OPERATING_SYSTEM (304)"}});
  CHECK(sandboxed.severity == Severity::problem);
  CHECK_THAT(sandboxed.advice, Catch::Contains("DeviceAllow"));
}
