// The pipeline's prefix (docs/jit.md, "The pipeline's prefix"): with PGO,
// the O-level pipeline runs an early cleanup, IPSCCP, GlobalOpt and a
// pre-inliner over the whole module before the profile's first pass
// (PGOInstrumentationGen or PGOInstrumentationUse). None of that reads a
// count, and the passes are the same whether the compile instruments or
// applies a profile; on a big program it is most of the serial share of a
// partitioned compile. A compile split at the inliner runs it apart, keeps
// the module as the prefix leaves it (bitcode) under a key of everything
// that reaches it, and a later compile of the same program with the same
// key starts from that bitcode instead.
#pragma once

#include "fdo/jit/compiler.h"

#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/PassInstrumentation.h>
#include <llvm/Passes/OptimizationLevel.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/PGOOptions.h>
#include <llvm/Target/TargetMachine.h>
#include <memory>
#include <optional>
#include <string>

namespace fdo::jit::detail {

// Skips the optional passes on one side of the pipeline's first PGO pass:
// `prefix` runs only those before it, `rest` only it and those after. The
// required passes (coroutine lowering, the always-inliner) run on both
// sides and do nothing the second time, as at the inliner's cut.
class PrefixCut {
public:
  enum class Side { prefix, rest };
  explicit PrefixCut(Side side) : side_(side) {}
  // This object must outlive the pipeline's run.
  void register_callbacks(llvm::PassInstrumentationCallbacks& pic);
  bool reached() const { return reached_; }

private:
  bool runs(llvm::StringRef pass);
  Side side_;
  bool reached_ = false;
};

// What the pipeline's construction takes besides the module.
struct PrefixPipeline {
  llvm::TargetMachine* tm = nullptr;
  llvm::PipelineTuningOptions tuning;
  std::optional<llvm::PGOOptions> pgo;
  llvm::OptimizationLevel level = llvm::OptimizationLevel::O2;
};

// The prefix's key: BLAKE3 hex over the module about to enter the pipeline
// (its bitcode: the program, and whatever fdo applied to it before the
// pipeline) and the settings that shape the prefix (compiler identity,
// optimization levels, tuning). Not the mode: an instrumented compile's
// prefix serves the program's optimized compiles.
std::string prefix_key(const llvm::Module& m, const fdo::Knobs& knobs);

// Brings `module` to where the prefix leaves it: from the held prefix when
// its key is `key` and its bitcode hashes to its bitcode_hash, else by
// running the prefix on it and writing it. Either way the module is then
// replaced by one read from the prefix's bitcode into `fresh`, a context
// that has seen no type of the program (in the submitted module's context
// its named struct types would come back renamed), so that a compile that
// ran the prefix and one that took it go on from the same module and build
// the same parts. Returns how it went; `bitcode` is filled when the prefix
// ran (what a later compile is offered), empty when the held one was taken.
llvm::Expected<PrefixBuild> bring_to_prefix(std::unique_ptr<llvm::Module>& module,
                                            llvm::LLVMContext& fresh,
                                            const PrefixPipeline& pipeline, std::string key,
                                            const std::optional<HeldPrefix>& held);

} // namespace fdo::jit::detail
