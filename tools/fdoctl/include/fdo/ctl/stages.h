// `fdoctl run`: one row per stage from execute's result, and the summary.
//
// Speed-ups compare *compiled outputs*, not single stages, because one
// execution is noisy: stages are grouped into runs of consecutive stages that
// executed the same compiled output (same storage key), and each group's
// figure is the median exec time of its stages. "Last over stage 0" is
// median(group of stage 0) / median(group of the last stage); "last over the
// first optimized stage" is median(group of the first optimized stage) /
// median(group of the last stage). The single-stage ratios are reported too.
#pragma once

#include "fdo/ctl/table.h"
#include "fdo/util/expected.h"

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace fdo::ctl {

struct StageRow {
  std::int64_t number = 0;
  std::string outcome; // memory_hit, disk_hit, compiled, joined, tier_up_pending
  std::string reason;  // cache reason (new_program, profile_rewritten, cache_key, ...)
  std::string mode;    // instrumented, optimized, plain
  std::string storage_key;
  std::int64_t profile_version = 0;
  bool recompiled = false;
  double compile_ms = 0;
  std::uint64_t exec_ns = 0;
  // Hardware figures, present only when the exec worker counted them.
  std::optional<std::uint64_t> branch_misses, branch_instructions;
  // Why branch misses are missing ("no_pmu: ...", "not counted"), for n/a cells.
  std::string branch_misses_status;
  std::optional<std::int64_t> rewritten_from, rewritten_to;
  std::string policy;
  // The program's lifecycle phase after the stage ("-": an fdod that does not
  // report it) and the transitions the stage made, as "from->to (cause)".
  std::string phase = "-";
  std::vector<std::string> transitions;
  nlohmann::json value;
};

// execute's result -> a row; errors name the missing or mistyped field.
Expected<StageRow> stage_row(const nlohmann::json& execute_result);

// Cells for the per-stage table, in the order of stage_columns().
std::vector<std::string> stage_cells(const StageRow& row);
std::vector<Column> stage_columns();

struct OutputGroup {
  std::string storage_key;
  std::string mode;
  std::int64_t profile_version = 0;
  std::int64_t first_stage = 0, last_stage = 0;
  std::size_t stages = 0;
  std::uint64_t median_exec_ns = 0;
};

struct Speedup {
  std::int64_t base_stage = 0;      // stage 0, or the first optimized stage
  std::uint64_t base_median_ns = 0; // median of the base stage's group
  std::uint64_t last_median_ns = 0; // median of the last stage's group
  double ratio = 0;                 // base_median / last_median
  std::uint64_t base_single_ns = 0, last_single_ns = 0;
  double single_ratio = 0;
  bool same_output = false; // base and last ran the same compiled output
};

struct RunSummary {
  std::size_t stages = 0;
  std::vector<OutputGroup> groups;
  std::size_t rewrites = 0;
  std::size_t recompiles = 0;
  std::optional<Speedup> over_stage0;
  std::optional<Speedup> over_first_optimized; // absent when no stage ran optimized
  bool values_agree = true;                    // every stage returned the same value
};

// Median of a non-empty set (mean of the middle two for an even count).
std::uint64_t median(std::vector<std::uint64_t> v);

RunSummary summarize(const std::vector<StageRow>& rows);
nlohmann::json to_json(const RunSummary& summary);
std::string render_summary(const RunSummary& summary, const std::vector<StageRow>& rows);

} // namespace fdo::ctl
