// LLVM's IR-level PGO, wired for a JIT without compiler-rt: instrumentation
// (PGOInstrumentationGen + InstrProfiling lowering, counters exposed to the
// loader by name), profile use (indexed profile from a ProfileDoc through
// InstrProfWriter, applied with PGOInstrumentationUse), and the profile's
// per-branch !unpredictable marks.
#pragma once

#include "fdo/jit/types.h"
#include "fdo/util/profile.h"

#include <llvm/IR/Instructions.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/PassManager.h>
#include <llvm/Support/Error.h>
#include <llvm/Support/MemoryBuffer.h>
#include <memory>
#include <string>
#include <vector>

namespace fdo::jit::detail {

// Inserts PGO counters into every defined function and lowers them to
// counter arrays. Returns each instrumented function's PGO name, CFG hash and
// counter count, in module order.
llvm::Expected<std::vector<InstrumentedFunction>> instrument(llvm::Module& m,
                                                             llvm::ModuleAnalysisManager& mam);

// After optimisation: gives the counter array of layout[i] the exported name
// kCountersPrefix + i (they are private after lowering), so the loader can
// find them. Fails if a counter array has disappeared.
llvm::Error expose_counters(llvm::Module& m, const std::vector<InstrumentedFunction>& layout);

// The profile's counts as an IR-level indexed profile (.profdata), or
// nullptr when it holds no counts.
llvm::Expected<std::unique_ptr<llvm::MemoryBuffer>>
write_indexed_profile(const fdo::ProfileDoc& profile);

// Applies the counts in `profile` as clang's -fprofile-use does. The indexed
// profile is written to a unique file in `temp_dir` (system temp dir when
// empty) and removed again. Returns false when the profile holds no counts
// (nothing was applied).
llvm::Expected<bool> apply_profile(llvm::Module& m, llvm::ModuleAnalysisManager& mam,
                                   const fdo::ProfileDoc& profile, const std::string& temp_dir);

// Puts !unpredictable on the conditional branches the profile lists, by
// index among the function's conditional `br` instructions in block order
// (docs/jit.md, "Branch index convention"). Indexes out of range are
// reported in `warnings` and skipped.
void mark_unpredictable(llvm::Module& m, const fdo::ProfileDoc& profile,
                        std::vector<std::string>& warnings);

// The conditional branches of `f`, in the branch index convention's order.
std::vector<llvm::BranchInst*> conditional_branches(llvm::Function& f);

} // namespace fdo::jit::detail
