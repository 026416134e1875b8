// Splitting a module for a partitioned compile before its inliner runs
// (docs/jit.md, "Partitioned compiles"). Unlike LLVM's SplitModule, which
// places each global by the hash of its name, parts here are runs of the
// module's own function order (a linked program keeps each source file's
// functions together, so a part is a few whole translation units, as a
// native build compiles them), and each part gets copies of the small
// functions it calls in other parts, as available_externally definitions
// the inliner may inline and that are dropped afterwards (ThinLTO's
// function import, one level deep). A global stays local unless another
// part refers to it; then it becomes a hidden global of its part.
#pragma once

#include <cstddef>
#include <functional>
#include <llvm/ADT/StringMap.h>
#include <llvm/IR/Module.h>
#include <memory>

namespace fdo::jit::detail {

// Functions of at most this many instructions are imported by the parts
// that call them (ThinLTO's import-instr-limit)...
inline constexpr unsigned kImportInstructions = 100;
// ... ten times as many when the module's profile says the function's entry
// is hot (ThinLTO's hot call-site multiplier), none when it says it is cold
// (the inliner leaves a cold callee alone but for the smallest, which the
// part's own code rarely calls anyway)...
inline constexpr unsigned kHotImportMultiplier = 10;
// ... and what those call, of at most this share of the limit a level.
inline constexpr double kImportDecay = 0.7;

// Which part each defined function goes to: runs of the module order of
// about equal instruction counts. Planned on the module as submitted, before
// any pass runs: the plan then depends on the program alone, not on its
// profile, so a profile rewrite keeps every function in its part (and the
// parts it does not reach keep their input, docs/jit.md "Incremental
// recompiles").
struct PartPlan {
  unsigned parts = 1;
  llvm::StringMap<unsigned> part_of; // function name -> part
};
PartPlan plan_by_module_order(const llvm::Module& m, unsigned parts);

// Cuts `m` into `plan.parts` modules (fewer when it has fewer functions),
// each handed to `take` in order; `m` itself is changed (locals referred to
// across parts externalized) and should not be compiled afterwards. A
// function the plan does not name (made by a pass since) goes with the
// nearest function before it in module order that it names.
void split_by_module_order(llvm::Module& m, const PartPlan& plan,
                           const std::function<void(std::unique_ptr<llvm::Module>)>& take);

} // namespace fdo::jit::detail
