// Our own structural hash (LLVM 16's StructuralHash is compiled out of
// release builds). Values, blocks and arguments are referred to by position,
// globals by name (locals already carry positional names after
// canonicalisation), types by structure (never by struct name), attributes
// and metadata kinds by name (never by LLVM's per-context enum numbering).
// Each hashed item is framed by Hasher::update_field / fixed-width integers so
// different item sequences cannot produce the same byte stream.
#include "fingerprint.h"

#include "fdo/util/hash.h"

#include <algorithm>
#include <llvm/ADT/DenseMap.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/DebugInfoMetadata.h>
#include <llvm/IR/InlineAsm.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/IntrinsicInst.h>
#include <llvm/IR/Metadata.h>
#include <llvm/IR/Operator.h>
#include <llvm/ProfileData/InstrProf.h>
#include <utility>
#include <vector>

namespace fdo::jit::detail {

namespace {

// Bumped when the hash definition changes (profile keys change with it).
constexpr std::string_view kFingerprintTag = "fdo-fingerprint-v1";

std::string_view sv(llvm::StringRef s) {
  return {s.data(), s.size()};
}

// Positions of a function's blocks, instructions and arguments.
struct FunctionNumbering {
  llvm::DenseMap<const llvm::Value*, std::uint64_t> index;
};

class ModuleHasher {
public:
  explicit ModuleHasher(const llvm::Module& m) : m_(m) {
    m.getContext().getMDKindNames(md_kind_names_);
    m.getContext().getSyncScopeNames(sync_scope_names_);
  }

  Fingerprints run();

private:
  using MDNumbering = llvm::DenseMap<const llvm::Metadata*, std::uint64_t>;

  std::uint64_t type_digest(const llvm::Type* t);
  std::uint64_t constant_digest(const llvm::Constant* c);
  void hash_type(Hasher& h, const llvm::Type* t) { h.update_u64(type_digest(t)); }
  void hash_apint(Hasher& h, const llvm::APInt& v);
  void hash_value_ref(Hasher& h, const llvm::Value* v, const FunctionNumbering* fn,
                      MDNumbering& md);
  void hash_metadata(Hasher& h, const llvm::Metadata* md, const FunctionNumbering* fn,
                     MDNumbering& seen);
  void hash_attribute_set(Hasher& h, llvm::AttributeSet set);
  void hash_attribute_list(Hasher& h, llvm::AttributeList list, unsigned num_params);
  void hash_attachments(Hasher& h, llvm::SmallVectorImpl<std::pair<unsigned, llvm::MDNode*>>& mds,
                        const FunctionNumbering* fn, MDNumbering& seen);
  void hash_global_common(Hasher& h, const llvm::GlobalValue& gv);
  void hash_global_object(Hasher& h, const llvm::GlobalObject& go, MDNumbering& seen);
  void hash_sync_scope(Hasher& h, llvm::SyncScope::ID id);
  void hash_instruction(Hasher& h, const llvm::Instruction& inst, const FunctionNumbering& fn,
                        MDNumbering& seen);
  std::string function_digest(const llvm::Function& f);
  std::uint64_t block_index(const llvm::BasicBlock* bb);

  const llvm::Module& m_;
  llvm::SmallVector<llvm::StringRef, 32> md_kind_names_;
  llvm::SmallVector<llvm::StringRef, 8> sync_scope_names_;
  llvm::DenseMap<const llvm::Type*, std::uint64_t> type_memo_;
  llvm::DenseMap<const llvm::Constant*, std::uint64_t> constant_memo_;
};

std::uint64_t ModuleHasher::type_digest(const llvm::Type* t) {
  if (auto it = type_memo_.find(t); it != type_memo_.end()) return it->second;
  Hasher h;
  h.update_u64(t->getTypeID());
  switch (t->getTypeID()) {
  case llvm::Type::IntegerTyID:
    h.update_u64(t->getIntegerBitWidth());
    break;
  case llvm::Type::PointerTyID:
    h.update_u64(t->getPointerAddressSpace());
    if (!t->isOpaquePointerTy()) hash_type(h, t->getNonOpaquePointerElementType());
    break;
  case llvm::Type::ArrayTyID:
    h.update_u64(t->getArrayNumElements());
    hash_type(h, t->getArrayElementType());
    break;
  case llvm::Type::FixedVectorTyID:
  case llvm::Type::ScalableVectorTyID: {
    auto* vt = llvm::cast<llvm::VectorType>(t);
    h.update_u64(vt->getElementCount().getKnownMinValue());
    hash_type(h, vt->getElementType());
    break;
  }
  case llvm::Type::StructTyID: {
    auto* st = llvm::cast<llvm::StructType>(t);
    // Identified structs are hashed by body, not by name. Recursion through a
    // struct is only possible via typed pointers; the memo entry set below
    // breaks such cycles.
    type_memo_[t] = 0x5354525543540000ULL ^ type_memo_.size();
    h.update_u8(st->isLiteral());
    h.update_u8(st->isPacked());
    h.update_u8(st->isOpaque());
    h.update_u64(st->getNumElements());
    for (llvm::Type* e : st->elements())
      hash_type(h, e);
    break;
  }
  case llvm::Type::FunctionTyID: {
    auto* ft = llvm::cast<llvm::FunctionType>(t);
    h.update_u8(ft->isVarArg());
    hash_type(h, ft->getReturnType());
    h.update_u64(ft->getNumParams());
    for (llvm::Type* p : ft->params())
      hash_type(h, p);
    break;
  }
  case llvm::Type::TargetExtTyID: {
    auto* tt = llvm::cast<llvm::TargetExtType>(t);
    h.update_field(sv(tt->getName()));
    h.update_u64(tt->getNumTypeParameters());
    for (llvm::Type* p : tt->type_params())
      hash_type(h, p);
    h.update_u64(tt->getNumIntParameters());
    for (unsigned i : tt->int_params())
      h.update_u64(i);
    break;
  }
  default: // the primitive types are fully described by their ID
    break;
  }
  std::uint64_t d = h.digest64();
  type_memo_[t] = d;
  return d;
}

void ModuleHasher::hash_apint(Hasher& h, const llvm::APInt& v) {
  h.update_u64(v.getBitWidth());
  for (unsigned i = 0; i < v.getNumWords(); ++i)
    h.update_u64(v.getRawData()[i]);
}

std::uint64_t ModuleHasher::block_index(const llvm::BasicBlock* bb) {
  std::uint64_t i = 0;
  for (const llvm::BasicBlock& b : *bb->getParent()) {
    if (&b == bb) return i;
    ++i;
  }
  return i;
}

std::uint64_t ModuleHasher::constant_digest(const llvm::Constant* c) {
  if (auto it = constant_memo_.find(c); it != constant_memo_.end()) return it->second;
  Hasher h;
  h.update_u64(c->getValueID());
  hash_type(h, c->getType());
  if (auto* gv = llvm::dyn_cast<llvm::GlobalValue>(c)) {
    h.update_field(sv(gv->getName()));
  } else if (auto* ci = llvm::dyn_cast<llvm::ConstantInt>(c)) {
    hash_apint(h, ci->getValue());
  } else if (auto* cf = llvm::dyn_cast<llvm::ConstantFP>(c)) {
    hash_apint(h, cf->getValueAPF().bitcastToAPInt());
  } else if (auto* cds = llvm::dyn_cast<llvm::ConstantDataSequential>(c)) {
    h.update_field(sv(cds->getRawDataValues()));
  } else if (auto* ba = llvm::dyn_cast<llvm::BlockAddress>(c)) {
    h.update_field(sv(ba->getFunction()->getName()));
    h.update_u64(block_index(ba->getBasicBlock()));
  } else if (auto* eq = llvm::dyn_cast<llvm::DSOLocalEquivalent>(c)) {
    h.update_field(sv(eq->getGlobalValue()->getName()));
  } else if (auto* nc = llvm::dyn_cast<llvm::NoCFIValue>(c)) {
    h.update_field(sv(nc->getGlobalValue()->getName()));
  } else {
    if (auto* ce = llvm::dyn_cast<llvm::ConstantExpr>(c)) {
      h.update_u64(ce->getOpcode());
      h.update_u64(ce->getRawSubclassOptionalData()); // nsw/nuw/exact/inbounds
      if (ce->isCompare()) h.update_u64(ce->getPredicate());
      if (auto* gep = llvm::dyn_cast<llvm::GEPOperator>(ce)) {
        hash_type(h, gep->getSourceElementType());
        std::optional<unsigned> inrange = gep->getInRangeIndex();
        h.update_u64(inrange ? *inrange + 1 : 0);
      }
      if (ce->getOpcode() == llvm::Instruction::ShuffleVector)
        for (int mask : ce->getShuffleMask())
          h.update_i64(mask);
    }
    // Aggregates and expressions: their operands; undef, poison, null,
    // zeroinitializer, none: nothing beyond the value ID and type.
    h.update_u64(c->getNumOperands());
    for (const llvm::Use& op : c->operands())
      h.update_u64(constant_digest(llvm::cast<llvm::Constant>(op.get())));
  }
  std::uint64_t d = h.digest64();
  constant_memo_[c] = d;
  return d;
}

void ModuleHasher::hash_metadata(Hasher& h, const llvm::Metadata* md, const FunctionNumbering* fn,
                                 MDNumbering& seen) {
  if (!md) {
    h.update_u8('0');
    return;
  }
  if (llvm::isa<llvm::DINode>(md) || llvm::isa<llvm::DILocation>(md) ||
      llvm::isa<llvm::DIExpression>(md) || llvm::isa<llvm::DIArgList>(md)) {
    h.update_u8('d'); // debug info: stripped before hashing, ignored if any is left
    return;
  }
  if (auto* s = llvm::dyn_cast<llvm::MDString>(md)) {
    h.update_u8('s');
    h.update_field(sv(s->getString()));
    return;
  }
  if (auto* vam = llvm::dyn_cast<llvm::ValueAsMetadata>(md)) {
    h.update_u8('v');
    hash_value_ref(h, vam->getValue(), fn, seen);
    return;
  }
  if (auto* node = llvm::dyn_cast<llvm::MDNode>(md)) {
    if (auto it = seen.find(node); it != seen.end()) {
      h.update_u8('r'); // back reference (metadata may be cyclic, e.g. loop IDs)
      h.update_u64(it->second);
      return;
    }
    seen[node] = seen.size();
    h.update_u8('n');
    h.update_u8(node->isDistinct());
    h.update_u64(node->getNumOperands());
    for (const llvm::MDOperand& op : node->operands())
      hash_metadata(h, op.get(), fn, seen);
    return;
  }
  h.update_u8('?');
  h.update_u64(md->getMetadataID());
}

void ModuleHasher::hash_value_ref(Hasher& h, const llvm::Value* v, const FunctionNumbering* fn,
                                  MDNumbering& md) {
  if (!v) {
    h.update_u8('0');
    return;
  }
  if (llvm::isa<llvm::Instruction>(v) || llvm::isa<llvm::Argument>(v) ||
      llvm::isa<llvm::BasicBlock>(v)) {
    h.update_u8(llvm::isa<llvm::Instruction>(v) ? 'i' : llvm::isa<llvm::Argument>(v) ? 'a' : 'b');
    std::uint64_t position = ~std::uint64_t{0};
    if (fn)
      if (auto it = fn->index.find(v); it != fn->index.end()) position = it->second;
    h.update_u64(position);
    return;
  }
  if (auto* c = llvm::dyn_cast<llvm::Constant>(v)) {
    h.update_u8('c');
    h.update_u64(constant_digest(c));
    return;
  }
  if (auto* ia = llvm::dyn_cast<llvm::InlineAsm>(v)) {
    h.update_u8('s');
    hash_type(h, ia->getFunctionType());
    h.update_field(ia->getAsmString());
    h.update_field(ia->getConstraintString());
    h.update_u8(ia->hasSideEffects());
    h.update_u8(ia->isAlignStack());
    h.update_u8(ia->getDialect());
    h.update_u8(ia->canThrow());
    return;
  }
  if (auto* mav = llvm::dyn_cast<llvm::MetadataAsValue>(v)) {
    h.update_u8('m');
    hash_metadata(h, mav->getMetadata(), fn, md);
    return;
  }
  h.update_u8('?');
  h.update_u64(v->getValueID());
}

void ModuleHasher::hash_attribute_set(Hasher& h, llvm::AttributeSet set) {
  h.update_u64(set.getNumAttributes());
  for (const llvm::Attribute& a : set) {
    if (a.isStringAttribute()) {
      h.update_u8('s');
      h.update_field(sv(a.getKindAsString()));
      h.update_field(sv(a.getValueAsString()));
      continue;
    }
    h.update_field(sv(llvm::Attribute::getNameFromAttrKind(a.getKindAsEnum())));
    if (a.isIntAttribute()) {
      h.update_u8('i');
      h.update_u64(a.getValueAsInt());
    } else if (a.isTypeAttribute()) {
      h.update_u8('t');
      llvm::Type* t = a.getValueAsType();
      h.update_u64(t ? type_digest(t) : 0);
    } else {
      h.update_u8('e');
    }
  }
}

void ModuleHasher::hash_attribute_list(Hasher& h, llvm::AttributeList list, unsigned num_params) {
  hash_attribute_set(h, list.getFnAttrs());
  hash_attribute_set(h, list.getRetAttrs());
  h.update_u64(num_params);
  for (unsigned i = 0; i < num_params; ++i)
    hash_attribute_set(h, list.getParamAttrs(i));
}

void ModuleHasher::hash_attachments(Hasher& h,
                                    llvm::SmallVectorImpl<std::pair<unsigned, llvm::MDNode*>>& mds,
                                    const FunctionNumbering* fn, MDNumbering& seen) {
  // Kind IDs of custom metadata depend on the order the parser met them;
  // order and identify attachments by kind name instead.
  std::vector<std::pair<llvm::StringRef, llvm::MDNode*>> named;
  for (auto& [kind, node] : mds) {
    if (kind == llvm::LLVMContext::MD_dbg) continue;
    named.emplace_back(kind < md_kind_names_.size() ? md_kind_names_[kind] : "", node);
  }
  std::sort(named.begin(), named.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  h.update_u64(named.size());
  for (auto& [name, node] : named) {
    h.update_field(sv(name));
    hash_metadata(h, node, fn, seen);
  }
}

void ModuleHasher::hash_sync_scope(Hasher& h, llvm::SyncScope::ID id) {
  h.update_field(id < sync_scope_names_.size() ? sv(sync_scope_names_[id]) : "?");
}

void ModuleHasher::hash_global_common(Hasher& h, const llvm::GlobalValue& gv) {
  h.update_field(sv(gv.getName()));
  h.update_u64(gv.getLinkage());
  h.update_u64(gv.getVisibility());
  h.update_u64(gv.getDLLStorageClass());
  h.update_u64(static_cast<std::uint64_t>(gv.getUnnamedAddr()));
  h.update_u8(gv.isDSOLocal());
  h.update_u64(gv.getThreadLocalMode());
  h.update_u64(gv.getAddressSpace());
  hash_type(h, gv.getValueType());
}

void ModuleHasher::hash_global_object(Hasher& h, const llvm::GlobalObject& go, MDNumbering& seen) {
  hash_global_common(h, go);
  llvm::MaybeAlign align = go.getAlign();
  h.update_u64(align ? align->value() : 0);
  h.update_field(sv(go.getSection()));
  if (const llvm::Comdat* c = go.getComdat()) {
    h.update_u8(1);
    h.update_u8(c->getName() == go.getName()); // comdat named after its key
    h.update_u64(c->getSelectionKind());
  } else {
    h.update_u8(0);
  }
  llvm::SmallVector<std::pair<unsigned, llvm::MDNode*>, 4> mds;
  go.getAllMetadata(mds);
  hash_attachments(h, mds, nullptr, seen);
}

void ModuleHasher::hash_instruction(Hasher& h, const llvm::Instruction& inst,
                                    const FunctionNumbering& fn, MDNumbering& seen) {
  h.update_u64(inst.getOpcode());
  hash_type(h, inst.getType());
  // nuw/nsw, exact, inbounds and fast-math flags.
  h.update_u64(inst.getRawSubclassOptionalData());
  h.update_u64(inst.getNumOperands());
  for (const llvm::Use& op : inst.operands())
    hash_value_ref(h, op.get(), &fn, seen);

  if (auto* phi = llvm::dyn_cast<llvm::PHINode>(&inst)) {
    for (const llvm::BasicBlock* bb : phi->blocks())
      hash_value_ref(h, bb, &fn, seen);
  } else if (auto* cmp = llvm::dyn_cast<llvm::CmpInst>(&inst)) {
    h.update_u64(cmp->getPredicate());
  } else if (auto* alloca = llvm::dyn_cast<llvm::AllocaInst>(&inst)) {
    hash_type(h, alloca->getAllocatedType());
    h.update_u64(alloca->getAlign().value());
    h.update_u8(alloca->isUsedWithInAlloca());
    h.update_u8(alloca->isSwiftError());
  } else if (auto* load = llvm::dyn_cast<llvm::LoadInst>(&inst)) {
    h.update_u8(load->isVolatile());
    h.update_u64(load->getAlign().value());
    h.update_u64(static_cast<std::uint64_t>(load->getOrdering()));
    hash_sync_scope(h, load->getSyncScopeID());
  } else if (auto* store = llvm::dyn_cast<llvm::StoreInst>(&inst)) {
    h.update_u8(store->isVolatile());
    h.update_u64(store->getAlign().value());
    h.update_u64(static_cast<std::uint64_t>(store->getOrdering()));
    hash_sync_scope(h, store->getSyncScopeID());
  } else if (auto* gep = llvm::dyn_cast<llvm::GetElementPtrInst>(&inst)) {
    hash_type(h, gep->getSourceElementType());
  } else if (auto* call = llvm::dyn_cast<llvm::CallBase>(&inst)) {
    hash_type(h, call->getFunctionType());
    h.update_u64(call->getCallingConv());
    hash_attribute_list(h, call->getAttributes(), call->arg_size());
    if (auto* ci = llvm::dyn_cast<llvm::CallInst>(call)) h.update_u64(ci->getTailCallKind());
    if (auto* cbr = llvm::dyn_cast<llvm::CallBrInst>(call))
      h.update_u64(cbr->getNumIndirectDests());
    h.update_u64(call->getNumOperandBundles());
    for (unsigned i = 0; i < call->getNumOperandBundles(); ++i) {
      llvm::OperandBundleUse bundle = call->getOperandBundleAt(i);
      h.update_field(sv(bundle.getTagName()));
      h.update_u64(bundle.Inputs.size());
    }
  } else if (auto* fence = llvm::dyn_cast<llvm::FenceInst>(&inst)) {
    h.update_u64(static_cast<std::uint64_t>(fence->getOrdering()));
    hash_sync_scope(h, fence->getSyncScopeID());
  } else if (auto* cx = llvm::dyn_cast<llvm::AtomicCmpXchgInst>(&inst)) {
    h.update_u64(static_cast<std::uint64_t>(cx->getSuccessOrdering()));
    h.update_u64(static_cast<std::uint64_t>(cx->getFailureOrdering()));
    h.update_u8(cx->isWeak());
    h.update_u8(cx->isVolatile());
    h.update_u64(cx->getAlign().value());
    hash_sync_scope(h, cx->getSyncScopeID());
  } else if (auto* rmw = llvm::dyn_cast<llvm::AtomicRMWInst>(&inst)) {
    h.update_u64(rmw->getOperation());
    h.update_u64(static_cast<std::uint64_t>(rmw->getOrdering()));
    h.update_u8(rmw->isVolatile());
    h.update_u64(rmw->getAlign().value());
    hash_sync_scope(h, rmw->getSyncScopeID());
  } else if (auto* ev = llvm::dyn_cast<llvm::ExtractValueInst>(&inst)) {
    for (unsigned i : ev->indices())
      h.update_u64(i);
  } else if (auto* iv = llvm::dyn_cast<llvm::InsertValueInst>(&inst)) {
    for (unsigned i : iv->indices())
      h.update_u64(i);
  } else if (auto* sv_inst = llvm::dyn_cast<llvm::ShuffleVectorInst>(&inst)) {
    for (int mask : sv_inst->getShuffleMask())
      h.update_i64(mask);
  } else if (auto* lp = llvm::dyn_cast<llvm::LandingPadInst>(&inst)) {
    h.update_u8(lp->isCleanup());
    for (unsigned i = 0; i < lp->getNumClauses(); ++i)
      h.update_u8(lp->isCatch(i));
  }

  llvm::SmallVector<std::pair<unsigned, llvm::MDNode*>, 4> mds;
  inst.getAllMetadataOtherThanDebugLoc(mds);
  hash_attachments(h, mds, &fn, seen);
}

std::string ModuleHasher::function_digest(const llvm::Function& f) {
  Hasher h;
  MDNumbering seen;
  h.update_field("function");
  hash_global_object(h, f, seen);
  h.update_u64(f.getCallingConv());
  hash_attribute_list(h, f.getAttributes(), f.arg_size());
  h.update_field(f.hasGC() ? sv(f.getGC()) : "");
  for (const llvm::Constant* c : {f.hasPersonalityFn() ? f.getPersonalityFn() : nullptr,
                                  f.hasPrefixData() ? f.getPrefixData() : nullptr,
                                  f.hasPrologueData() ? f.getPrologueData() : nullptr})
    h.update_u64(c ? constant_digest(c) : 0);
  h.update_u8(f.isDeclaration());

  FunctionNumbering fn;
  std::uint64_t next = 0;
  for (const llvm::Argument& a : f.args())
    fn.index[&a] = next++;
  for (const llvm::BasicBlock& bb : f) {
    fn.index[&bb] = next++;
    for (const llvm::Instruction& inst : bb)
      fn.index[&inst] = next++;
  }
  h.update_u64(f.size());
  for (const llvm::BasicBlock& bb : f) {
    h.update_u64(bb.size());
    for (const llvm::Instruction& inst : bb)
      hash_instruction(h, inst, fn, seen);
  }
  return h.hex();
}

Fingerprints ModuleHasher::run() {
  Fingerprints out;
  Hasher h;
  MDNumbering seen;
  h.update_field(kFingerprintTag);

  // Module flags in key order: their order in the text carries no meaning.
  llvm::SmallVector<llvm::Module::ModuleFlagEntry, 8> flags;
  m_.getModuleFlagsMetadata(flags);
  std::sort(flags.begin(), flags.end(),
            [](const auto& a, const auto& b) { return a.Key->getString() < b.Key->getString(); });
  h.update_u64(flags.size());
  for (const auto& flag : flags) {
    h.update_u64(flag.Behavior);
    h.update_field(sv(flag.Key->getString()));
    hash_metadata(h, flag.Val, nullptr, seen);
  }
  h.update_field(m_.getModuleInlineAsm());

  h.update_u64(m_.global_size());
  for (const llvm::GlobalVariable& gv : m_.globals()) {
    hash_global_object(h, gv, seen);
    h.update_u8(gv.isConstant());
    h.update_u8(gv.isExternallyInitialized());
    hash_attribute_set(h, gv.getAttributes());
    h.update_u64(gv.hasInitializer() ? constant_digest(gv.getInitializer()) : 0);
  }
  h.update_u64(m_.size());
  for (const llvm::Function& f : m_) {
    std::string digest = function_digest(f);
    h.update_field(digest);
    if (!f.isDeclaration()) out.functions[llvm::getPGOFuncName(f)] = std::move(digest);
  }
  h.update_u64(m_.alias_size());
  for (const llvm::GlobalAlias& a : m_.aliases()) {
    hash_global_common(h, a);
    h.update_u64(constant_digest(a.getAliasee()));
  }
  h.update_u64(m_.ifunc_size());
  for (const llvm::GlobalIFunc& i : m_.ifuncs()) {
    hash_global_common(h, i);
    h.update_u64(constant_digest(i.getResolver()));
  }
  out.module = h.hex();
  return out;
}

} // namespace

Fingerprints fingerprint_module(const llvm::Module& m) {
  return ModuleHasher(m).run();
}

} // namespace fdo::jit::detail
