// Parsing, verification and canonicalisation: everything that happens to a
// submitted program before its profile key is computed.
#pragma once

#include "fdo/jit/types.h"
#include "fdo/util/expected.h"

#include <llvm/IR/Module.h>
#include <llvm/Target/TargetMachine.h>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace fdo::jit::detail {

// Parses LLVM IR text or bitcode (told apart by the bitcode magic), enforces
// `limits`, and runs the verifier. Errors: invalid_argument (empty input),
// resource_exhausted (limits), parse (with "line L, column C: " for text),
// verify.
fdo::Expected<std::unique_ptr<llvm::Module>>
parse_and_verify(std::string_view bytes, const Limits& limits, llvm::LLVMContext& ctx);

struct CanonicalNames {
  // Canonical -> original names of the renamed local symbols.
  std::map<std::string, std::string> local_names;
  // Every defined function: canonical PGO name -> the PGO name it had in the
  // submitted module (its source file name and original symbol name).
  std::map<std::string, std::string> source_names;
};

// Rewrites a verified module into its canonical form (docs/jit.md,
// "Canonical IR"): debug info and non-semantic named metadata stripped,
// fixed source name, the host triple and data layout, host-only codegen
// attributes removed, local symbols renamed by position. Fails
// (invalid_argument) when the program defines a reserved `__fdo_` symbol.
fdo::Expected<CanonicalNames> canonicalize(llvm::Module& m, const llvm::TargetMachine& tm);

// Exported functions callable through a thunk, in module order.
std::vector<EntryInfo> find_entries(const llvm::Module& m);

// The ABI type of an IR type, or nullopt when the thunk ABI cannot carry it.
std::optional<AbiType> abi_type_of(const llvm::Type* type, bool is_return);

} // namespace fdo::jit::detail
