// Code the profile saw run (nearly) never, compiled cheaply (optimized mode,
// knob cold_code = baseline, the default), as a tiered JIT leaves code it has
// not seen run to its baseline tier (docs/jit.md, "Cold code"). The baseline
// set is the functions that together did at most kBaselineWorkShare of the
// profiled work (a function's work: each block's profiled count times its
// instructions), smallest first — every function profiled at 0 calls, and
// those that ran a few times around the program's loops. They get no
// optimization passes and the fast instruction selector: marked `optnone
// noinline` (codegen then takes its -O0 path), placed with the unlikely
// text, and the pipeline's optional passes skip them. Functions the program
// marks alwaysinline, optsize or minsize (or that the profile's i-cache
// layout compiles for size), and functions without a profiled entry count
// (not in the profile: new code), are compiled as before.
#pragma once

#include <cstddef>
#include <llvm/IR/Module.h>
#include <llvm/IR/PassInstrumentation.h>
#include <unordered_set>

namespace fdo::jit::detail {

// The share of the profiled work the baseline functions may have done
// together: even at several times slower, they cost the program a few
// hundredths of a per cent of its time on the profiled workload.
inline constexpr double kBaselineWorkShare = 1e-4;

class ColdFunctions {
public:
  // Marks the module's cold functions; call once the profile's counts are on
  // the IR (after PGOInstrumentationUse). Returns how many were marked.
  std::size_t mark(llvm::Module& m);
  // Takes the functions an earlier mark() marked in the module this one was
  // split from (a part of a partitioned compile, in a context of its own).
  void adopt(const llvm::Module& m);
  // Makes the pass pipeline skip its optional passes over marked functions
  // (and loops in them, and call graph SCCs of marked functions only). This
  // object must outlive the pipeline's run.
  void register_callbacks(llvm::PassInstrumentationCallbacks& pic);

private:
  bool skips(llvm::Any ir) const;
  std::unordered_set<const llvm::Function*> cold_;
};

} // namespace fdo::jit::detail
