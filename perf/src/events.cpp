#include "fdo/perf/events.h"

#include "fdo/util/enum_names.h"
#include "pfm_encode.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <linux/perf_event.h>
#include <system_error>

namespace fdo::perf {

namespace {
constexpr EnumNames<EventStatus, 7> kEventStatusNames{{{
    {EventStatus::available, "available"},
    {EventStatus::no_pmu, "no_pmu"},
    {EventStatus::not_permitted, "not_permitted"},
    {EventStatus::not_supported, "not_supported"},
    {EventStatus::multiplexed_to_zero, "multiplexed_to_zero"},
    {EventStatus::unknown_event, "unknown_event"},
    {EventStatus::other, "other"},
}}};
} // namespace

std::string_view to_string(EventStatus status) {
  return kEventStatusNames.name(status);
}

namespace {
constexpr EnumNames<EventSource, 4> kEventSourceNames{{{
    {EventSource::generic_hardware, "generic_hardware"},
    {EventSource::generic_cache, "generic_cache"},
    {EventSource::generic_software, "generic_software"},
    {EventSource::libpfm, "libpfm"},
}}};
} // namespace

std::string_view to_string(EventSource source) {
  return kEventSourceNames.name(source);
}

bool ResolvedEvent::needs_pmu() const {
  return type == PERF_TYPE_HARDWARE || type == PERF_TYPE_HW_CACHE || type == PERF_TYPE_RAW ||
         type >= PERF_TYPE_MAX; // dynamic PMU types (cpu_core, uncore, ...)
}

namespace {

struct GenericEvent {
  std::string_view name;
  std::uint32_t type;
  std::uint64_t config;
  EventSource source;
};

constexpr std::uint64_t cache_config(std::uint64_t cache, std::uint64_t op, std::uint64_t result) {
  return cache | (op << 8) | (result << 16);
}

// The perf tool's spellings, so configs written for `perf stat -e` work.
constexpr GenericEvent generic_events[] = {
    {"instructions", PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS, EventSource::generic_hardware},
    {"cycles", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES, EventSource::generic_hardware},
    {"cpu-cycles", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES, EventSource::generic_hardware},
    {"branch-instructions", PERF_TYPE_HARDWARE, PERF_COUNT_HW_BRANCH_INSTRUCTIONS,
     EventSource::generic_hardware},
    {"branches", PERF_TYPE_HARDWARE, PERF_COUNT_HW_BRANCH_INSTRUCTIONS,
     EventSource::generic_hardware},
    {"branch-misses", PERF_TYPE_HARDWARE, PERF_COUNT_HW_BRANCH_MISSES,
     EventSource::generic_hardware},
    {"L1-icache-load-misses", PERF_TYPE_HW_CACHE,
     cache_config(PERF_COUNT_HW_CACHE_L1I, PERF_COUNT_HW_CACHE_OP_READ,
                  PERF_COUNT_HW_CACHE_RESULT_MISS),
     EventSource::generic_cache},
    {"iTLB-load-misses", PERF_TYPE_HW_CACHE,
     cache_config(PERF_COUNT_HW_CACHE_ITLB, PERF_COUNT_HW_CACHE_OP_READ,
                  PERF_COUNT_HW_CACHE_RESULT_MISS),
     EventSource::generic_cache},
    {"task-clock", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK, EventSource::generic_software},
    {"cpu-clock", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK, EventSource::generic_software},
    {"page-faults", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS, EventSource::generic_software},
    {"context-switches", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CONTEXT_SWITCHES,
     EventSource::generic_software},
};

// Appending avoids GCC 12's false -Wrestrict on "'" + std::string(...).
std::string quoted(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out += '\'';
  out += s;
  out += '\'';
  return out;
}

Status validate_name(std::string_view name) {
  if (name.empty()) return make_error(Errc::invalid_argument, "empty perf event name");
  if (name.size() > 512)
    return make_error(Errc::invalid_argument, "perf event name longer than 512 characters: '" +
                                                  std::string(name.substr(0, 40)) + "...'");
  for (char c : name) {
    auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u >= 0x7f)
      return make_error(Errc::invalid_argument,
                        "perf event name '" + std::string(name) +
                            "' contains whitespace or a non-printable character");
  }
  return ok();
}

} // namespace

Expected<ResolvedEvent> resolve_event(std::string_view name) {
  FDO_TRY_STATUS(validate_name(name));
  for (const auto& g : generic_events) {
    if (g.name == name) {
      ResolvedEvent ev;
      ev.name = std::string(name);
      ev.encoding = "generic";
      ev.type = g.type;
      ev.config = g.config;
      ev.source = g.source;
      return ev;
    }
  }
  auto enc = detail::pfm_encode(std::string(name));
  if (!enc) return std::move(enc).error();
  ResolvedEvent ev;
  ev.name = std::string(name);
  ev.encoding = enc->canonical;
  ev.type = enc->type;
  ev.config = enc->config;
  ev.config1 = enc->config1;
  ev.config2 = enc->config2;
  ev.source = EventSource::libpfm;
  return ev;
}

Expected<std::vector<ResolvedEvent>> resolve_events(const std::vector<std::string>& names) {
  std::vector<ResolvedEvent> out;
  out.reserve(names.size());
  for (const auto& n : names) {
    auto ev = resolve_event(n);
    if (!ev) return std::move(ev).error().context("resolve perf events");
    out.push_back(std::move(*ev));
  }
  return out;
}

std::vector<std::string> default_hardware_events() {
  return {"instructions",          "cycles",          "branch-instructions", "branch-misses",
          "L1-icache-load-misses", "iTLB-load-misses"};
}

std::vector<std::string> libpfm_active_pmus() {
  return detail::pfm_active_pmus();
}

std::vector<std::string> kernel_pmus() {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& entry :
       std::filesystem::directory_iterator("/sys/bus/event_source/devices", ec)) {
    out.push_back(entry.path().filename().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool is_core_pmu_name(std::string_view name) {
  return name == "cpu" || name.starts_with("cpu_") || name.starts_with("armv") ||
         name.starts_with("arm_cortex") || name == "riscv-pmu" || name.starts_with("power");
}

HostContext host_context(Syscalls& sys) {
  HostContext host;
  if (auto p = sys.perf_event_paranoid()) host.paranoid = *p;
  for (const auto& pmu : kernel_pmus())
    if (is_core_pmu_name(pmu)) host.core_pmu = true;
  return host;
}

std::string errno_name(int error) {
  if (const char* n = ::strerrorname_np(error)) return n;
  return std::to_string(error);
}

std::string describe_paranoid(std::optional<int> paranoid) {
  if (!paranoid) return "perf_event_paranoid could not be read";
  const int p = *paranoid;
  std::string s = "perf_event_paranoid=" + std::to_string(p) + ": ";
  if (p <= -1) return s + "no restrictions for unprivileged processes";
  if (p == 0)
    return s + "unprivileged processes may count user and kernel, per thread and CPU-wide";
  if (p == 1)
    return s + "unprivileged processes may count user and kernel per thread; CPU-wide needs "
               "CAP_PERFMON";
  if (p == 2)
    return s + "unprivileged processes may count their own threads at user level (what fdo "
               "asks for); kernel counting needs CAP_PERFMON";
  return s + "unprivileged perf_event_open is forbidden (a Debian/Android extension); needs "
             "CAP_PERFMON (CAP_SYS_ADMIN before Linux 5.8) or kernel.perf_event_paranoid<=2";
}

OpenFailure classify_open_error(std::string_view event, int error, const HostContext& host) {
  OpenFailure f;
  f.error = error;
  std::string head = quoted(event) + ": perf_event_open failed with " + errno_name(error) + " (" +
                     std::strerror(error) + ")";
  switch (error) {
  case ENOENT:
    f.status = EventStatus::no_pmu;
    if (!host.core_pmu)
      f.reason = head + ": no PMU: the kernel exposes no CPU PMU (a VM without a virtual "
                        "PMU, or perf support missing); hardware counters are unavailable";
    else
      f.reason = head + ": the CPU's PMU has no such event";
    break;
  case EACCES:
  case EPERM: {
    f.status = EventStatus::not_permitted;
    std::string why;
    if (!host.paranoid)
      why = "perf_event_paranoid could not be read; a kernel setting, a seccomp filter or "
            "missing CAP_PERFMON forbids it";
    else if (*host.paranoid >= 3)
      why = "perf_event_paranoid=" + std::to_string(*host.paranoid) +
            " forbids unprivileged perf_event_open entirely: set kernel.perf_event_paranoid=2 "
            "or grant CAP_PERFMON";
    else
      why = "perf_event_paranoid=" + std::to_string(*host.paranoid) +
            " permits user-level self-monitoring, so the denial comes from elsewhere: a seccomp "
            "filter (container runtimes block perf_event_open by default), an LSM, or an event "
            "that needs CAP_PERFMON; grant CAP_PERFMON or allow perf_event_open";
    f.reason = head + ": not permitted: " + why;
    break;
  }
  case EOPNOTSUPP:
    f.status = EventStatus::not_supported;
    f.reason = head + ": the PMU does not support this configuration (e.g. sampling, or a "
                      "branch stack, on this event)";
    break;
  case EINVAL:
  case ENODEV:
  case E2BIG:
    f.status = EventStatus::not_supported;
    f.reason = head + ": this kernel or PMU rejects the event's configuration";
    break;
  case EBUSY:
    f.status = EventStatus::other;
    f.reason = head + ": the PMU is in exclusive use by someone else";
    break;
  case EMFILE:
  case ENFILE:
    f.status = EventStatus::other;
    f.reason = head + ": out of file descriptors";
    break;
  default:
    f.status = EventStatus::other;
    f.reason = head;
    break;
  }
  return f;
}

OpenFailure classify_resolve_error(std::string_view event, const Error& error) {
  OpenFailure f;
  f.status = error.code() == Errc::unsupported ? EventStatus::no_pmu : EventStatus::unknown_event;
  f.reason = quoted(event) + ": " + error.message();
  return f;
}

} // namespace fdo::perf
