#include "fdo/daemon/stage_sampling.h"

#include "fdo/perf/attribution.h"

#include <algorithm>

namespace fdo::daemon {

void BlockTallies::add(const BlockTallies& other) {
  for (const auto& [event, fns] : other.blocks)
    for (const auto& [fn, bs] : fns)
      for (const auto& [b, n] : bs)
        blocks[event][fn][b] += n;
  for (const auto& [fn, brs] : other.branches)
    for (const auto& [b, events] : brs)
      for (const auto& [event, n] : events)
        branches[fn][b][event] += n;
}

Status validate(const StageSamplingRequest& r) {
  if (r.events.empty())
    return make_error(Errc::invalid_argument,
                      "exec job: sampling.events must be a non-empty list of event names");
  for (const std::string& e : r.events)
    if (e.empty())
      return make_error(Errc::invalid_argument,
                        "exec job: sampling.events must hold non-empty names");
  if (r.frequency_hz == 0)
    return make_error(Errc::invalid_argument, "exec job: sampling.frequency_hz must be positive");
  if (r.max_samples == 0)
    return make_error(Errc::invalid_argument, "exec job: sampling.max_samples must be positive");
  return ok();
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
std::map<std::string, std::uint64_t> per_event(const perf::FunctionAttribution& f,
                                               const std::vector<std::string>& events) {
  std::map<std::string, std::uint64_t> out;
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

// Per-block and per-branch tallies (functions by PGO name).
BlockTallies block_tallies(const perf::SampleSet& set,
                           const std::vector<jit::FunctionRange>& ranges) {
  BlockTallies out;
  for (const perf::Sample& s : set.samples) {
    if (s.event >= set.events.size()) continue;
    const std::string& event = set.events[s.event];
    if (const jit::BlockRange* b = block_at(ranges, s.ip))
      ++out.blocks[event][b->function][static_cast<std::uint32_t>(b->block)];
    const jit::BlockRange* b = block_at(ranges, branch_address(s));
    if (b == nullptr || b->branch < 0) continue;
    ++out.branches[b->function][static_cast<std::uint32_t>(b->branch)][event];
  }
  return out;
}
} // namespace

Expected<StageSampleReport> stage_sample_report(const std::vector<perf::SamplerEvent>& events,
                                                const StageSamplingRequest& request,
                                                perf::SampleSet set,
                                                const std::vector<jit::FunctionRange>& ranges) {
  StageSampleReport out;
  out.events = events;
  out.frequency_hz = request.frequency_hz;
  out.recorded = set.samples.size();
  out.lost_samples = set.stats.lost_samples;
  out.lost_records = set.stats.lost_records;
  out.throttles = set.stats.throttles;
  set.samples = thin_samples(std::move(set.samples), request.max_samples);
  out.attributed = set.samples.size();
  std::vector<perf::FunctionRange> perf_ranges;
  perf_ranges.reserve(ranges.size());
  for (const auto& r : ranges)
    perf_ranges.push_back({r.name, r.start, r.size});
  FDO_TRY(perf::Attribution a, perf::attribute(set, perf_ranges));
  for (const auto& f : a.functions)
    if (f.samples != 0) out.functions[f.name] = per_event(f, a.events);
  out.outside_jit = per_event(a.outside_jit, a.events);
  out.tallies = block_tallies(set, ranges);
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
