// The profile's knobs as PassBuilder settings, shared by compile() and
// annotate() so both build the same pipeline (and so the same pre-inliner
// runs before PGOInstrumentationUse in both).
#pragma once

#include "fdo/util/profile.h"

#include <llvm/IR/Module.h>
#include <llvm/IR/PassInstrumentation.h>
#include <llvm/Passes/OptimizationLevel.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/CodeGen.h>
#include <llvm/Support/PGOOptions.h>
#include <llvm/Target/TargetMachine.h>
#include <optional>

namespace fdo::jit::detail {

llvm::OptimizationLevel optimization_level(const fdo::Knobs& k);
llvm::CodeGenOpt::Level codegen_level(const fdo::Knobs& k);
llvm::PipelineTuningOptions tuning_options(const fdo::Knobs& k);

// Runs the O-level pipeline on `m` with analysis managers of its own and a
// pass builder on `tm`; `pic` carries the callbacks that pick which passes
// run (the cuts of partition.h and pipeline_prefix.h).
void run_default_pipeline(llvm::Module& m, llvm::TargetMachine& tm,
                          const llvm::PipelineTuningOptions& tuning,
                          const std::optional<llvm::PGOOptions>& pgo,
                          llvm::PassInstrumentationCallbacks& pic, llvm::OptimizationLevel level);

} // namespace fdo::jit::detail
