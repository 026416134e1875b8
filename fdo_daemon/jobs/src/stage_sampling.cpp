#include "fdo/daemon/stage_sampling.h"

#include "fdo/perf/attribution.h"

#include <algorithm>

namespace fdo::daemon {

using nlohmann::json;

json StageSamplingRequest::to_json() const {
  return {{"events", events}, {"frequency_hz", frequency_hz}, {"max_samples", max_samples}};
}

Expected<std::optional<StageSamplingRequest>> sampling_request_from(const json& header) {
  auto it = header.find("sampling");
  if (it == header.end() || it->is_null()) return std::optional<StageSamplingRequest>{};
  if (!it->is_object())
    return make_error(Errc::invalid_argument, "exec job: 'sampling' must be an object");
  StageSamplingRequest r;
  const json& s = *it;
  auto events = s.find("events");
  if (events == s.end() || !events->is_array() || events->empty())
    return make_error(Errc::invalid_argument,
                      "exec job: sampling.events must be a non-empty array of event names");
  for (const json& e : *events) {
    if (!e.is_string() || e.get_ref<const std::string&>().empty())
      return make_error(Errc::invalid_argument,
                        "exec job: sampling.events must hold non-empty strings");
    r.events.push_back(e.get<std::string>());
  }
  for (auto [key, field] :
       {std::pair{"frequency_hz", &r.frequency_hz}, std::pair{"max_samples", &r.max_samples}}) {
    auto v = s.find(key);
    if (v == s.end()) continue;
    const bool positive = v->is_number_unsigned()  ? v->get<std::uint64_t>() != 0
                          : v->is_number_integer() ? v->get<std::int64_t>() > 0
                                                   : false;
    if (!positive)
      return make_error(Errc::invalid_argument,
                        std::string("exec job: sampling.") + key + " must be a positive integer");
    *field = v->get<std::uint64_t>();
  }
  return std::optional<StageSamplingRequest>{std::move(r)};
}

std::vector<perf::Sample> thin_samples(std::vector<perf::Sample> samples, std::uint64_t max) {
  const std::uint64_t n = samples.size();
  if (n <= max) return samples;
  std::vector<perf::Sample> kept;
  kept.reserve(max);
  // Sample i is kept when floor((i+1)*max/n) steps past floor(i*max/n):
  // exactly `max` of them, spread evenly over the sequence.
  for (std::uint64_t i = 0; i < n; ++i)
    if ((i + 1) * max / n != i * max / n) kept.push_back(std::move(samples[i]));
  return kept;
}

namespace {
json per_event(const perf::FunctionAttribution& f, const std::vector<std::string>& events) {
  json out = json::object();
  for (std::size_t i = 0; i < events.size() && i < f.events.size(); ++i)
    if (f.events[i].samples != 0) out[events[i]] = f.events[i].samples;
  return out;
}
// The block of the program's code at `ip`, if the compile's block map covers it.
const jit::BlockRange* block_at(const std::vector<jit::FunctionRange>& ranges, std::uint64_t ip) {
  auto it =
      std::upper_bound(ranges.begin(), ranges.end(), ip,
                       [](std::uint64_t a, const jit::FunctionRange& r) { return a < r.start; });
  if (it == ranges.begin()) return nullptr;
  --it;
  if (ip - it->start >= it->size || it->blocks.empty()) return nullptr;
  return jit::find_block(it->blocks, ip - it->start);
}

// Where a sample counts for branches: a sample with a branch stack names the
// branch the hardware saw mispredicted (its newest mispredicted entry's
// source); without one, the sample's own address, which may have skidded
// past the branch into one of its successors (docs/perf.md).
std::uint64_t branch_address(const perf::Sample& s) {
  for (const perf::BranchEntry& b : s.branches)
    if (b.mispredicted) return b.from;
  return s.ip;
}

// Per-block and per-branch tallies: "blocks" {event: {fn: {block: n}}},
// "branches" {fn: {branch: {event: n}}} (functions by PGO name).
void block_tallies(const perf::SampleSet& set, const std::vector<jit::FunctionRange>& ranges,
                   json& out) {
  json blocks = json::object();
  json branches = json::object();
  for (const perf::Sample& s : set.samples) {
    if (s.event >= set.events.size()) continue;
    const std::string& event = set.events[s.event];
    if (const jit::BlockRange* b = block_at(ranges, s.ip)) {
      json& n = blocks[event][b->function][std::to_string(b->block)];
      n = n.is_null() ? 1 : n.get<std::uint64_t>() + 1;
    }
    const jit::BlockRange* b = block_at(ranges, branch_address(s));
    if (b == nullptr || b->branch < 0) continue;
    json& n = branches[b->function][std::to_string(b->branch)][event];
    n = n.is_null() ? 1 : n.get<std::uint64_t>() + 1;
  }
  out["blocks"] = std::move(blocks);
  out["branches"] = std::move(branches);
}
} // namespace

Expected<json> stage_samples_json(const std::vector<perf::SamplerEvent>& events,
                                  const StageSamplingRequest& request, perf::SampleSet set,
                                  const std::vector<jit::FunctionRange>& ranges) {
  json out;
  out["events"] = json::array();
  for (const auto& e : events)
    out["events"].push_back(perf::to_json(e));
  out["frequency_hz"] = request.frequency_hz;
  out["recorded"] = set.samples.size();
  out["lost_samples"] = set.stats.lost_samples;
  out["lost_records"] = set.stats.lost_records;
  out["throttles"] = set.stats.throttles;
  set.samples = thin_samples(std::move(set.samples), request.max_samples);
  out["attributed"] = set.samples.size();
  std::vector<perf::FunctionRange> perf_ranges;
  perf_ranges.reserve(ranges.size());
  for (const auto& r : ranges)
    perf_ranges.push_back({r.name, r.start, r.size});
  FDO_TRY(perf::Attribution a, perf::attribute(set, perf_ranges));
  json functions = json::object();
  for (const auto& f : a.functions)
    if (f.samples != 0) functions[f.name] = per_event(f, a.events);
  out["functions"] = std::move(functions);
  out["outside_jit"] = per_event(a.outside_jit, a.events);
  block_tallies(set, ranges, out);
  return out;
}

Expected<perf::Sampler*> StageSampler::get(const StageSamplingRequest& request) {
  if (sampler_ && current_ == request) return &*sampler_;
  sampler_.reset();
  current_.reset();
  perf::SamplerConfig config;
  config.events = request.events;
  config.frequency_hz = request.frequency_hz;
  config.branch_stack = perf::BranchStack::if_supported;
  FDO_TRY(perf::Sampler s, perf::Sampler::open(config, *sys_));
  sampler_.emplace(std::move(s));
  current_ = request;
  return &*sampler_;
}

} // namespace fdo::daemon
