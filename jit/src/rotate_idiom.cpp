#include "rotate_idiom.h"

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/PatternMatch.h>
#include <llvm/Transforms/Utils/Local.h>
#include <optional>

namespace fdo::jit::detail {

namespace {

using namespace llvm::PatternMatch;

// The rotate amount when `shifted` is `lshr M, S` and `multiplied` is
// `mul X, C << (N - S)` for M = `mul X, C`; M through `rotated`.
std::optional<std::uint64_t> folded_rotate(llvm::Value* shifted, llvm::Value* multiplied,
                                           llvm::Value*& rotated) {
  llvm::Value* m = nullptr;
  const llvm::APInt* s = nullptr;
  if (!match(shifted, m_LShr(m_Value(m), m_APInt(s)))) return std::nullopt;
  llvm::Value* x = nullptr;
  const llvm::APInt* c = nullptr;
  if (!match(m, m_Mul(m_Value(x), m_APInt(c)))) return std::nullopt;
  const unsigned width = c->getBitWidth();
  if (s->uge(width) || s->isZero()) return std::nullopt;
  const std::uint64_t left = width - s->getZExtValue();
  const llvm::APInt expected = c->shl(static_cast<unsigned>(left));
  const llvm::APInt* c2 = nullptr;
  if (!match(multiplied, m_Mul(m_Specific(x), m_APInt(c2))) || *c2 != expected) return std::nullopt;
  rotated = m;
  return left;
}

} // namespace

unsigned restore_folded_rotates(llvm::Module& m) {
  unsigned restored = 0;
  for (llvm::Function& f : m) {
    if (f.isDeclaration()) continue;
    llvm::SmallVector<llvm::BinaryOperator*, 8> ors;
    for (llvm::BasicBlock& bb : f)
      for (llvm::Instruction& inst : bb)
        if (auto* op = llvm::dyn_cast<llvm::BinaryOperator>(&inst);
            op && op->getOpcode() == llvm::Instruction::Or && op->getType()->isIntegerTy())
          ors.push_back(op);
    for (llvm::BinaryOperator* op : ors) {
      llvm::Value* a = op->getOperand(0);
      llvm::Value* b = op->getOperand(1);
      llvm::Value* rotated = nullptr;
      std::optional<std::uint64_t> left = folded_rotate(a, b, rotated);
      if (!left) left = folded_rotate(b, a, rotated);
      if (!left) continue;
      llvm::IRBuilder<> builder(op);
      llvm::Value* amount = llvm::ConstantInt::get(op->getType(), *left);
      llvm::CallInst* fshl = builder.CreateIntrinsic(llvm::Intrinsic::fshl, {op->getType()},
                                                     {rotated, rotated, amount});
      // The synthetic block location (block_map.h) stays with the code.
      fshl->setDebugLoc(op->getDebugLoc());
      fshl->takeName(op);
      op->replaceAllUsesWith(fshl);
      op->eraseFromParent();
      // The shift and the second multiply, unless something else uses them
      // (their operands stay: the rotate uses M, and M uses X).
      llvm::RecursivelyDeleteTriviallyDeadInstructions(a);
      llvm::RecursivelyDeleteTriviallyDeadInstructions(b);
      ++restored;
    }
  }
  return restored;
}

} // namespace fdo::jit::detail
