// Sampling of one stage in the exec worker (docs/perf.md, "Sampling during
// stages"): the exec job's "sampling" header asks for events, a frequency and
// a per-stage budget of attributed samples; the worker keeps one perf::Sampler
// open across stages (reopened when the request changes), runs it around the
// entry call and attributes the samples to the loaded program's functions.
// Samples outside the program's code are counted in "outside_jit", never
// dropped; samples past the budget are thinned evenly and counted.
#pragma once

#include "fdo/jit/types.h"
#include "fdo/perf/sampler.h"
#include "fdo/util/expected.h"

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace fdo::daemon {

struct StageSamplingRequest {
  std::vector<std::string> events;
  std::uint64_t frequency_hz = 1000;
  std::uint64_t max_samples = 10000; // attributed per stage; the rest thinned evenly

  bool operator==(const StageSamplingRequest&) const = default;
  nlohmann::json to_json() const;
};

// The exec header's "sampling" member: absent or null means no sampling.
// Errors (invalid_argument) name the bad field.
Expected<std::optional<StageSamplingRequest>> sampling_request_from(const nlohmann::json& header);

// Keeps `max` of `samples` (all when fewer), chosen evenly over the sequence
// so that every event and every part of the stage keeps its proportion.
std::vector<perf::Sample> thin_samples(std::vector<perf::Sample> samples, std::uint64_t max);

// The stage's samples as the exec reply's "samples" member:
//   {"events":[{name,status,errno,reason,branch_stack}], "frequency_hz",
//    "recorded", "attributed", "lost_samples", "lost_records", "throttles",
//    "functions":{symbol:{event:samples}}, "outside_jit":{event:samples},
//    "blocks":{event:{fn:{block:samples}}}, "branches":{fn:{branch:{event:samples}}}}
// Only functions with at least one sample are listed. Blocks and branches
// (docs/perf.md, "Attribution to IR branches") name IR functions by PGO name,
// blocks and conditional branches by their index in the canonical IR, from
// the ranges' block maps; `ranges` are sorted by start, as the loader gives them.
Expected<nlohmann::json> stage_samples_json(const std::vector<perf::SamplerEvent>& events,
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
