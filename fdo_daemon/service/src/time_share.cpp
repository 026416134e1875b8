#include "fdo/daemon/time_share.h"

#include "fdo/jit/types.h"

#include <algorithm>
#include <cmath>

namespace fdo::daemon {

using nlohmann::json;

namespace {
bool is_clock(const std::string& event) {
  return event == "cpu-clock" || event == "task-clock";
}
} // namespace

PgoNames::PgoNames(const std::map<std::string, std::string>& pgo_names) {
  // Exact names first: a symbol that is itself a PGO name is that function,
  // whatever local function's name it also ends.
  for (const auto& [pgo, source] : pgo_names)
    by_symbol_.emplace(pgo, pgo);
  // Then "<file>:<symbol>": the first PGO name (in order) ending in
  // ":<symbol>" after a non-empty prefix.
  for (const auto& [pgo, source] : pgo_names)
    for (std::size_t p = pgo.find(':', 1); p != std::string::npos; p = pgo.find(':', p + 1))
      by_symbol_.emplace(pgo.substr(p + 1), pgo);
}

const std::string& PgoNames::of(const std::string& symbol) const {
  if (auto it = by_symbol_.find(symbol); it != by_symbol_.end()) return it->second;
  // The bodies of a specialized function (docs/jit.md, "Value specialization")
  // run that function's code: their samples are its.
  if (std::string_view origin = jit::clone_origin(symbol); origin.size() != symbol.size())
    if (auto it = by_symbol_.find(std::string(origin)); it != by_symbol_.end()) return it->second;
  return symbol;
}

StageSamples stage_samples_from(const StageObservation& obs, const PgoNames& pgo_names,
                                const std::set<std::string>* known_functions) {
  StageSamples out;
  if (!obs.samples || !obs.samples->error.empty()) return out;
  const StageSampleReport& s = *obs.samples;
  for (const perf::SamplerEvent& e : s.events)
    if (e.status == perf::EventStatus::available && is_clock(e.name)) {
      out.clock_event = e.name;
      break;
    }
  if (out.clock_event.empty()) return out;
  for (const auto& [symbol, per_event] : s.functions) {
    const std::string& fn = pgo_names.of(symbol);
    for (const auto& [event, n] : per_event) {
      if (event == out.clock_event)
        out.clock[fn] += n;
      else if (!is_clock(event))
        out.misses[event][fn] += n;
    }
  }
  if (auto c = s.outside_jit.find(out.clock_event); c != s.outside_jit.end())
    out.clock_outside = c->second;
  if (obs.function_ranges) {
    for (const jit::FunctionRange& r : *obs.function_ranges)
      if (r.size != 0) out.functions.insert(pgo_names.of(r.name));
  } else if (known_functions != nullptr) {
    out.functions = *known_functions;
  }
  out.present = true;
  return out;
}

void TimeShareWindow::add(const StageSamples& stage, std::size_t keep) {
  if (!stage.present) return;
  stages_.push_back({stage, 1});
  // Drop the oldest entry while the newer ones alone make `keep` stages (a
  // restored sum stays until then).
  keep = std::max<std::size_t>(keep, 1);
  while (stages_.size() > 1 && stages() - stages_.front().stages >= keep)
    stages_.pop_front();
}

void TimeShareWindow::restore(const StageSamples& sum, std::size_t stages) {
  stages_.clear();
  if (sum.present && stages != 0) stages_.push_back({sum, stages});
}

std::size_t TimeShareWindow::stages() const {
  std::size_t n = 0;
  for (const Entry& e : stages_)
    n += e.stages;
  return n;
}

std::uint64_t TimeShareWindow::program_samples() const {
  std::uint64_t n = 0;
  for (const Entry& e : stages_)
    for (const auto& [fn, c] : e.samples.clock)
      n += c;
  return n;
}

std::uint64_t TimeShareWindow::outside_samples() const {
  std::uint64_t n = 0;
  for (const Entry& e : stages_)
    n += e.samples.clock_outside;
  return n;
}

std::map<std::string, double> TimeShareWindow::shares() const {
  std::map<std::string, std::uint64_t> sums;
  for (const Entry& e : stages_)
    for (const auto& [fn, c] : e.samples.clock)
      sums[fn] += c;
  const std::uint64_t total = program_samples();
  std::map<std::string, double> out;
  if (total == 0) return out;
  for (const auto& [fn, c] : sums)
    out[fn] = static_cast<double>(c) / static_cast<double>(total);
  return out;
}

std::set<std::string> TimeShareWindow::functions() const {
  if (stages_.empty()) return {};
  std::set<std::string> out = stages_.front().samples.functions;
  for (const Entry& e : stages_) {
    const std::set<std::string>& s = e.samples.functions;
    std::set<std::string> both;
    std::set_intersection(out.begin(), out.end(), s.begin(), s.end(),
                          std::inserter(both, both.begin()));
    out.swap(both);
  }
  return out;
}

std::map<std::string, std::map<std::string, std::uint64_t>> TimeShareWindow::misses() const {
  std::map<std::string, std::map<std::string, std::uint64_t>> out;
  for (const Entry& e : stages_)
    for (const auto& [event, fns] : e.samples.misses)
      for (const auto& [fn, c] : fns)
        out[event][fn] += c;
  return out;
}

namespace {
// Counter keys: "sampled|stages", "sampled|outside|<clock event>",
// "sampled|code|<function>" (stages in which it had code) and
// "sampled|<event>|<function>". Event names hold no '|'; a function name may.
constexpr std::string_view kSampled = "sampled|";
} // namespace

void add_sample_counters(const StageSamples& stage,
                         std::map<std::string, std::uint64_t>& counters) {
  if (!stage.present) return;
  // A sampled stage of a big program adds a key per function with code (a
  // thousand or more): each is built in one buffer, and each function's key
  // is looked for from the previous one's place (the functions come sorted,
  // so are their keys within one event).
  std::string key;
  auto at = counters.end();
  auto add = [&](std::string_view event, std::string_view fn, std::uint64_t n) {
    key.assign(kSampled).append(event).append("|").append(fn);
    at = counters.try_emplace(at, key, 0);
    at->second += n;
    ++at;
  };
  counters[std::string(kSampled) + "stages"] += 1;
  add("outside", stage.clock_event, stage.clock_outside);
  for (const std::string& fn : stage.functions)
    add("code", fn, 1);
  for (const auto& [fn, n] : stage.clock)
    add(stage.clock_event, fn, n);
  for (const auto& [event, per_fn] : stage.misses)
    for (const auto& [fn, n] : per_fn)
      add(event, fn, n);
}

std::optional<SampledTotals> take_sample_counters(std::map<std::string, std::uint64_t>& counters) {
  SampledTotals out;
  std::map<std::string, std::uint64_t> code;
  std::map<std::string, std::map<std::string, std::uint64_t>> by_event;
  for (auto it = counters.begin(); it != counters.end();) {
    const std::string_view key = it->first;
    if (!key.starts_with(kSampled)) {
      ++it;
      continue;
    }
    const std::string_view rest = key.substr(kSampled.size());
    const std::size_t bar = rest.find('|');
    if (rest == "stages") {
      out.stages = static_cast<std::size_t>(it->second);
    } else if (bar != std::string_view::npos && bar != 0 && bar + 1 < rest.size()) {
      const std::string head(rest.substr(0, bar)), tail(rest.substr(bar + 1));
      if (head == "outside") {
        out.sum.clock_event = tail;
        out.sum.clock_outside = it->second;
      } else if (head == "code") {
        code[tail] = it->second;
      } else {
        by_event[head][tail] += it->second;
      }
    }
    it = counters.erase(it);
  }
  if (out.stages == 0 || !is_clock(out.sum.clock_event)) return std::nullopt;
  for (auto& [event, per_fn] : by_event)
    if (event == out.sum.clock_event)
      out.sum.clock = std::move(per_fn);
    else if (!is_clock(event))
      out.sum.misses[event] = std::move(per_fn);
  for (const auto& [fn, n] : code)
    if (n >= out.stages) out.sum.functions.insert(fn);
  out.sum.present = true;
  return out;
}

double time_share_drift(const std::map<std::string, double>& recorded,
                        const std::map<std::string, double>& measured,
                        const std::set<std::string>& present) {
  auto restricted = [&](const std::map<std::string, double>& shares) {
    std::map<std::string, double> out;
    double sum = 0.0;
    for (const auto& [fn, v] : shares)
      if (present.count(fn) != 0 && v > 0.0) {
        out[fn] = v;
        sum += v;
      }
    for (auto& [fn, v] : out)
      v /= sum;
    return out;
  };
  auto a = restricted(recorded);
  auto b = restricted(measured);
  if (a.empty() || b.empty()) return 0.0;
  double tvd = 0.0;
  for (const auto& [fn, v] : a) {
    auto it = b.find(fn);
    tvd += std::fabs(v - (it == b.end() ? 0.0 : it->second));
  }
  for (const auto& [fn, v] : b)
    if (a.count(fn) == 0) tvd += v;
  return std::clamp(tvd / 2.0, 0.0, 1.0);
}

json sampling_record(const TimeShareWindow& window, const std::string& clock_event) {
  json shares = json::object();
  for (const auto& [fn, v] : window.shares())
    shares[fn] = v;
  json misses = json::object();
  for (const auto& [event, fns] : window.misses()) {
    json m = json::object();
    for (const auto& [fn, c] : fns)
      m[fn] = c;
    misses[event] = std::move(m);
  }
  return {{"event", clock_event},
          {"stages", window.stages()},
          {"samples", window.program_samples()},
          {"outside_samples", window.outside_samples()},
          {"time_share", std::move(shares)},
          {"misses", std::move(misses)}};
}

std::optional<std::map<std::string, double>> recorded_time_shares(const ProfileDoc& doc) {
  auto s = doc.hardware.find("sampling");
  if (s == doc.hardware.end() || !s->is_object()) return std::nullopt;
  auto t = s->find("time_share");
  if (t == s->end() || !t->is_object() || t->empty()) return std::nullopt;
  std::map<std::string, double> out;
  for (auto it = t->begin(); it != t->end(); ++it)
    if (it->is_number() && it->get<double>() >= 0.0) out[it.key()] = it->get<double>();
  if (out.empty()) return std::nullopt;
  return out;
}

bool window_judgeable(const PolicyConfig& config, const TimeShareWindow& window) {
  const auto need_stages = static_cast<std::size_t>(std::max(config.time_share_window_stages, 1));
  return window.stages() >= need_stages &&
         window.program_samples() >= config.time_share_min_samples;
}

ReprofileDecision decide_reprofile(const PolicyConfig& config, const ProfileDoc& current,
                                   const TimeShareWindow& window,
                                   const std::map<std::string, double>* baseline) {
  ReprofileDecision d;
  if (choose_mode(&current) != CompileMode::optimized) return d;
  std::optional<std::map<std::string, double>> recorded;
  if (baseline == nullptr) {
    recorded = recorded_time_shares(current);
    if (!recorded) return d;
    baseline = &*recorded;
  }
  const auto need_stages = static_cast<std::size_t>(std::max(config.time_share_window_stages, 1));
  if (!window_judgeable(config, window)) {
    d.reason = "time-share drift: waiting for samples (" + std::to_string(window.stages()) +
               " of " + std::to_string(need_stages) + " stages, " +
               std::to_string(window.program_samples()) + " of " +
               std::to_string(config.time_share_min_samples) + " samples)";
    return d;
  }
  const double drift = time_share_drift(*baseline, window.shares(), window.functions());
  d.drift = drift;
  char text[32];
  std::snprintf(text, sizeof text, "%.3f", drift);
  char limit[32];
  std::snprintf(limit, sizeof limit, "%.3f", config.time_share_drift_threshold);
  if (drift < config.time_share_drift_threshold || config.time_share_drift_threshold >= 1.0) {
    d.reason = std::string("time-share drift ") + text + " below threshold " + limit;
    return d;
  }
  d.reprofile = true;
  d.reason = std::string("time-share drift ") + text + " >= " + limit + " over " +
             std::to_string(window.stages()) + " sampled stages: re-profiling";
  return d;
}

ProfileDoc reprofile_doc(const ProfileDoc& current) {
  ProfileDoc doc = current;
  for (auto& [name, f] : doc.functions) {
    f.counts.clear();
    f.indirect_calls.clear();
    f.memop_sizes.clear();
    f.arg_values.clear();
  }
  // Context-sensitive counts were gathered over code built from the old
  // counts: stale for the new workload, and CSIRUse must not meet them before
  // the next context-sensitive round has counted again.
  doc.cs_functions.clear();
  if (doc.knobs.mode == CompileMode::optimized || doc.knobs.mode == CompileMode::cs_instrumented)
    doc.knobs.mode.reset();
  return doc;
}

} // namespace fdo::daemon
