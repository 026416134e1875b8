#include "pipeline_options.h"

#include <llvm/Analysis/CGSCCPassManager.h>
#include <llvm/Analysis/LoopAnalysisManager.h>
#include <llvm/IR/PassManager.h>

namespace fdo::jit::detail {

// Knobs -> PassBuilder level. Os/Oz are O2 with a size bias in LLVM, so a
// size level wins over opt_level (except O0).
llvm::OptimizationLevel optimization_level(const fdo::Knobs& k) {
  if (k.opt_level <= 0) return llvm::OptimizationLevel::O0;
  if (k.size_level == 1) return llvm::OptimizationLevel::Os;
  if (k.size_level >= 2) return llvm::OptimizationLevel::Oz;
  if (k.opt_level == 1) return llvm::OptimizationLevel::O1;
  if (k.opt_level == 2) return llvm::OptimizationLevel::O2;
  return llvm::OptimizationLevel::O3;
}

llvm::CodeGenOpt::Level codegen_level(const fdo::Knobs& k) {
  if (k.opt_level <= 0) return llvm::CodeGenOpt::None;
  if (k.opt_level == 1) return llvm::CodeGenOpt::Less;
  if (k.opt_level == 2 || k.size_level > 0) return llvm::CodeGenOpt::Default;
  return llvm::CodeGenOpt::Aggressive;
}

// Mirrors clang's defaults (unrolling and vectorisation from -O2, no
// vectorisation at -Oz), then lets the knobs switch them off.
llvm::PipelineTuningOptions tuning_options(const fdo::Knobs& k) {
  llvm::PipelineTuningOptions pto;
  const bool o2_or_more = k.opt_level >= 2;
  pto.LoopUnrolling = k.unroll && o2_or_more;
  pto.LoopInterleaving = k.unroll && o2_or_more;
  pto.LoopVectorization = k.vectorize && o2_or_more && k.size_level < 2;
  pto.SLPVectorization = k.vectorize && o2_or_more && k.size_level < 2;
  if (k.inline_threshold) pto.InlinerThreshold = *k.inline_threshold;
  // The call-graph profile only guides a static linker's function ordering,
  // and its section (.llvm.call-graph-profile, SHT_REL relocations) is one
  // JITLink refuses.
  pto.CallGraphProfile = false;
  return pto;
}

void run_default_pipeline(llvm::Module& m, llvm::TargetMachine& tm,
                          const llvm::PipelineTuningOptions& tuning,
                          const std::optional<llvm::PGOOptions>& pgo,
                          llvm::PassInstrumentationCallbacks& pic, llvm::OptimizationLevel level) {
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PassBuilder pb(&tm, tuning, pgo, &pic);
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  llvm::ModulePassManager mpm = pb.buildPerModuleDefaultPipeline(level);
  mpm.run(m, mam);
}

} // namespace fdo::jit::detail
