// Event names -> perf_event_attr encodings, and perf_event_open failures ->
// per-event statuses with a reason a person can act on.
//
// The six generic events the daemon uses (instructions, cycles,
// branch-instructions, branch-misses, L1-icache-load-misses, iTLB-load-misses)
// and the software clocks (task-clock, cpu-clock) map straight to the kernel's
// generic PERF_TYPE_HARDWARE / HW_CACHE / SOFTWARE encodings; any other name
// ("perf::branch-misses", "INST_RETIRED:ANY_P", "amd64_fam19h_zen3::RETIRED_INSTRUCTIONS")
// is encoded by libpfm4 for the PMUs it detects, user level only.
#pragma once

#include "fdo/perf/syscalls.h"
#include "fdo/util/expected.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fdo::perf {

// Why an event does (not) count. Stable strings (to_string) go into JSON.
enum class EventStatus {
  available,           // opened (and, in a measurement, counted)
  no_pmu,              // ENOENT: the kernel has no PMU for this event (VM without vPMU)
  not_permitted,       // EACCES/EPERM: perf_event_paranoid or missing CAP_PERFMON
  not_supported,       // EOPNOTSUPP/EINVAL/ENODEV: the PMU cannot do this (configuration)
  multiplexed_to_zero, // opened, but time_running == 0: never got a hardware counter
  unknown_event,       // libpfm4 could not encode the name
  other,               // any other errno (text in the reason)
};
std::string_view to_string(EventStatus status);

enum class EventSource { generic_hardware, generic_cache, generic_software, libpfm };
std::string_view to_string(EventSource source);

struct ResolvedEvent {
  std::string name;     // as given by the caller
  std::string encoding; // libpfm4's canonical string, or "generic" for the built-in table
  std::uint32_t type = 0;
  std::uint64_t config = 0;
  std::uint64_t config1 = 0;
  std::uint64_t config2 = 0;
  EventSource source = EventSource::libpfm;
  // True for events that need a PMU (anything but PERF_TYPE_SOFTWARE).
  bool needs_pmu() const;
};

// Resolves one name. Errors: Errc::invalid_argument (empty or malformed name),
// Errc::not_found (no PMU libpfm4 knows has an event of that name),
// Errc::unsupported (libpfm4 could not initialise or has no active PMU).
Expected<ResolvedEvent> resolve_event(std::string_view name);
// All or nothing: the first name that does not resolve is the error (named).
Expected<std::vector<ResolvedEvent>> resolve_events(const std::vector<std::string>& names);

// The hardware events the daemon asks for by default.
std::vector<std::string> default_hardware_events();
// The software event always opened beside a counting group.
inline constexpr std::string_view task_clock_event = "task-clock";

// PMUs libpfm4 found active on this host ("perf", "amd64_fam19h_zen3", ...).
// Empty when libpfm4 failed to initialise.
std::vector<std::string> libpfm_active_pmus();
// PMUs the kernel exposes (/sys/bus/event_source/devices): "cpu" (or
// "cpu_core"/"cpu_atom", "armv8_*") means a core PMU exists.
std::vector<std::string> kernel_pmus();

// What the kernel lets this process do, for explaining failures.
struct HostContext {
  std::optional<int> paranoid; // /proc/sys/kernel/perf_event_paranoid, if readable
  bool core_pmu = false;       // kernel_pmus() has a CPU PMU
};
HostContext host_context(Syscalls& sys);
// True for the kernel PMU names of a CPU's core PMU ("cpu", "cpu_core", "armv8_pmuv3_0").
bool is_core_pmu_name(std::string_view name);
// "ENOENT" for ENOENT; the number for errnos glibc does not name.
std::string errno_name(int error);

// A classified perf_event_open failure.
struct OpenFailure {
  EventStatus status = EventStatus::other;
  int error = 0;
  std::string reason; // names the event, the errno and what to do about it
};
// EACCES/EPERM reasons say what the paranoid level implies; ENOENT reasons
// say whether the host has no CPU PMU at all or only lacks this event.
OpenFailure classify_open_error(std::string_view event, int error, const HostContext& host);
// Maps a resolve_event error to a status (unknown_event, or no_pmu when
// libpfm4 has no active PMU).
OpenFailure classify_resolve_error(std::string_view event, const Error& error);

// What a perf_event_paranoid value allows an unprivileged process.
std::string describe_paranoid(std::optional<int> paranoid);

} // namespace fdo::perf
