// Rotates that InstCombine folded into a multiply, made explicit before
// codegen (docs/jit.md, "Rotates behind a multiply").
//
// `rotl(x * C, k)` written as `((x * C) << k) | ((x * C) >> (N - k))` reaches
// codegen from LLVM 16's InstCombine as `(x * (C << k)) | ((x * C) >> (N - k))`:
// the left shift is folded into a second multiply. SelectionDAG recovers the
// rotate only while it can see both multiply constants; once the IR-level
// ConstantHoisting pass has moved them into registers (it does so when a
// function uses the same wide constant more than once, e.g. in a loop that
// the profile made hot enough to unroll), the rotate is lost and every
// iteration pays a second multiply, a shift and an `or` on its critical path.
// Profile-guided code then runs slower than the same code without a profile.
#pragma once

#include <llvm/IR/Module.h>

namespace fdo::jit::detail {

// Rewrites every `or (lshr M, S), (mul X, C << (N - S))` with
// M = `mul X, C` (constants C, S; scalar iN; either operand order) into
// `llvm.fshl(M, M, N - S)`, and deletes multiplies left without uses.
// Returns how many rotates it made explicit.
unsigned restore_folded_rotates(llvm::Module& m);

} // namespace fdo::jit::detail
