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
#include <llvm/IR/Module.h>
#include <memory>

namespace fdo::jit::detail {

// Functions of at most this many instructions are imported by the parts
// that call them.
inline constexpr unsigned kImportInstructions = 1000;

// Cuts `m` into `parts` modules (fewer when it has fewer functions), each
// handed to `take` in order; `m` itself is changed (locals referred to
// across parts externalized) and should not be compiled afterwards.
void split_by_module_order(llvm::Module& m, unsigned parts,
                           const std::function<void(std::unique_ptr<llvm::Module>)>& take);

} // namespace fdo::jit::detail
