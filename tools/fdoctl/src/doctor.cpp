#include "fdo/ctl/doctor.h"

#include "fdo/ctl/table.h"
#include "fdo/util/enum_names.h"
#include "fdo/util/strings.h"

#include <algorithm>
#include <map>

namespace fdo::ctl {

using nlohmann::json;

namespace {
constexpr EnumNames<Severity, 3> kSeverityNames{{{
    {Severity::ok, "ok"},
    {Severity::note, "note"},
    {Severity::problem, "problem"},
}}};
} // namespace

std::string_view to_string(Severity s) {
  return kSeverityNames.name(s);
}

namespace {

std::string str(const json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : "";
}

bool flag(const json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_boolean() && j[key].get<bool>();
}

std::vector<json> events_of_kind(const json& perf, std::string_view kind) {
  std::vector<json> out;
  if (perf.contains("events") && perf["events"].is_array())
    for (const json& e : perf["events"])
      if (str(e, "kind") == kind) out.push_back(e);
  return out;
}

bool has_pmu_named(const json& perf, std::string_view name) {
  if (!perf.contains("kernel_pmus") || !perf["kernel_pmus"].is_array()) return false;
  for (const json& p : perf["kernel_pmus"])
    if (p.is_string() && p.get<std::string>() == name) return true;
  return false;
}

const char* kVirtualPmuAdvice =
    "give the VM a virtual PMU: KVM/libvirt <cpu mode='host-passthrough'/> (QEMU -cpu host; "
    "do not pass pmu=off), VMware \"Virtualize CPU performance counters\", Hyper-V "
    "Set-VMProcessor -Perfmon, or on a cloud an instance type that exposes the PMU (e.g. bare "
    "metal). Until then fdo optimises from instrumentation counts and software clocks; the "
    "branch-miss and i-cache decisions (!unpredictable, size mode) stay off";

std::string paranoid_advice(const json& perf) {
  std::string a = "run `sudo sysctl kernel.perf_event_paranoid=1` (persist it in "
                  "/etc/sysctl.d/99-fdo.conf; any value <= 2 lets fdod count its own workers at "
                  "user level), or grant fdod CAP_PERFMON: `systemctl edit fdod` and add "
                  "[Service] AmbientCapabilities=CAP_PERFMON";
  if (!flag(perf, "privileged"))
    a += " (fdoctl doctor reports the capabilities of the process that probed)";
  return a;
}

} // namespace

std::vector<Finding> diagnose(const json& perf) {
  std::vector<Finding> out;
  std::vector<json> hw = events_of_kind(perf, "hardware");
  std::vector<json> sw = events_of_kind(perf, "software");
  std::optional<int> paranoid;
  if (perf.contains("perf_event_paranoid") && perf["perf_event_paranoid"].is_number_integer())
    paranoid = perf["perf_event_paranoid"].get<int>();
  bool privileged = flag(perf, "privileged");

  std::vector<std::string> ok_names;
  std::map<std::string, std::vector<const json*>> failed; // by status
  for (const json& e : hw) {
    if (flag(e, "available"))
      ok_names.push_back(str(e, "name"));
    else
      failed[str(e, "status")].push_back(&e);
  }
  auto names_of = [](const std::vector<const json*>& v) {
    std::string s;
    for (const json* e : v)
      s += (s.empty() ? "" : ", ") + str(*e, "name");
    return s;
  };

  if (hw.empty()) {
    out.push_back({Severity::note, "hardware counters", "no hardware event was probed", ""});
  } else if (ok_names.empty()) {
    if (failed.contains("no_pmu")) {
      bool core_pmu = has_pmu_named(perf, "cpu") || has_pmu_named(perf, "cpu_core") ||
                      has_pmu_named(perf, "armv8_pmuv3") || has_pmu_named(perf, "cpum_cf");
      if (!core_pmu)
        out.push_back({Severity::problem, "hardware counters",
                       "none: perf_event_open fails with ENOENT (no_pmu) and the kernel lists no "
                       "CPU PMU: this looks like a VM without a virtual PMU",
                       kVirtualPmuAdvice});
      else
        out.push_back({Severity::problem, "hardware counters",
                       "none: the CPU PMU has none of the requested events (" +
                           names_of(failed["no_pmu"]) + ")",
                       "set perf_events in fdod's config to events this CPU has (`perf list`)"});
    } else if (failed.contains("not_permitted")) {
      if (paranoid && *paranoid >= 3 && !privileged)
        out.push_back({Severity::problem, "hardware counters",
                       "none: perf_event_open is not permitted (perf_event_paranoid=" +
                           std::to_string(*paranoid) + ")",
                       paranoid_advice(perf)});
      else
        out.push_back(
            {Severity::problem, "hardware counters",
             "none: perf_event_open is not permitted although perf_event_paranoid=" +
                 (paranoid ? std::to_string(*paranoid) : std::string("?")) +
                 " allows user-level counting: a seccomp filter or an LSM blocks it",
             "in a container allow perf_event_open (docker/podman: --cap-add PERFMON and a "
             "seccomp profile that permits perf_event_open); or grant fdod CAP_PERFMON"});
    } else {
      std::string what;
      for (const auto& [status, list] : failed)
        what += (what.empty() ? "" : "; ") + status + ": " + names_of(list);
      std::string detail = failed.empty() ? "" : str(*failed.begin()->second.front(), "detail");
      out.push_back({Severity::problem, "hardware counters", "none (" + what + "): " + detail,
                     "check perf_events in fdod's config and `fdoctl doctor --json` for each "
                     "event's errno"});
    }
  } else {
    std::string list;
    for (const auto& n : ok_names)
      list += (list.empty() ? "" : ", ") + n;
    out.push_back({Severity::ok, "hardware counters",
                   std::to_string(ok_names.size()) + "/" + std::to_string(hw.size()) +
                       " events count: " + list,
                   ""});
    for (const auto& [status, list] : failed)
      for (const json* e : list)
        out.push_back({Severity::note, "event " + str(*e, "name"),
                       status + ": " + str(*e, "detail"),
                       status == "unknown_event" || status == "not_supported" || status == "no_pmu"
                           ? "this CPU cannot count it; drop it from perf_events or ignore"
                           : ""});
  }

  // perf_event_paranoid, whatever the counters did.
  std::string pdetail = str(perf, "paranoid_detail");
  if (!paranoid) {
    out.push_back({Severity::note, "perf_event_paranoid",
                   pdetail.empty() ? "could not be read" : pdetail, ""});
  } else if (*paranoid >= 3 && !privileged) {
    bool already = !out.empty() && out.front().severity == Severity::problem &&
                   out.front().advice == paranoid_advice(perf);
    out.push_back({already ? Severity::note : Severity::problem, "perf_event_paranoid", pdetail,
                   already ? "" : paranoid_advice(perf)});
  } else {
    out.push_back({Severity::ok, "perf_event_paranoid", pdetail, ""});
  }
  if (privileged)
    out.push_back({Severity::ok, "privileges", "CAP_PERFMON or CAP_SYS_ADMIN is effective", ""});

  if (!ok_names.empty()) {
    if (!flag(perf, "rdpmc_usable"))
      out.push_back({Severity::note, "rdpmc", str(perf, "rdpmc_detail"),
                     "optional (cheaper counter reads): `echo 1 | sudo tee "
                     "/sys/bus/event_source/devices/cpu/rdpmc`"});
    else
      out.push_back({Severity::ok, "rdpmc", str(perf, "rdpmc_detail"), ""});
    out.push_back({flag(perf, "sampling_usable") ? Severity::ok : Severity::note,
                   "hardware sampling", str(perf, "sampling_detail"), ""});
    out.push_back({flag(perf, "branch_stack_usable") ? Severity::ok : Severity::note,
                   "branch stack", str(perf, "branch_stack_detail"), ""});
  }
  out.push_back({flag(perf, "software_sampling_usable") ? Severity::ok : Severity::note,
                 "software sampling", str(perf, "software_sampling_detail"), ""});

  std::vector<std::string> sw_ok, sw_bad;
  for (const json& e : sw)
    (flag(e, "available") ? sw_ok : sw_bad).push_back(str(e, "name"));
  if (!sw_ok.empty())
    out.push_back({Severity::ok, "software clocks",
                   join(sw_ok) + " (stage times are measured whatever the PMU)", ""});
  if (!sw_bad.empty())
    out.push_back({Severity::note, "software clocks", "unavailable: " + join(sw_bad), ""});

  std::stable_sort(out.begin(), out.end(), [](const Finding& a, const Finding& b) {
    return static_cast<int>(a.severity) > static_cast<int>(b.severity);
  });
  return out;
}

Finding diagnose_gpu(const json& gpu, HostGpuNodes host) {
  if (flag(gpu, "available")) {
    std::string what = "NVPTX programs run on " + str(gpu, "arch");
    const json& list = gpu.value("gpus", json::array());
    if (list.is_array() && !list.empty())
      what = "NVPTX programs run on GPU 0, " + str(list[0], "name") + " (" + str(gpu, "arch") +
             ", driver " + std::to_string(gpu.value("driver_version", 0)) + ")" +
             (list.size() > 1 ? "; " + std::to_string(list.size() - 1) + " more not used" : "");
    return {Severity::ok, "gpu", what, ""};
  }
  const std::string reason = str(gpu, "reason");
  std::string advice;
  if (reason.find("no NVIDIA device node") != std::string::npos)
    advice = host == HostGpuNodes::present
                 ? "this host has /dev/nvidia* but fdod does not see them: its unit's "
                   "PrivateDevices=yes hides them; install the GPU drop-in "
                   "(/usr/share/doc/fdo/examples/fdod-gpu.conf as "
                   "/etc/systemd/system/fdod.service.d/gpu.conf, docs/gpu.md)"
                 : "";
  else if (reason == "gpu = off")
    advice = "set gpu = auto (or on) in fdod's config to run NVPTX programs";
  else if (reason.find("cannot load") != std::string::npos)
    advice = "install the NVIDIA driver, or point gpu_driver at its libcuda.so.1";
  else
    advice = "see docs/gpu.md; under systemd install the GPU drop-in (fdod-gpu.conf: "
             "PrivateDevices=no, DeviceAllow for the NVIDIA devices)";
  return {advice.empty() ? Severity::note : Severity::problem, "gpu", "no GPU programs: " + reason,
          advice};
}

json to_json(const std::vector<Finding>& findings) {
  json out = json::array();
  for (const auto& f : findings)
    out.push_back({{"severity", std::string(to_string(f.severity))},
                   {"topic", f.topic},
                   {"what", f.what},
                   {"advice", f.advice}});
  return out;
}

std::string render_doctor(const json& perf, const std::vector<Finding>& findings) {
  std::string out;
  if (!str(perf, "summary").empty()) out += "perf: " + str(perf, "summary") + "\n\n";
  Table t({{"event"}, {"kind"}, {"status"}, {"detail"}});
  if (perf.contains("events") && perf["events"].is_array())
    for (const json& e : perf["events"])
      t.add_row({str(e, "name"), str(e, "kind"), str(e, "status"), str(e, "detail")});
  if (t.rows() > 0) out += t.render() + "\n";
  for (const auto& f : findings) {
    out += '[';
    out += to_string(f.severity);
    out += "] " + f.topic + ": " + f.what + "\n";
    if (!f.advice.empty()) out += "    fix: " + f.advice + "\n";
  }
  return out;
}

} // namespace fdo::ctl
