// Samples per IR block and per conditional branch (docs/perf.md, "Attribution
// to IR branches"): a stage's BlockTallies (stage_observation.h), summed over the stages of one
// profile version, recorded in the profile document (hardware.sampling.blocks / .branches) and
// turned into the policy's per-branch statistics. Pure logic, no I/O.
#pragma once

#include "fdo/daemon/policy.h"
#include "fdo/daemon/stage_observation.h"

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace fdo::daemon {

// Whether a sampled event counts mispredicted branches: the generic
// `branch-misses` or a PMU event whose name says so (BR_MISP_*, *MISPREDICTED*).
bool is_branch_miss_event(std::string_view event);

// Whether `tallies` holds a branch-miss sample on any branch: all that
// branch_stats reads of them.
bool has_branch_misses(const BlockTallies& tallies);

// Per-branch statistics for the policy: the optimized compile's weights (by
// function) with the branch-miss samples attributed to each branch.
std::map<std::string, std::vector<BranchStat>>
branch_stats(const std::map<std::string, std::vector<BranchStat>>& weights,
             const BlockTallies& tallies);

// The profile document's members hardware.sampling.blocks and .branches
// (schemas/profile.schema.json).
nlohmann::json blocks_record(const BlockTallies& tallies);
nlohmann::json branches_record(const BlockTallies& tallies,
                               const std::map<std::string, std::vector<BranchStat>>& weights);

} // namespace fdo::daemon
