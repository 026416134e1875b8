// Which PGO actions a compile mode asks of the PassBuilder pipeline
// (PGOOptions), and the indexed profile file they read. Kept apart from the
// rest of compile() so the pipeline's PGO wiring reads in one place:
//
//   instrumented     IRInstr                      (first round, docs/jit.md)
//   optimized        IRUse [+ CSIRUse]            (CSIRUse when the profile has
//                                                  context-sensitive counts)
//   cs_instrumented  IRUse + CSIRInstr            (second round over the
//                                                  optimized, inlined code)
#pragma once

#include "fdo/util/profile.h"
#include "pgo.h"

#include <llvm/Support/Error.h>
#include <llvm/Support/PGOOptions.h>
#include <optional>
#include <string>
#include <vector>

namespace fdo::jit::detail {

struct PgoSetup {
  std::optional<llvm::PGOOptions> options; // nullopt: no PGO (plain)
  std::optional<ProfileFile> file;         // what IRUse reads; removed with this
};

// `profile` may be null only for plain and instrumented. Notes for the
// compile's diagnostics (a profile without counts, ...) go to `warnings`.
llvm::Expected<PgoSetup> pgo_setup(CompileMode mode, const ProfileDoc* profile,
                                   std::vector<std::string>& warnings);

// Whether `mode` adds counters the exec worker reads back.
bool instruments(CompileMode mode);

// Whether the profile holds context-sensitive counts an optimized compile
// applies (CSIRUse).
bool has_cs_counts(const ProfileDoc& profile);

} // namespace fdo::jit::detail
