// Attribution of samples to JIT-compiled functions by address range. The JIT
// loader supplies the ranges; samples outside every range (runtime, libc, the
// worker itself) land in the outside_jit bucket.
#pragma once

#include "fdo/perf/sampler.h"
#include "fdo/util/expected.h"

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace fdo::perf {

struct FunctionRange {
  std::string name;
  std::uint64_t start = 0;
  std::uint64_t size = 0;
};

// Counts from the same window as the samples, for rates.
struct ExecCounts {
  std::optional<std::uint64_t> instructions; // instructions retired in the window
  std::optional<std::uint64_t> executions;   // entry calls in the window
};

struct EventShare {
  std::uint64_t samples = 0;
  // Sum of the samples' periods: an estimate of how many events happened here.
  std::uint64_t estimated_events = 0;
  double share = 0.0; // samples here / all samples of this event (incl. outside_jit)
  // estimated_events per 1000 instructions of the whole window (this function's
  // contribution to the program's MPKI), when ExecCounts::instructions is given.
  std::optional<double> per_kilo_instructions;
  // estimated_events per execution, when ExecCounts::executions is given.
  std::optional<double> per_execution;
};

struct FunctionAttribution {
  std::string name;
  std::uint64_t start = 0;
  std::uint64_t size = 0;
  std::vector<EventShare> events; // parallel to Attribution::events
  std::uint64_t samples = 0;      // all events
};

struct Attribution {
  std::vector<std::string> events;
  std::vector<FunctionAttribution> functions; // every range, by address
  FunctionAttribution outside_jit;            // name "[outside_jit]"
  std::uint64_t samples = 0;
  std::uint64_t lost_samples = 0;
  std::uint64_t lost_records = 0;

  const FunctionAttribution* find(std::string_view name) const;
};

// Errors (invalid_argument, naming the culprits): overlapping ranges, a range
// whose end overflows, a sample whose event index has no name.
// Zero-size ranges are kept (they can never receive a sample).
Expected<Attribution> attribute(const SampleSet& samples, const std::vector<FunctionRange>& ranges,
                                const ExecCounts& counts = {});

nlohmann::json to_json(const Attribution& attribution);

} // namespace fdo::perf
