// `fdoctl doctor`: what this host can measure (from the perf capability
// report, `capabilities.perf`, see perf/include/fdo/perf/capabilities.h) and
// how to enable what is missing. Pure: JSON in, findings out.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace fdo::ctl {

enum class Severity { ok, note, problem };
std::string_view to_string(Severity s);

struct Finding {
  Severity severity = Severity::note;
  std::string topic;  // "hardware counters", "perf_event_paranoid", ...
  std::string what;   // what was found
  std::string advice; // what to do about it; empty when nothing needs doing
};

// Findings from a capabilities.perf document, most important first.
std::vector<Finding> diagnose(const nlohmann::json& perf);

// Whether this process (fdoctl, outside fdod's unit) sees NVIDIA device nodes.
enum class HostGpuNodes { absent, present };

// The GPU finding from a capabilities.gpu document (fdod's, or one made by
// probing the driver in this process: docs/gpu.md): what fdod runs NVPTX
// programs on, or why it runs none and what to do about it. fdod seeing no
// device node on a host that has them is its unit hiding them
// (PrivateDevices=yes): the advice names the GPU drop-in.
Finding diagnose_gpu(const nlohmann::json& gpu, HostGpuNodes host = HostGpuNodes::absent);

nlohmann::json to_json(const std::vector<Finding>& findings);

// The events table plus the findings, for people.
std::string render_doctor(const nlohmann::json& perf, const std::vector<Finding>& findings);

} // namespace fdo::ctl
