// What one stage observed, typed: the exec worker builds it around the call
// it ran and sends it back in its reply (exec_messages.h); the in-process path
// builds it from a runtime's feedback batch and what fdod sampled on the
// runtime's threads (lease_sampling.h). The feedback loop reads both through
// the same functions (feedback_loop.h: observe), never a JSON tree.
#pragma once

#include "fdo/jit/loader.h"
#include "fdo/jit/types.h"
#include "fdo/perf/counters.h"
#include "fdo/perf/sampler.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace fdo::daemon {

// Samples per IR block and per conditional branch (docs/perf.md, "Attribution
// to IR branches"). Functions by PGO name; blocks and branches by their index
// in the canonical IR.
struct BlockTallies {
  // event -> function -> block -> samples (every sampled event, the clock included)
  std::map<std::string, std::map<std::string, std::map<std::uint32_t, std::uint64_t>>> blocks;
  // function -> branch -> event -> samples
  std::map<std::string, std::map<std::uint32_t, std::map<std::string, std::uint64_t>>> branches;

  bool empty() const { return blocks.empty() && branches.empty(); }
  void add(const BlockTallies& other);
  bool operator==(const BlockTallies&) const = default;
};

// What sampling saw during one stage (stage_sampling.h builds it).
struct StageSampleReport {
  std::vector<perf::SamplerEvent> events; // as the sampler opened them
  std::uint64_t frequency_hz = 0;
  std::uint64_t recorded = 0;   // samples read from the rings
  std::uint64_t attributed = 0; // kept after thinning to the per-stage budget
  std::uint64_t lost_samples = 0;
  std::uint64_t lost_records = 0;
  std::uint64_t throttles = 0;
  // Loaded symbol -> event -> samples; only functions with a sample.
  std::map<std::string, std::map<std::string, std::uint64_t>> functions;
  // event -> samples outside the program's code.
  std::map<std::string, std::uint64_t> outside_jit;
  BlockTallies tallies;
  // Non-empty: the sampler could not be opened or its samples attributed
  // (why); everything above is then empty.
  std::string error;
  bool operator==(const StageSampleReport&) const = default;
};

struct StageObservation {
  std::uint64_t ret = 0; // the entry's return value, as its 64-bit slot
  // The program called exit(n) on the entry's thread (exit_catch.h): `ret` is meaningless.
  std::optional<std::int32_t> exited;
  std::uint64_t exec_ns = 0; // wall time of the stage's calls
  // The counted call (exec worker); none for in-process batches.
  std::optional<perf::Measurement> measurement;
  // Instrumentation counters by PGO name (instrumented outputs).
  std::map<std::string, std::vector<std::uint64_t>> counts;
  // Value profiles by PGO name (instrumented outputs; sites that saw nothing left out).
  std::map<std::string, jit::FunctionValueProfile> values;
  // Sampled stages only.
  std::optional<StageSampleReport> samples;
  // The loaded object's functions (name, start, size): sent until the daemon
  // knows them (StageMetadata::functions_with_code).
  std::optional<std::vector<jit::FunctionRange>> function_ranges;
  // Sizes of the argument buffers sent back after the reply (return_buffers).
  std::vector<std::uint64_t> buffer_sizes;
};

} // namespace fdo::daemon
