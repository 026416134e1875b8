// Samples per IR block and per conditional branch (docs/perf.md, "Attribution
// to IR branches"): what the exec worker's "samples" reply says about blocks
// and branches, summed over the stages of one profile version, recorded in the
// profile document (hardware.sampling.blocks / .branches) and turned into the
// policy's per-branch statistics. Pure logic, no I/O.
#pragma once

#include "fdo/daemon/policy.h"

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace fdo::daemon {

// Functions by PGO name; blocks and branches by their index in the canonical IR.
struct BlockTallies {
  // event -> function -> block -> samples (every sampled event, the clock included)
  std::map<std::string, std::map<std::string, std::map<std::uint32_t, std::uint64_t>>> blocks;
  // function -> branch -> event -> samples
  std::map<std::string, std::map<std::uint32_t, std::map<std::string, std::uint64_t>>> branches;

  bool empty() const { return blocks.empty() && branches.empty(); }
  void add(const BlockTallies& other);
};

// The reply's samples.blocks / samples.branches; malformed parts are skipped.
BlockTallies block_tallies_from(const nlohmann::json& exec_reply);

// Whether a sampled event counts mispredicted branches: the generic
// `branch-misses` or a PMU event whose name says so (BR_MISP_*, *MISPREDICTED*).
bool is_branch_miss_event(std::string_view event);

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
