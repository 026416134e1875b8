// Sampled time share per function, and the drift rule that re-profiles a
// program whose workload moved (docs/perf.md, "Drift"). Pure logic over a
// stage's sampled observation (stage_observation.h); no I/O.
//
// Functions are named by PGO name where the loaded symbol maps to one (the
// name ProfileDoc::functions uses), else by symbol. The clock event (cpu-clock
// or task-clock) gives time shares; the other sampled events (branch-misses,
// L1-icache-load-misses, where a PMU exists) give miss samples per function.
#pragma once

#include "fdo/daemon/policy_config.h"
#include "fdo/daemon/stage_observation.h"
#include "fdo/util/profile.h"

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>

namespace fdo::daemon {

struct StageSamples {
  bool present = false;                       // the stage was sampled and the clock recorded
  std::string clock_event;                    // "cpu-clock" or "task-clock"
  std::map<std::string, std::uint64_t> clock; // function -> clock samples
  std::uint64_t clock_outside = 0;            // clock samples outside program code
  // Non-clock events: event -> function -> samples.
  std::map<std::string, std::map<std::string, std::uint64_t>> misses;
  std::set<std::string> functions; // every function with code in the loaded object
};

// The PGO name of each loaded symbol of one program: the same name, or
// "<file>:<symbol>" for a local function. Built once per compiled output
// (StageMetadata keeps it), looked up per sampled function.
class PgoNames {
public:
  PgoNames() = default;
  // `pgo_names`: the PGO names of the program's defined functions (keys of
  // the compile's source_names).
  PgoNames(const std::map<std::string, std::string>& pgo_names); // NOLINT: implicit by design
  // The PGO name `symbol` stands for; `symbol` itself when none does.
  const std::string& of(const std::string& symbol) const;

private:
  std::unordered_map<std::string, std::string> by_symbol_;
};

// An observation without usable samples (none, an error, no clock event
// available) gives present=false. The functions with code come from its
// function ranges, or, when it has none (the worker was not asked for them
// again), from `known_functions`.
StageSamples stage_samples_from(const StageObservation& observation, const PgoNames& pgo_names,
                                const std::set<std::string>* known_functions = nullptr);

// The most recent sampled stages of one profile version.
class TimeShareWindow {
public:
  // Adds a stage; keeps the most recent ones that make `keep` stages.
  void add(const StageSamples& stage, std::size_t keep);
  // Starts the window (after a restart) from `sum`, the samples of `stages`
  // sampled stages summed: one entry standing for all of them, dropped once
  // `keep` newer stages are in.
  void restore(const StageSamples& sum, std::size_t stages);
  void clear() { stages_.clear(); }
  std::size_t stages() const;            // stages the window stands for
  std::uint64_t program_samples() const; // clock samples in program code
  std::uint64_t outside_samples() const;
  // Clock samples per function / all of them in program code (sums to 1).
  std::map<std::string, double> shares() const;
  // Functions with code in every stage of the window.
  std::set<std::string> functions() const;
  // Miss samples: event -> function -> samples, summed over the window.
  std::map<std::string, std::map<std::string, std::uint64_t>> misses() const;

private:
  struct Entry {
    StageSamples samples;
    std::size_t stages = 1;
  };
  std::deque<Entry> stages_;
};

// The window across a restart (docs/perf.md, "Drift"). Every sampled stage
// also goes, as counters under "sampled|" keys, into its feedback row, which
// the store keeps summed per profile version; a daemon that meets the version
// again (after a restart) starts its window from that sum.
void add_sample_counters(const StageSamples& stage, std::map<std::string, std::uint64_t>& counters);
struct SampledTotals {
  StageSamples sum;       // present, clock and misses summed, functions with code in every stage
  std::size_t stages = 0; // sampled stages summed
};
// Moves the "sampled|" keys out of `counters` (so the rest are hardware
// events again); what they sum, or nullopt when there are none (rows written
// before they existed, or no sampled stage).
std::optional<SampledTotals> take_sample_counters(std::map<std::string, std::uint64_t>& counters);

// Total-variation distance (0..1) between the recorded and the measured
// shares over the functions that have code now (`present`): a function the
// optimizer inlined away is not a shift of the workload. Both sides are
// renormalised over those functions; 0 when either side has nothing there.
double time_share_drift(const std::map<std::string, double>& recorded,
                        const std::map<std::string, double>& measured,
                        const std::set<std::string>& present);

// The profile document's record of the window (ProfileDoc::hardware
// ["sampling"]): {"event", "stages", "samples", "outside_samples",
// "time_share":{fn:share}, "misses":{event:{fn:samples}}}.
nlohmann::json sampling_record(const TimeShareWindow& window, const std::string& clock_event);
// The recorded time shares of a document, if it has them.
std::optional<std::map<std::string, double>> recorded_time_shares(const ProfileDoc& doc);

struct ReprofileDecision {
  bool reprofile = false;
  std::optional<double> drift; // when it could be judged
  std::string reason;          // empty when there was nothing to judge
};

// Whether the window is full and holds enough clock samples to be judged.
bool window_judgeable(const PolicyConfig& config, const TimeShareWindow& window);

// Re-profile when the current profile was made from counts (its code is
// optimized), the window is full with enough samples and its drift from
// `baseline` reaches the threshold. `baseline`: the shares the window's build
// is compared with (null: the shares the profile recorded,
// recorded_time_shares). The caller checks pins and rate caps (the
// program's lifecycle approves the rewrite).
ReprofileDecision decide_reprofile(const PolicyConfig& config, const ProfileDoc& current,
                                   const TimeShareWindow& window,
                                   const std::map<std::string, double>* baseline = nullptr);

// The document that makes the next compile instrumented again: the current
// one with every function's counts (and value profiles) dropped, knobs,
// unpredictable marks and bookkeeping kept. (The feedback loop records the
// version it re-profiles as its reprofile_of.)
ProfileDoc reprofile_doc(const ProfileDoc& current);

} // namespace fdo::daemon
