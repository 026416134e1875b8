// The canonical structural hash of a module (the profile key) and of each
// defined function. Definition in docs/jit.md, "Fingerprint".
#pragma once

#include <llvm/IR/Module.h>
#include <map>
#include <string>

namespace fdo::jit::detail {

struct Fingerprints {
  std::string module; // 64 lower hex
  // Defined functions by PGO function name.
  std::map<std::string, std::string> functions;
};

// `m` must be canonical (see canonicalize()).
Fingerprints fingerprint_module(const llvm::Module& m);

} // namespace fdo::jit::detail
