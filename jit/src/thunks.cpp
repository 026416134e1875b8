#include "thunks.h"

#include "llvm_support.h"
#include "module_prep.h"

#include <algorithm>
#include <llvm/IR/Constants.h>
#include <llvm/IR/IRBuilder.h>

namespace fdo::jit::detail {

namespace {

// Slot (i64) -> the parameter's IR type.
llvm::Value* from_slot(llvm::IRBuilder<>& b, llvm::Value* slot, llvm::Type* t) {
  if (t->isIntegerTy(64)) return slot;
  if (t->isIntegerTy()) return b.CreateTrunc(slot, t);
  if (t->isFloatTy()) return b.CreateBitCast(b.CreateTrunc(slot, b.getInt32Ty()), t);
  if (t->isDoubleTy()) return b.CreateBitCast(slot, t);
  return b.CreateIntToPtr(slot, t); // ptr
}

// The result's IR value -> slot (i64).
llvm::Value* to_slot(llvm::IRBuilder<>& b, llvm::Value* v, bool signext) {
  llvm::Type* t = v->getType();
  llvm::Type* i64 = b.getInt64Ty();
  if (t->isIntegerTy(64)) return v;
  if (t->isIntegerTy()) return signext ? b.CreateSExt(v, i64) : b.CreateZExt(v, i64);
  if (t->isFloatTy()) return b.CreateZExt(b.CreateBitCast(v, b.getInt32Ty()), i64);
  if (t->isDoubleTy()) return b.CreateBitCast(v, i64);
  return b.CreatePtrToInt(v, i64); // ptr
}

void build_thunk(llvm::Module& m, llvm::Function& callee, const EntryInfo& entry) {
  llvm::LLVMContext& ctx = m.getContext();
  llvm::Type* ptr = llvm::PointerType::get(ctx, 0);
  auto* type = llvm::FunctionType::get(llvm::Type::getVoidTy(ctx), {ptr, ptr}, false);
  auto* thunk = llvm::Function::Create(type, llvm::GlobalValue::ExternalLinkage,
                                       std::string(kThunkPrefix) + entry.name, m);
  thunk->setDSOLocal(true);
  llvm::Argument* args = thunk->getArg(0);
  llvm::Argument* ret = thunk->getArg(1);
  args->setName("args");
  ret->setName("ret");

  llvm::IRBuilder<> b(llvm::BasicBlock::Create(ctx, "entry", thunk));
  std::vector<llvm::Value*> call_args;
  for (unsigned i = 0; i < callee.arg_size(); ++i) {
    llvm::Value* addr = b.CreateConstInBoundsGEP1_64(b.getInt64Ty(), args, i);
    llvm::Value* slot = b.CreateAlignedLoad(b.getInt64Ty(), addr, llvm::Align(8));
    call_args.push_back(from_slot(b, slot, callee.getArg(i)->getType()));
  }
  llvm::CallInst* call = b.CreateCall(callee.getFunctionType(), &callee, call_args);
  call->setCallingConv(callee.getCallingConv());
  // ABI-relevant parameter and return attributes (signext, zeroext, byval,
  // sret, inreg, ...) must match between call site and callee.
  call->setAttributes(callee.getAttributes());
  // Keep the entry out of line: samples in its code must attribute to it,
  // not to the thunk.
  call->addFnAttr(llvm::Attribute::NoInline);
  if (!callee.getReturnType()->isVoidTy())
    b.CreateAlignedStore(to_slot(b, call, entry.return_signext), ret, llvm::Align(8));
  b.CreateRetVoid();
}

struct Structor {
  std::uint64_t priority;
  llvm::Function* fn;
};

// Reads and deletes an llvm.global_ctors/dtors array.
std::vector<Structor> take_structors(llvm::Module& m, llvm::StringRef name) {
  std::vector<Structor> out;
  llvm::GlobalVariable* gv = m.getGlobalVariable(name);
  if (!gv) return out;
  if (auto* array = gv->hasInitializer() ? llvm::dyn_cast<llvm::ConstantArray>(gv->getInitializer())
                                         : nullptr)
    for (const llvm::Use& op : array->operands()) {
      auto* entry = llvm::dyn_cast<llvm::ConstantStruct>(op.get());
      if (!entry || entry->getNumOperands() < 2) continue;
      auto* priority = llvm::dyn_cast<llvm::ConstantInt>(entry->getOperand(0));
      auto* fn = llvm::dyn_cast<llvm::Function>(entry->getOperand(1)->stripPointerCasts());
      if (priority && fn) out.push_back({priority->getZExtValue(), fn});
    }
  gv->eraseFromParent();
  return out;
}

void build_structor_caller(llvm::Module& m, std::string_view name, std::vector<Structor> list,
                           bool descending) {
  if (list.empty()) return;
  // Among equal priorities destructors run in the reverse of their order.
  if (descending) std::reverse(list.begin(), list.end());
  std::stable_sort(list.begin(), list.end(), [descending](const Structor& a, const Structor& b) {
    return descending ? a.priority > b.priority : a.priority < b.priority;
  });
  llvm::LLVMContext& ctx = m.getContext();
  auto* fn = llvm::Function::Create(llvm::FunctionType::get(llvm::Type::getVoidTy(ctx), false),
                                    llvm::GlobalValue::ExternalLinkage, std::string(name), m);
  fn->setDSOLocal(true);
  llvm::IRBuilder<> b(llvm::BasicBlock::Create(ctx, "entry", fn));
  for (const Structor& s : list) {
    llvm::CallInst* call = b.CreateCall(s.fn->getFunctionType(), s.fn);
    call->setCallingConv(s.fn->getCallingConv());
  }
  b.CreateRetVoid();
}

} // namespace

void add_thunks(llvm::Module& m, const std::vector<EntryInfo>& entries) {
  for (const EntryInfo& entry : entries)
    if (llvm::Function* f = m.getFunction(entry.name); f && !f->isDeclaration())
      build_thunk(m, *f, entry);
}

void lower_ctors_dtors(llvm::Module& m) {
  // C++ registers static destructors with __cxa_atexit(fn, arg, &__dso_handle),
  // __dso_handle naming the shared object (crtbegin.o defines it for real
  // DSOs). Each object gets its own, so the loader can run exactly this
  // object's registrations with __cxa_finalize when unloading it.
  if (llvm::GlobalVariable* handle = m.getGlobalVariable(kDsoHandleName);
      handle && handle->isDeclaration()) {
    handle->setInitializer(llvm::Constant::getNullValue(handle->getValueType()));
    handle->setLinkage(llvm::GlobalValue::ExternalLinkage);
    handle->setVisibility(llvm::GlobalValue::HiddenVisibility);
    handle->setDSOLocal(true);
  }
  build_structor_caller(m, kInitName, take_structors(m, "llvm.global_ctors"), false);
  // Destructors run in the reverse order: highest priority number first.
  build_structor_caller(m, kFiniName, take_structors(m, "llvm.global_dtors"), true);
}

} // namespace fdo::jit::detail
