// A compiled output's metadata as a stage uses it: decoded once per cached
// entry and kept with it (cache::Entry::decoded), shared by every stage that
// runs the entry and by the in-process leases of it, instead of being parsed
// from the entry's JSON text for each stage.
#pragma once

#include "fdo/cache/entry.h"
#include "fdo/daemon/policy.h"
#include "fdo/daemon/time_share.h"
#include "fdo/jit/compiler.h"

#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
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
  // Loaded symbol -> PGO name, for sampled stages (time_share.h).
  PgoNames pgo_names;
  // The functions with code in the linked object (StageSamples::functions),
  // learnt from the first sampled stage's function ranges; later stages do
  // not ask the exec worker for them again.
  class FunctionSet {
  public:
    FunctionSet() = default;
    FunctionSet(const FunctionSet& o) : set_(o.get()) {}
    FunctionSet& operator=(const FunctionSet& o) {
      auto taken = o.get();
      std::lock_guard lock(mu_);
      set_ = std::move(taken);
      return *this;
    }
    std::shared_ptr<const std::set<std::string>> get() const {
      std::lock_guard lock(mu_);
      return set_;
    }
    void set(std::set<std::string> functions) const {
      auto made = std::make_shared<const std::set<std::string>>(std::move(functions));
      std::lock_guard lock(mu_);
      if (!set_) set_ = std::move(made);
    }

  private:
    mutable std::mutex mu_;
    mutable std::shared_ptr<const std::set<std::string>> set_;
  };
  FunctionSet functions_with_code;
};

using StageMetadataRef = std::shared_ptr<const StageMetadata>;

// Decodes metadata text (Errc::corrupt naming `what` when it does not parse).
Expected<StageMetadataRef> decode_stage_metadata(std::string_view text, const std::string& what);

// The entry's metadata, decoded on first use and then kept with the entry.
Expected<StageMetadataRef> stage_metadata_of(const cache::Entry& entry);

} // namespace fdo::daemon
