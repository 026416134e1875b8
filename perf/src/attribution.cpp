#include "fdo/perf/attribution.h"

#include <algorithm>
#include <limits>
#include <numeric>

namespace fdo::perf {

const FunctionAttribution* Attribution::find(std::string_view name) const {
  if (name == outside_jit.name) return &outside_jit;
  for (const auto& f : functions)
    if (f.name == name) return &f;
  return nullptr;
}

Expected<Attribution> attribute(const SampleSet& set, const std::vector<FunctionRange>& ranges,
                                const ExecCounts& counts) {
  const std::size_t n_events = set.events.size();
  Attribution out;
  out.events = set.events;
  out.lost_samples = set.stats.lost_samples;
  out.lost_records = set.stats.lost_records;
  out.outside_jit.name = "[outside_jit]";
  out.outside_jit.events.resize(n_events);

  // Sort by start so a sample's function is found by binary search.
  std::vector<std::size_t> order(ranges.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return ranges[a].start < ranges[b].start; });
  for (std::size_t k = 0; k < order.size(); ++k) {
    const FunctionRange& r = ranges[order[k]];
    if (r.size > std::numeric_limits<std::uint64_t>::max() - r.start)
      return make_error(Errc::invalid_argument,
                        "function '" + r.name + "' range overflows: start " +
                            std::to_string(r.start) + " size " + std::to_string(r.size));
    if (k > 0) {
      const FunctionRange& prev = ranges[order[k - 1]];
      if (prev.start + prev.size > r.start)
        return make_error(Errc::invalid_argument,
                          "function ranges overlap: '" + prev.name + "' and '" + r.name + "'");
    }
    FunctionAttribution f;
    f.name = r.name;
    f.start = r.start;
    f.size = r.size;
    f.events.resize(n_events);
    out.functions.push_back(std::move(f));
  }

  std::vector<std::uint64_t> event_totals(n_events, 0);
  for (const Sample& s : set.samples) {
    if (s.event >= n_events)
      return make_error(Errc::invalid_argument, "sample with event index " +
                                                    std::to_string(s.event) + " but only " +
                                                    std::to_string(n_events) + " event names");
    // The last function starting at or below ip, if ip is inside it.
    auto it = std::upper_bound(
        out.functions.begin(), out.functions.end(), s.ip,
        [](std::uint64_t ip, const FunctionAttribution& f) { return ip < f.start; });
    FunctionAttribution* target = &out.outside_jit;
    if (it != out.functions.begin()) {
      FunctionAttribution& f = *std::prev(it);
      if (s.ip - f.start < f.size) target = &f;
    }
    EventShare& e = target->events[s.event];
    ++e.samples;
    e.estimated_events += s.period;
    ++target->samples;
    ++event_totals[s.event];
    ++out.samples;
  }

  auto finish = [&](FunctionAttribution& f) {
    for (std::size_t i = 0; i < n_events; ++i) {
      EventShare& e = f.events[i];
      e.share = event_totals[i] != 0
                    ? static_cast<double>(e.samples) / static_cast<double>(event_totals[i])
                    : 0.0;
      if (counts.instructions && *counts.instructions > 0)
        e.per_kilo_instructions = static_cast<double>(e.estimated_events) * 1000.0 /
                                  static_cast<double>(*counts.instructions);
      if (counts.executions && *counts.executions > 0)
        e.per_execution =
            static_cast<double>(e.estimated_events) / static_cast<double>(*counts.executions);
    }
  };
  for (auto& f : out.functions)
    finish(f);
  finish(out.outside_jit);
  return out;
}

namespace {
nlohmann::json function_json(const FunctionAttribution& f, const std::vector<std::string>& events) {
  nlohmann::json j;
  j["name"] = f.name;
  j["start"] = f.start;
  j["size"] = f.size;
  j["samples"] = f.samples;
  nlohmann::json ev = nlohmann::json::object();
  for (std::size_t i = 0; i < events.size() && i < f.events.size(); ++i) {
    const EventShare& e = f.events[i];
    nlohmann::json x;
    x["samples"] = e.samples;
    x["estimated_events"] = e.estimated_events;
    x["share"] = e.share;
    x["per_kilo_instructions"] = e.per_kilo_instructions ? nlohmann::json(*e.per_kilo_instructions)
                                                         : nlohmann::json(nullptr);
    x["per_execution"] =
        e.per_execution ? nlohmann::json(*e.per_execution) : nlohmann::json(nullptr);
    ev[events[i]] = std::move(x);
  }
  j["events"] = std::move(ev);
  return j;
}
} // namespace

nlohmann::json to_json(const Attribution& a) {
  nlohmann::json j;
  j["events"] = a.events;
  j["functions"] = nlohmann::json::array();
  for (const auto& f : a.functions)
    j["functions"].push_back(function_json(f, a.events));
  j["outside_jit"] = function_json(a.outside_jit, a.events);
  j["samples"] = a.samples;
  j["lost_samples"] = a.lost_samples;
  j["lost_records"] = a.lost_records;
  return j;
}

} // namespace fdo::perf
