// `fdoctl profile diff`: what changed between two versions of a profile,
// function by function.
//
// PGO counters are per-edge/per-block execution counts whose raw size depends
// on how long the program ran, so they are compared *normalised*: a counter's
// weight is its share of its function's counts (count / sum of the function's
// counters). A counter is listed when its weight moved by at least
// `min_weight_change` (absolute, 0..1). A function's hotness is its share of
// all counts in the profile; it is reported when that moved by the same
// threshold. Knobs, the CFG hash, the counter layout, the !unpredictable
// branch set and the code layout (hot/cold placement) are compared exactly;
// the context-sensitive counts (cs_functions) are summarized per function.
#pragma once

#include "fdo/util/profile.h"

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace fdo::ctl {

struct DiffOptions {
  double min_weight_change = 0.01;
  // List at most this many counters per function (largest moves first); the
  // count of changed counters is always complete.
  std::size_t max_counters_per_function = 16;
};

struct KnobChange {
  std::string knob;             // opt_level, size_level, unroll, vectorize, inline_threshold, mode
  nlohmann::json before, after; // null: unset
};

struct CounterChange {
  std::size_t index = 0;
  std::uint64_t before = 0, after = 0;
  double weight_before = 0, weight_after = 0;
};

enum class FunctionChange { added, removed, changed, unchanged };
std::string_view to_string(FunctionChange c);

struct FunctionDiff {
  std::string name;        // PGO name (the profile's key)
  std::string source_name; // name in the submitted program; empty when unrecorded
  FunctionChange change = FunctionChange::unchanged;
  std::uint64_t cfg_hash_before = 0, cfg_hash_after = 0;
  std::size_t counters_before = 0, counters_after = 0;
  std::uint64_t total_before = 0, total_after = 0;
  double share_before = 0, share_after = 0; // of all counts in the profile
  bool layout_changed = false;              // cfg hash or counter count differ
  bool hotness_changed = false;
  std::size_t weights_changed = 0;     // counters over the threshold (all of them)
  std::vector<CounterChange> counters; // the largest moves, at most max_counters_per_function
  double max_weight_change = 0;
  std::vector<std::uint32_t> unpredictable_added, unpredictable_removed;
  // Placement of the function's code (docs/perf.md, "i-cache layout").
  FunctionLayout code_layout_before = FunctionLayout::normal;
  FunctionLayout code_layout_after = FunctionLayout::normal;
  // Arguments whose most frequent value (what value specialization binds)
  // differs: "arg 1: 4 (94%) -> 7 (99%)", "-" for a side without values.
  std::vector<std::string> arg_values_changed;
};

// One function of cs_functions whose context-sensitive counts differ (or that
// is on one side only): its counters and the sum of its counts on each side.
struct CsFunctionDiff {
  std::string name;                   // PGO name
  std::string shown;                  // source name, the PGO name beside it when they differ
  bool before = false, after = false; // present on that side
  std::size_t counters_before = 0, counters_after = 0;
  std::uint64_t total_before = 0, total_after = 0;
};

struct ProfileDiff {
  std::vector<KnobChange> knobs;
  std::vector<FunctionDiff> functions; // changed/added/removed first (by name), then unchanged
  std::uint64_t total_before = 0, total_after = 0;
  std::size_t added = 0, removed = 0, changed = 0, unchanged = 0;
  bool compile_affecting_equal = false; // nothing the compiler sees differs
  // Context-sensitive counts: functions and counts on each side, and the
  // functions whose counts differ (by name).
  std::size_t cs_functions_before = 0, cs_functions_after = 0;
  std::uint64_t cs_total_before = 0, cs_total_after = 0;
  std::vector<CsFunctionDiff> cs_functions;
};

ProfileDiff diff_profiles(const ProfileDoc& before, const ProfileDoc& after,
                          const DiffOptions& options = {});

nlohmann::json to_json(const ProfileDiff& diff);

enum class Unchanged { omit, list };
// Human report; Unchanged::list also names the unchanged functions.
std::string render_diff(const ProfileDiff& diff, const std::string& title,
                        Unchanged unchanged = Unchanged::omit);

} // namespace fdo::ctl
