#include "arg_profile.h"

#include "llvm_support.h"
#include "value_profile.h"

#include <algorithm>
#include <llvm/Analysis/ProfileSummaryInfo.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/DebugInfoMetadata.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/MDBuilder.h>
#include <llvm/IR/Module.h>
#include <llvm/ProfileData/InstrProf.h>
#include <llvm/Transforms/Utils/Cloning.h>
#include <map>

namespace fdo::jit::detail {

namespace {

// Integer arguments up to 64 bits (the table keeps values zero-extended).
bool profilable(const llvm::Argument& a) {
  const auto* t = llvm::dyn_cast<llvm::IntegerType>(a.getType());
  return t && t->getBitWidth() <= 64 && !a.hasAttribute(llvm::Attribute::ImmArg);
}

std::map<std::string, llvm::Function*> functions_by_pgo_name(llvm::Module& m) {
  std::map<std::string, llvm::Function*> out;
  for (llvm::Function& f : m)
    if (!f.isDeclaration()) out.emplace(llvm::getPGOFuncName(f), &f);
  return out;
}

std::uint32_t instruction_count(const llvm::Function& f) {
  std::uint32_t n = 0;
  for (const llvm::BasicBlock& bb : f)
    n += static_cast<std::uint32_t>(bb.size());
  return n;
}

// Bodies the dispatch cannot stand in front of: a variadic function (its
// arguments cannot be forwarded), one whose blocks are addressed from outside
// (blockaddress tables of computed gotos), and parameters passed in memory the
// callee owns (byval, inalloca, preallocated) or swifterror.
bool cloneable(const llvm::Function& f) {
  if (f.isVarArg() || f.hasFnAttribute(llvm::Attribute::OptimizeNone) ||
      f.hasFnAttribute(llvm::Attribute::Naked) || f.getName().starts_with(kReservedPrefix.data()))
    return false;
  for (const llvm::BasicBlock& bb : f)
    if (bb.hasAddressTaken()) return false;
  for (const llvm::Argument& a : f.args())
    if (a.hasByValAttr() || a.hasInAllocaAttr() || a.hasPreallocatedAttr() ||
        a.hasSwiftErrorAttr() || a.hasAttribute(llvm::Attribute::Nest))
      return false;
  return true;
}

struct Candidate {
  llvm::Function* f = nullptr;
  std::string pgo_name;
  std::uint64_t heat = 0; // the function's largest counter
  Specialization spec;
};

// The largest counter of the function's profile: how hot its hottest block is.
std::uint64_t heat_of(const fdo::FunctionProfile& fp) {
  std::uint64_t max = 0;
  for (std::uint64_t c : fp.counts)
    max = std::max(max, c);
  return max;
}

// Replaces `f`'s body by a guard that calls `spec` when every bound argument
// holds its value, and `general` otherwise.
void make_dispatcher(llvm::Function& f, llvm::Function& spec, llvm::Function& general,
                     const Specialization& s) {
  llvm::LLVMContext& ctx = f.getContext();
  for (llvm::BasicBlock& bb : f)
    bb.dropAllReferences();
  while (!f.empty())
    f.begin()->eraseFromParent();
  auto* entry = llvm::BasicBlock::Create(ctx, "entry", &f);
  auto* to_spec = llvm::BasicBlock::Create(ctx, "specialized", &f);
  auto* to_general = llvm::BasicBlock::Create(ctx, "general", &f);
  llvm::IRBuilder<> b(entry);
  if (llvm::DISubprogram* sp = f.getSubprogram())
    b.SetCurrentDebugLocation(llvm::DILocation::get(ctx, sp->getLine(), 0, sp));
  llvm::Value* all = nullptr;
  for (const auto& [arg, value] : s.args) {
    llvm::Argument* a = f.getArg(arg);
    llvm::Value* eq = b.CreateICmpEQ(a, llvm::ConstantInt::get(a->getType(), value));
    all = all ? b.CreateAnd(all, eq) : eq;
  }
  const std::uint64_t others = s.calls > s.matched ? s.calls - s.matched : 0;
  b.CreateCondBr(all, to_spec, to_general,
                 llvm::MDBuilder(ctx).createBranchWeights(
                     static_cast<std::uint32_t>(std::min<std::uint64_t>(s.matched, UINT32_MAX)),
                     static_cast<std::uint32_t>(std::min<std::uint64_t>(others, UINT32_MAX))));
  std::vector<llvm::Value*> forwarded;
  for (llvm::Argument& a : f.args())
    forwarded.push_back(&a);
  for (auto [block, callee] : {std::pair{to_spec, &spec}, std::pair{to_general, &general}}) {
    b.SetInsertPoint(block);
    llvm::CallInst* call = b.CreateCall(callee, forwarded);
    call->setCallingConv(f.getCallingConv());
    // The parameters' and the result's attributes (signext, noundef, ...),
    // not the function's own (noinline would keep the clone out of line).
    call->setAttributes(f.getAttributes().removeFnAttributes(ctx));
    call->setTailCall();
    if (f.getReturnType()->isVoidTy())
      b.CreateRetVoid();
    else
      b.CreateRet(call);
  }
  // The guard itself belongs at the call sites, where a constant argument
  // folds it away: a compare and a call cost the inliner next to nothing.
  // (Not alwaysinline: the thunks call entries with a noinline call site.)
  f.removeFnAttr(llvm::Attribute::NoInline);
  f.addFnAttr(llvm::Attribute::InlineHint);
}

// An internal copy of `f` named `f.<suffix>`, with `fraction` of its entry count.
llvm::Function* clone_body(llvm::Function& f, std::string_view suffix, std::uint64_t calls_share,
                           std::uint64_t calls) {
  llvm::ValueToValueMapTy vmap;
  llvm::Function* c = llvm::CloneFunction(&f, vmap);
  c->setName(f.getName() + llvm::StringRef(suffix.data(), suffix.size()));
  c->setLinkage(llvm::GlobalValue::InternalLinkage);
  c->setVisibility(llvm::GlobalValue::DefaultVisibility);
  c->setDLLStorageClass(llvm::GlobalValue::DefaultStorageClass);
  c->setComdat(nullptr);
  c->setUnnamedAddr(llvm::GlobalValue::UnnamedAddr::Global);
  if (auto count = f.getEntryCount(); count && calls > 0)
    c->setEntryCount(llvm::Function::ProfileCount(
        static_cast<std::uint64_t>(static_cast<long double>(count->getCount()) * calls_share /
                                   calls),
        count->getType()));
  return c;
}

} // namespace

void instrument_arguments(llvm::Module& m, std::vector<InstrumentedFunction>& layout) {
  llvm::LLVMContext& ctx = m.getContext();
  auto* i64 = llvm::Type::getInt64Ty(ctx);
  auto* ptr = llvm::PointerType::getUnqual(ctx);
  llvm::FunctionCallee hook =
      m.getOrInsertFunction(kArgValueHook, llvm::Type::getVoidTy(ctx), i64, ptr);
  if (auto* hf = llvm::dyn_cast<llvm::Function>(hook.getCallee()))
    hf->addFnAttr(llvm::Attribute::NoUnwind);
  const std::map<std::string, llvm::Function*> by_name = functions_by_pgo_name(m);
  for (std::size_t i = 0; i < layout.size(); ++i) {
    auto it = by_name.find(layout[i].pgo_name);
    if (it == by_name.end()) continue;
    llvm::Function& f = *it->second;
    if (!cloneable(f)) continue; // nothing to specialize on later
    std::vector<std::uint32_t> args;
    for (llvm::Argument& a : f.args())
      if (profilable(a) && args.size() < kMaxProfiledArgs) args.push_back(a.getArgNo());
    if (args.empty()) continue;
    auto* array_type = llvm::ArrayType::get(ptr, args.size());
    auto* slots = new llvm::GlobalVariable(m, array_type, false, llvm::GlobalValue::ExternalLinkage,
                                           llvm::ConstantAggregateZero::get(array_type),
                                           std::string(kArgSlotsPrefix) + std::to_string(i));
    slots->setDSOLocal(true);
    llvm::IRBuilder<> b(&*f.getEntryBlock().getFirstNonPHIOrDbgOrAlloca());
    for (std::size_t k = 0; k < args.size(); ++k) {
      llvm::Value* value = b.CreateZExt(f.getArg(args[k]), i64);
      llvm::Value* slot = b.CreateConstInBoundsGEP2_64(array_type, slots, 0, k);
      b.CreateCall(hook, {value, slot});
    }
    layout[i].arg_sites = std::move(args);
  }
}

SpecializationPlan specialize_functions(llvm::Module& m, const fdo::ProfileDoc& profile) {
  SpecializationPlan plan;
  const fdo::Knobs& knobs = profile.knobs;
  if (knobs.spec_min_share <= 0 || knobs.spec_max_clones <= 0) return plan;
  llvm::ProfileSummaryInfo psi(m);
  if (!psi.hasProfileSummary()) return plan;
  const std::map<std::string, llvm::Function*> by_name = functions_by_pgo_name(m);

  std::vector<Candidate> candidates;
  for (const auto& [name, fp] : profile.functions) {
    if (fp.arg_values.empty()) continue;
    auto it = by_name.find(name);
    if (it == by_name.end()) continue;
    llvm::Function& f = *it->second;
    // No entry count: the profile did not annotate the function (its counts
    // were for another CFG), so its argument records are not trusted either.
    if (!f.getEntryCount() || !cloneable(f)) continue;
    const std::uint64_t heat = heat_of(fp);
    if (!psi.isHotCount(heat)) continue;
    Candidate c{&f, name, heat, {}};
    c.spec.function = name;
    std::vector<std::pair<double, std::uint32_t>> bound; // share, index into arg_values
    for (std::uint32_t k = 0; k < fp.arg_values.size(); ++k) {
      const fdo::ArgValues& av = fp.arg_values[k];
      if (av.arg >= f.arg_size() || av.values.empty() || !profilable(*f.getArg(av.arg))) continue;
      const unsigned bits = f.getArg(av.arg)->getType()->getIntegerBitWidth();
      const std::uint64_t value = av.values.front().first;
      if (bits < 64 && (value >> bits) != 0) continue; // not a value of this argument's type
      const std::uint64_t total = av.total();
      // Two calls are no evidence of anything.
      if (total < 4) continue;
      const double share = static_cast<double>(av.values.front().second) / total;
      if (share * 100.0 < knobs.spec_min_share) continue;
      bound.emplace_back(share, k);
    }
    if (bound.empty()) continue;
    std::stable_sort(bound.begin(), bound.end(),
                     [](const auto& a, const auto& b) { return a.first > b.first; });
    // The least dominant bound value bounds how many calls take the clone.
    const fdo::ArgValues& least = fp.arg_values[bound.back().second];
    c.spec.calls = least.total();
    c.spec.matched = least.values.front().second;
    for (const auto& [share, k] : bound)
      c.spec.args.emplace_back(fp.arg_values[k].arg, fp.arg_values[k].values.front().first);
    std::sort(c.spec.args.begin(), c.spec.args.end());
    c.spec.instructions = instruction_count(f);
    candidates.push_back(std::move(c));
  }
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Candidate& a, const Candidate& b) { return a.heat > b.heat; });

  // Code growth: the clones together copy at most a quarter of the module's
  // instructions (or 2,000, whichever is more: small programs are all hot).
  std::uint64_t module_size = 0;
  for (const llvm::Function& f : m)
    module_size += instruction_count(f);
  const std::uint64_t growth_budget = std::max<std::uint64_t>(2000, module_size / 4);
  std::uint64_t grown = 0;
  for (Candidate& c : candidates) {
    if (plan.made.size() >= static_cast<std::size_t>(knobs.spec_max_clones)) {
      plan.skipped.push_back(c.pgo_name + ": over the clone budget (knobs.spec_max_clones " +
                             std::to_string(knobs.spec_max_clones) + ")");
      continue;
    }
    if (grown + c.spec.instructions > growth_budget) {
      plan.skipped.push_back(c.pgo_name + ": over the code growth budget (" +
                             std::to_string(grown + c.spec.instructions) + " of " +
                             std::to_string(growth_budget) + " instructions)");
      continue;
    }
    grown += c.spec.instructions;
    llvm::Function& f = *c.f;
    llvm::Function* spec = clone_body(f, kSpecializedSuffix, c.spec.matched, c.spec.calls);
    llvm::Function* general =
        clone_body(f, kGeneralSuffix, c.spec.calls - c.spec.matched, c.spec.calls);
    for (const auto& [arg, value] : c.spec.args) {
      llvm::Argument* a = spec->getArg(arg);
      a->replaceAllUsesWith(llvm::ConstantInt::get(a->getType(), value));
    }
    make_dispatcher(f, *spec, *general, c.spec);
    plan.made.push_back(std::move(c.spec));
  }
  return plan;
}

} // namespace fdo::jit::detail
