// Partitioned compiles (docs/jit.md, "Partitioned compiles"): a large
// module, once the whole of it has run the O-level pipeline up to the inliner
// (PipelineCut), is split into parts that run the rest of the pipeline and
// codegen at once, one thread and one LLVMContext each, and are linked
// together by the loader from one object set (fdo/jit/object_set.h).
#pragma once

#include "fdo/jit/compiler.h"
#include "module_split.h"

#include <cstddef>
#include <functional>
#include <llvm/IR/Module.h>
#include <llvm/IR/PassInstrumentation.h>
#include <llvm/Support/Error.h>
#include <llvm/Target/TargetMachine.h>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace fdo::jit::detail {

// Instructions in the module's defined functions.
std::size_t instruction_count(const llvm::Module& m);

// How many parts a module of `instructions` instructions is split into: one
// when `threads` is 1, else one per `min_instructions` (at least one), at
// most `max_parts` (and kMaxPartitions). More parts than threads make a
// recompile that reaches a few of them cheaper (docs/jit.md, "Incremental
// recompiles") but cost the code more; the threads compile them in turn.
unsigned partition_count(std::size_t instructions, unsigned threads, std::size_t min_instructions,
                         unsigned max_parts);

// A target machine for one part's codegen (each thread needs its own).
using TargetMachineFactory = std::function<llvm::Expected<std::unique_ptr<llvm::TargetMachine>>()>;
// Compiles one part to its object (the rest of its pipeline, then codegen).
using EmitObject = std::function<llvm::Expected<std::string>(llvm::Module&, llvm::TargetMachine&)>;

struct PartitionedObjects {
  std::vector<std::string> objects;  // one per part, in part order
  std::vector<std::string> warnings; // what the parts' contexts reported
};

// Where a partitioned compile cuts the O-level pipeline: the whole module
// runs the passes before the inliner (the profile's instrumentation or use
// among them), each part the inliner and everything after it. A pass
// instrumentation callback skips the other side's optional passes; the
// required ones left on either side (coroutine lowering, the always-inliner)
// do nothing the second time.
class PipelineCut {
public:
  enum class Side { before, after };
  // `pgo`: the pipeline instruments or applies a profile, so a PGO
  // pre-inliner runs ahead of the profile's passes; the cut is at the main
  // inliner, after them.
  enum class Pgo { none, instrument_or_use };
  PipelineCut(Side side, Pgo pgo) : side_(side), inliners_before_cut_(pgo == Pgo::none ? 0 : 1) {}
  // Registers the callback; this object must outlive the pipeline's run.
  void register_callbacks(llvm::PassInstrumentationCallbacks& pic);
  // Whether the cut was met (the pipeline has an inliner to cut at).
  bool reached() const { return reached_; }

private:
  bool runs(llvm::StringRef pass);
  Side side_;
  int inliners_before_cut_;
  bool reached_ = false;
};

// Offered each part of a split at the inliner on its splitting thread,
// in order, with the bitcode its thread would compile: an object to take
// instead of compiling it (a held part with the same input, part_keys.h), or
// nothing.
using ReusePart = std::function<std::optional<std::string>(unsigned index, const llvm::Module& part,
                                                           llvm::StringRef bitcode)>;

// Splits `m` into parts (locals another part refers to become hidden
// globals) and hands each to `emit` on one of up to `threads` threads, in a
// context of its own (parts travel to their thread as bitcode). `m` is changed and
// should not be compiled afterwards. An error in any part fails the whole
// (no partial set). A part that defines nothing is left out.
enum class Splitter {
  by_name_hash,    // llvm::SplitModule: a fully optimized module, for codegen only
  by_module_order, // module_split.h: cut at the inliner, with imports, per `plan`
};
struct SplitSpec {
  Splitter splitter = Splitter::by_name_hash;
  unsigned parts = 1;             // by_name_hash
  unsigned threads = 1;           // compiling parts at once
  const PartPlan* plan = nullptr; // by_module_order
  ReusePart reuse;                // by_module_order, optional
};
llvm::Expected<PartitionedObjects> emit_partitioned(llvm::Module& m, const SplitSpec& spec,
                                                    const TargetMachineFactory& make_target,
                                                    const EmitObject& emit);

} // namespace fdo::jit::detail
