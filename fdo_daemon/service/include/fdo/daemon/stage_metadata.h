// A compiled output's metadata as a stage uses it: decoded once per cached
// entry and kept with it (cache::Entry::decoded), shared by every stage that
// runs the entry and by the in-process leases of it, instead of being parsed
// from the entry's JSON text for each stage.
#pragma once

#include "fdo/cache/entry.h"
#include "fdo/daemon/policy.h"
#include "fdo/jit/compiler.h"

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

namespace fdo::daemon {

struct StageMetadata {
  // As the compiler wrote it: what an exec job that carries the object sends.
  nlohmann::json json;
  jit::CompileResult compile; // object empty
  // Per instrumented function (PGO name): its CFG hash and number of counters.
  std::map<std::string, std::uint64_t> cfg_hashes;
  std::map<std::string, std::uint32_t> counter_sizes;
  // Optimized outputs: the weights the profile gave each function's branches.
  std::map<std::string, std::vector<BranchStat>> branch_weights;
};

using StageMetadataRef = std::shared_ptr<const StageMetadata>;

// Decodes metadata text (Errc::corrupt naming `what` when it does not parse).
Expected<StageMetadataRef> decode_stage_metadata(std::string_view text, const std::string& what);

// The entry's metadata, decoded on first use and then kept with the entry.
Expected<StageMetadataRef> stage_metadata_of(const cache::Entry& entry);

} // namespace fdo::daemon
