// One call that says what this host can measure, and why not where it cannot.
// Backs `fdoctl doctor` and the worker's decision which events to ask for.
#pragma once

#include "fdo/perf/events.h"
#include "fdo/perf/syscalls.h"

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace fdo::perf {

enum class EventKind { hardware, software };

struct EventCapability {
  std::string name;
  EventKind kind = EventKind::hardware;
  bool available = false;
  EventStatus status = EventStatus::other;
  int error = 0;      // errno from perf_event_open (0 if none)
  std::string detail; // reason, or how it is read when available
};

struct Capabilities {
  // The default hardware events, any extra events asked for, then the software
  // figures: task-clock, thread-cpu-time, wall-clock.
  std::vector<EventCapability> events;
  std::optional<int> perf_event_paranoid;
  std::string paranoid_detail;
  // CAP_PERFMON or CAP_SYS_ADMIN in the effective set: paranoid does not apply.
  bool privileged = false;
  bool hardware_counters_usable = false; // at least one hardware event opened
  bool rdpmc_usable = false;
  std::string rdpmc_detail;
  bool sampling_usable = false; // hardware-event sampling (PERF_SAMPLE_IP)
  std::string sampling_detail;
  bool branch_stack_usable = false; // PERF_SAMPLE_BRANCH_STACK on a hardware event
  std::string branch_stack_detail;
  bool software_sampling_usable = false; // cpu-clock sampling (no PMU needed)
  std::string software_sampling_detail;
  std::optional<long> max_sample_rate;
  std::vector<std::string> kernel_pmus;
  std::vector<std::string> libpfm_pmus;
  std::string summary; // one line for people

  const EventCapability* find(std::string_view name) const;
};

// CAP_PERFMON or CAP_SYS_ADMIN in this process's effective set: with either the
// kernel lets it open events on any task (perf_event_open(pid)).
bool effective_perf_privilege();

Capabilities probe(Syscalls& sys = Syscalls::real());
// Also probes `extra_events` (raw libpfm4 names from the configuration).
Capabilities probe(const std::vector<std::string>& extra_events, Syscalls& sys = Syscalls::real());

nlohmann::json to_json(const Capabilities& caps);

} // namespace fdo::perf
