#include "fdo/perf/capabilities.h"

#include "fdo/util/fd.h"
#include "fdo/util/strings.h"
#include "handles.h"

#include <cerrno>
#include <cstring>
#include <ctime>
#include <set>
#include <sstream>
#include <sys/mman.h>

namespace fdo::perf {

const EventCapability* Capabilities::find(std::string_view name) const {
  for (const auto& e : events)
    if (e.name == name) return &e;
  return nullptr;
}

bool effective_perf_privilege() {
  auto status = read_file("/proc/self/status", 1 << 20);
  if (!status) return false;
  std::istringstream in(*status);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.starts_with("CapEff:")) continue;
    unsigned long long caps = std::strtoull(line.c_str() + 7, nullptr, 16);
    return (caps & (1ull << 38)) != 0 || (caps & (1ull << 21)) != 0;
  }
  return false;
}

namespace {

struct Prober {
  Syscalls& sys;
  HostContext host;

  // Opens `attr` alone and closes it again; returns the errno (0 = opened).
  int try_open(const perf_event_attr& attr, detail::EventFd* keep = nullptr) {
    SysResult r = sys.perf_event_open(attr, 0, -1, -1, 0);
    if (!r.ok()) return r.error;
    detail::EventFd fd(sys, static_cast<int>(r.value));
    if (keep != nullptr) *keep = std::move(fd);
    return 0;
  }

  EventCapability probe_event(const std::string& name, EventKind default_kind,
                              std::optional<ResolvedEvent>& resolved_out) {
    EventCapability cap;
    cap.name = name;
    cap.kind = default_kind;
    auto ev = resolve_event(name);
    if (!ev) {
      OpenFailure f = classify_resolve_error(name, ev.error());
      cap.status = f.status;
      cap.detail = f.reason;
      return cap;
    }
    cap.kind = ev->needs_pmu() ? EventKind::hardware : EventKind::software;
    int err = try_open(detail::base_attr(*ev));
    if (err != 0) {
      OpenFailure f = classify_open_error(name, err, host);
      cap.status = f.status;
      cap.error = f.error;
      cap.detail = f.reason;
      return cap;
    }
    cap.available = true;
    cap.status = EventStatus::available;
    cap.detail = "perf_event_open succeeded (user level, " +
                 (ev->source == EventSource::libpfm ? "libpfm4: " + ev->encoding
                                                    : std::string("generic encoding")) +
                 ")";
    resolved_out = std::move(*ev);
    return cap;
  }
};

EventCapability clock_capability(const char* name, clockid_t clock, const char* how) {
  EventCapability cap;
  cap.name = name;
  cap.kind = EventKind::software;
  timespec ts{};
  if (::clock_gettime(clock, &ts) == 0) {
    cap.available = true;
    cap.status = EventStatus::available;
    cap.detail = how;
  } else {
    cap.error = errno;
    cap.status = EventStatus::other;
    cap.detail = std::string(how) + " failed with " + errno_name(cap.error);
  }
  return cap;
}

} // namespace

Capabilities probe(Syscalls& sys) {
  return probe({}, sys);
}

Capabilities probe(const std::vector<std::string>& extra_events, Syscalls& sys) {
  Capabilities caps;
  Prober p{sys, host_context(sys)};
  caps.perf_event_paranoid = p.host.paranoid;
  caps.privileged = effective_perf_privilege();
  caps.paranoid_detail = describe_paranoid(p.host.paranoid);
  if (caps.privileged)
    caps.paranoid_detail += " (this process has CAP_PERFMON or CAP_SYS_ADMIN, so the level does "
                            "not restrict it)";
  if (auto rate = sys.perf_event_max_sample_rate()) caps.max_sample_rate = *rate;
  caps.kernel_pmus = kernel_pmus();
  caps.libpfm_pmus = libpfm_active_pmus();

  std::vector<std::string> names = default_hardware_events();
  std::set<std::string> seen(names.begin(), names.end());
  for (const auto& e : extra_events)
    if (!e.empty() && seen.insert(e).second) names.push_back(e);

  std::optional<ResolvedEvent> first_hw;
  std::vector<std::string> hw_ok;
  // A copy: caps.events grows below, which would invalidate a pointer.
  std::optional<EventCapability> first_hw_failure;
  for (const auto& name : names) {
    std::optional<ResolvedEvent> resolved;
    caps.events.push_back(p.probe_event(name, EventKind::hardware, resolved));
    if (resolved && resolved->needs_pmu()) {
      hw_ok.push_back(name);
      if (!first_hw) first_hw = resolved;
    }
  }
  for (const auto& c : caps.events)
    if (!c.available && c.kind == EventKind::hardware) {
      first_hw_failure = c;
      break;
    }
  caps.hardware_counters_usable = first_hw.has_value();

  if (first_hw) {
    // rdpmc: the kernel says so in the user page of a mapped hardware event.
    detail::EventFd fd;
    int err = p.try_open(detail::base_attr(*first_hw), &fd);
    if (err != 0) {
      caps.rdpmc_detail = "re-opening '" + first_hw->name + "' failed with " + errno_name(err);
    } else if (!sys.has_user_counter_instructions()) {
      caps.rdpmc_detail = "this build reads user counters only on x86-64";
    } else {
      MapResult m = sys.mmap(page_size(), PROT_READ, MAP_SHARED, fd.get(), 0);
      if (!m.ok()) {
        caps.rdpmc_detail = "mmap of the event's user page failed with " + errno_name(m.error);
      } else {
        detail::EventMapping page(sys, m.addr, page_size());
        auto* pc = static_cast<const volatile perf_event_mmap_page*>(page.data());
        caps.rdpmc_usable = pc->cap_user_rdpmc && pc->cap_user_time;
        if (caps.rdpmc_usable)
          caps.rdpmc_detail = "cap_user_rdpmc and cap_user_time set on '" + first_hw->name +
                              "': counting groups read with RDPMC";
        else if (!pc->cap_user_rdpmc)
          caps.rdpmc_detail = "the kernel does not allow RDPMC (cap_user_rdpmc = 0; see "
                              "/sys/bus/event_source/devices/cpu/rdpmc): counting groups use "
                              "read(2)";
        else
          caps.rdpmc_detail = "no user time fields (cap_user_time = 0): counting groups use "
                              "read(2)";
      }
    }

    perf_event_attr sattr = detail::base_attr(*first_hw);
    sattr.sample_period = 100000;
    sattr.sample_type = PERF_SAMPLE_IP;
    err = p.try_open(sattr);
    if (err == 0) {
      caps.sampling_usable = true;
      caps.sampling_detail = "sampling '" + first_hw->name + "' with PERF_SAMPLE_IP works";
    } else {
      caps.sampling_detail =
          classify_open_error(first_hw->name + " (sampling)", err, p.host).reason;
    }
    sattr.sample_type |= PERF_SAMPLE_BRANCH_STACK;
    sattr.branch_sample_type = PERF_SAMPLE_BRANCH_ANY;
    err = caps.sampling_usable ? p.try_open(sattr) : -1;
    if (err == 0) {
      caps.branch_stack_usable = true;
      caps.branch_stack_detail = "PERF_SAMPLE_BRANCH_STACK accepted on '" + first_hw->name + "'";
    } else if (err == -1) {
      caps.branch_stack_detail = "hardware sampling is not usable";
    } else {
      caps.branch_stack_detail =
          classify_open_error(first_hw->name + " (branch stack)", err, p.host).reason;
    }
  } else {
    std::string why =
        first_hw_failure.has_value()
            ? std::string(to_string(first_hw_failure->status)) + ": " + first_hw_failure->detail
            : "no hardware event was asked for";
    caps.rdpmc_detail = "no hardware counter could be opened (" + why + ")";
    caps.sampling_detail = caps.rdpmc_detail;
    caps.branch_stack_detail = caps.rdpmc_detail;
  }

  // Software figures: always reported, whatever the PMU.
  {
    std::optional<ResolvedEvent> resolved;
    caps.events.push_back(
        p.probe_event(std::string(task_clock_event), EventKind::software, resolved));
    auto cpu_clock = resolve_event("cpu-clock");
    if (cpu_clock) {
      perf_event_attr sattr = detail::base_attr(*cpu_clock);
      sattr.sample_period = 1'000'000; // 1 ms of CPU time
      sattr.sample_type = PERF_SAMPLE_IP;
      int err = p.try_open(sattr);
      caps.software_sampling_usable = err == 0;
      caps.software_sampling_detail =
          err == 0 ? "cpu-clock sampling with PERF_SAMPLE_IP works (no PMU needed)"
                   : classify_open_error("cpu-clock (sampling)", err, p.host).reason;
    }
  }
  caps.events.push_back(clock_capability("thread-cpu-time", CLOCK_THREAD_CPUTIME_ID,
                                         "clock_gettime(CLOCK_THREAD_CPUTIME_ID)"));
  caps.events.push_back(
      clock_capability("wall-clock", CLOCK_MONOTONIC, "clock_gettime(CLOCK_MONOTONIC)"));

  // One line for people.
  std::string s;
  std::size_t hw_total = 0;
  for (const auto& c : caps.events)
    if (c.kind == EventKind::hardware) ++hw_total;
  if (hw_ok.empty()) {
    s = "hardware counters: none";
    if (first_hw_failure.has_value()) {
      s += " (" + std::string(to_string(first_hw_failure->status));
      if (first_hw_failure->error != 0) s += ", " + errno_name(first_hw_failure->error);
      s += ")";
    }
  } else {
    s = "hardware counters: " + std::to_string(hw_ok.size()) + "/" + std::to_string(hw_total) +
        " (" + join(hw_ok) + ")";
  }
  std::vector<std::string> sw_ok;
  for (const auto& c : caps.events)
    if (c.kind == EventKind::software && c.available) sw_ok.push_back(c.name);
  s += "; software: " + (sw_ok.empty() ? std::string("none") : join(sw_ok));
  s += "; perf_event_paranoid=" +
       (caps.perf_event_paranoid ? std::to_string(*caps.perf_event_paranoid) : std::string("?"));
  s += std::string("; rdpmc: ") + (caps.rdpmc_usable ? "yes" : "no");
  s +=
      std::string("; sampling: ") +
      (caps.sampling_usable ? "hardware"
                            : (caps.software_sampling_usable ? "software only (cpu-clock)" : "no"));
  s += std::string("; branch stack: ") + (caps.branch_stack_usable ? "yes" : "no");
  caps.summary = std::move(s);
  return caps;
}

nlohmann::json to_json(const Capabilities& caps) {
  nlohmann::json j;
  j["events"] = nlohmann::json::array();
  for (const auto& e : caps.events) {
    j["events"].push_back({{"name", e.name},
                           {"kind", e.kind == EventKind::hardware ? "hardware" : "software"},
                           {"available", e.available},
                           {"status", std::string(to_string(e.status))},
                           {"errno", e.error},
                           {"errno_name", e.error != 0 ? errno_name(e.error) : std::string()},
                           {"detail", e.detail}});
  }
  j["perf_event_paranoid"] = caps.perf_event_paranoid ? nlohmann::json(*caps.perf_event_paranoid)
                                                      : nlohmann::json(nullptr);
  j["paranoid_detail"] = caps.paranoid_detail;
  j["privileged"] = caps.privileged;
  j["hardware_counters_usable"] = caps.hardware_counters_usable;
  j["rdpmc_usable"] = caps.rdpmc_usable;
  j["rdpmc_detail"] = caps.rdpmc_detail;
  j["sampling_usable"] = caps.sampling_usable;
  j["sampling_detail"] = caps.sampling_detail;
  j["branch_stack_usable"] = caps.branch_stack_usable;
  j["branch_stack_detail"] = caps.branch_stack_detail;
  j["software_sampling_usable"] = caps.software_sampling_usable;
  j["software_sampling_detail"] = caps.software_sampling_detail;
  j["max_sample_rate"] =
      caps.max_sample_rate ? nlohmann::json(*caps.max_sample_rate) : nlohmann::json(nullptr);
  j["kernel_pmus"] = caps.kernel_pmus;
  j["libpfm_pmus"] = caps.libpfm_pmus;
  j["summary"] = caps.summary;
  return j;
}

} // namespace fdo::perf
