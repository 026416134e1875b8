// Incremental recompiles (docs/jit.md, "Incremental recompiles"): what a
// part of a partitioned compile is keyed by, so that a later compile of the
// same program can take a part's object from an earlier one when the part's
// input — its code, the profile's annotations on it and on the functions it
// imports, and the compile's settings — is the same.
#pragma once

#include "fdo/jit/compiler.h"

#include <llvm/ADT/StringRef.h>
#include <llvm/Analysis/ProfileSummaryInfo.h>
#include <llvm/IR/Module.h>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace fdo::jit::detail {

// Replaces the module's profile summary (if any) with what
// ProfileSummaryInfo reads of it in fdo's pipelines: the detailed entries of
// the hot, cold, size-optimization and function-splitting cutoffs (99%,
// 99.9999%, 95%, 99.995%), each
// count rounded down to a power of two and each count of counters kept only
// on the same side of the working-set thresholds it is compared with; the
// totals and maxima, read by nothing after the cut, are zero. Every part
// carries the summary, and an exact one changes with any count anywhere in
// the program: reduced so, a rewrite that moves a few functions' counts
// leaves the other parts' input — and so their keys — unchanged. The hot and
// cold thresholds then lie up to 2x lower than the exact ones.
void round_profile_summary(llvm::Module& m);

// Rewrites the profile annotations of `copy`, a function a part imports
// (an available_externally copy of another part's function), to what the
// part's compile reads of them, so that a rewrite scaling the function's
// counts does not change the importing parts' input: its entry count becomes
// one count per class `psi` tells apart (zero, cold, neither, hot); its
// branches' weights keep their ratios at a fixed total; a call's count and
// its value profiles' counts scale with the entry count. The function's own
// part keeps the exact counts.
void normalize_import_profile(llvm::Function& copy, const llvm::ProfileSummaryInfo& psi);

// BLAKE3 hex over the profile's annotations in `part`: every function's
// entry count and the branch weights and value profiles of its
// instructions, and the module's summary. Two builds of a part with the same
// code whose slices differ were recompiled because the profile moved.
std::string profile_slice_hash(const llvm::Module& part);

// BLAKE3 hex over a part's bitcode and `settings` (everything else the
// compile of a part depends on: compiler identity, mode, knobs, entries).
std::string part_key(llvm::StringRef bitcode, const std::string& settings);

// Removes declarations nothing in `part` refers to (a part is cloned with a
// declaration of every global of the whole module): its bitcode, and so its
// key, then depends only on what it uses.
void drop_unused_declarations(llvm::Module& part);

// Removes the names of a part's local values (arguments, blocks,
// instructions). They record the history of the module the part was cut
// from, not its code: a name made unique takes the next free number in its
// function, so the same code cut from a module that ran the pipeline's
// prefix in memory, or from one read back from a held prefix
// (pipeline_prefix.h), would otherwise differ in names, and so in key.
void strip_local_names(llvm::Module& part);

// Everything besides its bitcode a part's compile depends on: the
// compiler's identity, the mode, the knobs, the block locations, the
// program's entries (whose thunks a part adds).
std::string part_settings(const CompileRequest& request, const std::vector<EntryInfo>& entries);

// The parts of one compile against the held parts of an earlier one: offer()
// is partition.h's ReusePart (called in part order on the splitting
// thread), finish() the builds once every part has its object.
class PartReuse {
public:
  PartReuse(std::span<const HeldPart> held, std::string settings)
      : held_(held), settings_(std::move(settings)) {}
  std::optional<std::string> offer(unsigned index, const llvm::Module& part,
                                   llvm::StringRef bitcode);
  std::vector<PartBuild> finish(std::span<const std::string> objects);

private:
  std::span<const HeldPart> held_;
  std::string settings_;
  std::vector<PartBuild> builds_;
};

} // namespace fdo::jit::detail
