// Sampling of one stage in the exec worker (docs/perf.md, "Sampling during
// stages"): the exec job's sampling request (exec_messages.h) asks for events,
// a frequency and a per-stage budget of attributed samples; the worker keeps one perf::Sampler
// open across stages (reopened when the request changes), runs it around the
// entry call and attributes the samples to the loaded program's functions.
// Samples outside the program's code are counted in "outside_jit", never
// dropped; samples past the budget are thinned evenly and counted.
#pragma once

#include "fdo/daemon/stage_observation.h"
#include "fdo/jit/types.h"
#include "fdo/perf/sampler.h"
#include "fdo/util/expected.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace fdo::daemon {

struct StageSamplingRequest {
  std::vector<std::string> events;
  std::uint64_t frequency_hz = 1000;
  std::uint64_t max_samples = 10000; // attributed per stage; the rest thinned evenly

  bool operator==(const StageSamplingRequest&) const = default;
};

// Errc::invalid_argument naming the bad field: no events, an empty event
// name, a zero frequency or budget.
Status validate(const StageSamplingRequest& request);

// Keeps `max` of `samples` (all when fewer), chosen evenly over the sequence
// so that every event and every part of the stage keeps its proportion.
std::vector<perf::Sample> thin_samples(std::vector<perf::Sample> samples, std::uint64_t max);

// The stage's samples, attributed: clock and other events per function of
// the loaded program (only functions with at least one sample) and outside
// it, and per IR block and branch (docs/perf.md, "Attribution to IR
// branches": IR functions by PGO name, blocks and conditional branches by
// their index in the canonical IR, from the ranges' block maps). `ranges` are
// sorted by start, as the loader gives them; overlapping ones are an error.
Expected<StageSampleReport> stage_sample_report(const std::vector<perf::SamplerEvent>& events,
                                                const StageSamplingRequest& request,
                                                perf::SampleSet set,
                                                const std::vector<jit::FunctionRange>& ranges);

class StageSampler {
public:
  explicit StageSampler(perf::Syscalls& sys = perf::Syscalls::real()) : sys_(&sys) {}

  // The sampler for `request`, opened (or reopened when the request changed).
  // Errors only for a request the sampler refuses (its message names why).
  Expected<perf::Sampler*> get(const StageSamplingRequest& request);

private:
  perf::Syscalls* sys_;
  std::optional<StageSamplingRequest> current_;
  std::optional<perf::Sampler> sampler_;
};

} // namespace fdo::daemon
