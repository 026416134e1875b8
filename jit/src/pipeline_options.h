// The profile's knobs as PassBuilder settings, shared by compile() and
// annotate() so both build the same pipeline (and so the same pre-inliner
// runs before PGOInstrumentationUse in both).
#pragma once

#include "fdo/util/profile.h"

#include <llvm/Passes/OptimizationLevel.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/CodeGen.h>

namespace fdo::jit::detail {

llvm::OptimizationLevel optimization_level(const fdo::Knobs& k);
llvm::CodeGenOpt::Level codegen_level(const fdo::Knobs& k);
llvm::PipelineTuningOptions tuning_options(const fdo::Knobs& k);

} // namespace fdo::jit::detail
