// Code the pipeline adds to every module after optimisation: the entry
// thunks (docs/jit.md, "Thunk ABI"), the __fdo_init/__fdo_fini functions
// that replace llvm.global_ctors/dtors (the loader has no platform runtime
// to run .init_array), and a definition of __dso_handle when C++ code
// registers destructors with __cxa_atexit.
#pragma once

#include "fdo/jit/types.h"

#include <llvm/IR/Module.h>
#include <vector>

namespace fdo::jit::detail {

void add_thunks(llvm::Module& m, const std::vector<EntryInfo>& entries);
void lower_ctors_dtors(llvm::Module& m);

} // namespace fdo::jit::detail
