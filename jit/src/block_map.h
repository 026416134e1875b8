// Attribution of machine code to the canonical IR's blocks and conditional
// branches (docs/perf.md, "Attribution to IR branches").
//
// Before the pipeline every instruction of a defined function gets a
// synthetic debug location: file = the function's PGO name, line = its
// block's index + 1, column = the block's conditional-branch index + 1 (0
// when it ends in none). Codegen carries those through every pass into the
// object's DWARF line table, which read_block_map() turns into per-symbol
// block ranges right after codegen, in the compile worker.
#pragma once

#include "fdo/jit/types.h"

#include <llvm/IR/Module.h>
#include <llvm/Support/Error.h>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace fdo::jit::detail {

// Gives every instruction of every defined function its block location and
// adds the line-tables-only compile unit that makes codegen emit them. Call
// on the canonical module, after fingerprinting (it changes no hash).
void add_block_locations(llvm::Module& m);

// Branch weights the profile annotated, per function (PGO name), for the
// conditional branches that still carry their own block location (right
// after PGOInstrumentationUse).
std::map<std::string, std::vector<BranchWeight>> read_branch_weights(const llvm::Module& m);

// The block ranges of every function symbol of `object` (an ELF relocatable
// object from codegen), from its line table.
llvm::Expected<std::vector<FunctionBlocks>> read_block_map(std::string_view object);

} // namespace fdo::jit::detail
