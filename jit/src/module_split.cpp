#include "module_split.h"

#include "part_keys.h"

#include <algorithm>
#include <llvm/ADT/DenseMap.h>
#include <llvm/ADT/DenseSet.h>
#include <llvm/ADT/SmallPtrSet.h>
#include <llvm/Analysis/ProfileSummaryInfo.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/GlobalAlias.h>
#include <llvm/IR/GlobalIFunc.h>
#include <llvm/IR/InstIterator.h>
#include <llvm/IR/Instructions.h>
#include <llvm/Transforms/Utils/Cloning.h>
#include <llvm/Transforms/Utils/ValueMapper.h>
#include <string>
#include <vector>

namespace fdo::jit::detail {

namespace {

// The global values `c` refers to, through constant expressions and
// aggregates.
void globals_in(const llvm::Constant* c, llvm::SmallPtrSetImpl<const llvm::Constant*>& seen,
                std::vector<const llvm::GlobalValue*>& out) {
  if (!seen.insert(c).second) return;
  if (const auto* gv = llvm::dyn_cast<llvm::GlobalValue>(c)) {
    out.push_back(gv);
    return;
  }
  for (const llvm::Value* op : c->operands())
    if (const auto* oc = llvm::dyn_cast<llvm::Constant>(op)) globals_in(oc, seen, out);
}

std::vector<const llvm::GlobalValue*> globals_used_by(const llvm::Function& f) {
  std::vector<const llvm::GlobalValue*> out;
  llvm::SmallPtrSet<const llvm::Constant*, 32> seen;
  for (const llvm::Instruction& i : llvm::instructions(f))
    for (const llvm::Value* op : i.operands())
      if (const auto* c = llvm::dyn_cast<llvm::Constant>(op)) globals_in(c, seen, out);
  if (f.hasPersonalityFn()) globals_in(f.getPersonalityFn(), seen, out);
  return out;
}

std::vector<const llvm::GlobalValue*> globals_used_by(const llvm::GlobalVariable& g) {
  std::vector<const llvm::GlobalValue*> out;
  llvm::SmallPtrSet<const llvm::Constant*, 8> seen;
  if (g.hasInitializer()) globals_in(g.getInitializer(), seen, out);
  return out;
}

// The function a constant takes a block's address in, if any.
const llvm::Function* block_owner(const llvm::Constant* c,
                                  llvm::SmallPtrSetImpl<const llvm::Constant*>& seen) {
  if (!seen.insert(c).second) return nullptr;
  if (const auto* ba = llvm::dyn_cast<llvm::BlockAddress>(c)) return ba->getFunction();
  if (llvm::isa<llvm::GlobalValue>(c)) return nullptr;
  for (const llvm::Value* op : c->operands())
    if (const auto* oc = llvm::dyn_cast<llvm::Constant>(op))
      if (const llvm::Function* f = block_owner(oc, seen)) return f;
  return nullptr;
}

bool importable(const llvm::Function& f) {
  if (llvm::any_of(f, [](const llvm::BasicBlock& b) { return b.hasAddressTaken(); }))
    return false; // its blocks' addresses are its own
  return !f.isDeclaration() && !f.hasFnAttribute(llvm::Attribute::NoInline) &&
         !f.hasFnAttribute(llvm::Attribute::OptimizeNone) && !f.hasComdat() && !f.isInterposable();
}

// How many instructions a copy of `f` may have to be imported, before the
// per-level decay: kImportInstructions, scaled by what the module's profile
// (when it has one) says of f's entry.
double import_limit(const llvm::Function& f, const llvm::ProfileSummaryInfo& psi) {
  if (!psi.hasProfileSummary() || !f.getEntryCount()) return kImportInstructions;
  if (psi.isFunctionEntryHot(&f)) return double(kImportInstructions) * kHotImportMultiplier;
  if (psi.isFunctionEntryCold(&f)) return 0;
  return kImportInstructions;
}

} // namespace

PartPlan plan_by_module_order(const llvm::Module& m, unsigned parts) {
  std::vector<const llvm::Function*> defined;
  std::size_t total = 0;
  for (const llvm::Function& f : m)
    if (!f.isDeclaration()) {
      defined.push_back(&f);
      total += f.getInstructionCount() + 1;
    }
  PartPlan plan;
  plan.parts = std::max(1u, std::min<unsigned>(parts, static_cast<unsigned>(defined.size())));
  std::size_t so_far = 0;
  unsigned part = 0;
  for (const llvm::Function* f : defined) {
    plan.part_of[f->getName()] = part;
    so_far += f->getInstructionCount() + 1;
    if (part + 1 < plan.parts && so_far * plan.parts >= total * (part + 1)) ++part;
  }
  return plan;
}

void split_by_module_order(llvm::Module& m, const PartPlan& plan,
                           const std::function<void(std::unique_ptr<llvm::Module>)>& take) {
  // 1. Functions: where the plan put them.
  std::vector<llvm::Function*> defined;
  for (llvm::Function& f : m)
    if (!f.isDeclaration()) defined.push_back(&f);
  const unsigned parts = std::max(1u, plan.parts);
  llvm::DenseMap<const llvm::GlobalValue*, unsigned> home;
  {
    unsigned part = 0;
    for (llvm::Function* f : defined) {
      if (auto it = plan.part_of.find(f->getName()); it != plan.part_of.end())
        part = std::min(it->second, parts - 1);
      home[f] = part;
    }
  }
  // 2. Variables with the first function (in module order) that uses them,
  // else with the first variable whose initializer does, else in part 0
  // (llvm.* arrays among them).
  // (Values are read out of `home` before an insertion can move its buckets.)
  for (llvm::Function* f : defined) {
    const unsigned part = home.lookup(f);
    for (const llvm::GlobalValue* g : globals_used_by(*f))
      if (llvm::isa<llvm::GlobalVariable>(g) && !g->isDeclaration()) home.try_emplace(g, part);
  }
  for (bool changed = true; changed;) {
    changed = false;
    for (llvm::GlobalVariable& v : m.globals()) {
      auto it = home.find(&v);
      if (v.isDeclaration() || it == home.end()) continue;
      const unsigned part = it->second;
      for (const llvm::GlobalValue* g : globals_used_by(v))
        if (llvm::isa<llvm::GlobalVariable>(g) && !g->isDeclaration() &&
            home.try_emplace(g, part).second)
          changed = true;
    }
  }
  for (llvm::GlobalVariable& v : m.globals())
    if (!v.isDeclaration()) home.try_emplace(&v, 0u);
  // A table of block addresses (computed goto) can only live beside the
  // function whose blocks it names.
  for (llvm::GlobalVariable& v : m.globals()) {
    llvm::SmallPtrSet<const llvm::Constant*, 8> seen;
    if (v.hasInitializer())
      if (const llvm::Function* f = block_owner(v.getInitializer(), seen)) {
        const unsigned part = home.lookup(f);
        home[&v] = part;
      }
  }
  // Aliases and ifuncs go with what they name.
  for (llvm::GlobalAlias& a : m.aliases())
    if (const llvm::GlobalObject* base = a.getAliaseeObject()) home[&a] = home.lookup(base);
  for (llvm::GlobalIFunc& i : m.ifuncs())
    if (const llvm::Function* r = i.getResolverFunction()) home[&i] = home.lookup(r);
  // A comdat stays whole, with its first member in module order (not in
  // `home`'s order, which follows addresses: the split must not depend on
  // where the allocator put the globals).
  llvm::DenseMap<const llvm::Comdat*, unsigned> comdat_home;
  for (llvm::GlobalValue& g : m.global_values())
    if (const llvm::Comdat* c = g.getComdat(); c && home.count(&g))
      comdat_home.try_emplace(c, home.lookup(&g));
  for (auto& [gv, part] : home)
    if (const llvm::Comdat* c = llvm::cast<llvm::GlobalValue>(gv)->getComdat())
      part = comdat_home[c];

  // 3. Imports: each part gets copies of the small functions of other parts
  // its functions call, and of what those call in turn (ThinLTO's import,
  // with its limit shrinking by kImportDecay a level): an inliner that sees
  // a copy also sees what the copy calls.
  std::vector<llvm::DenseSet<const llvm::GlobalValue*>> imports(parts);
  std::vector<std::pair<const llvm::Function*, double>> work;
  const llvm::ProfileSummaryInfo psi(m);
  auto calls_out = [&](unsigned part, const llvm::Function& from, double share) {
    for (const llvm::Instruction& i : llvm::instructions(from))
      if (const auto* call = llvm::dyn_cast<llvm::CallBase>(&i))
        if (const llvm::Function* callee = call->getCalledFunction();
            callee && importable(*callee) && home.lookup(callee) != part &&
            callee->getInstructionCount() <= import_limit(*callee, psi) * share &&
            imports[part].insert(callee).second)
          work.emplace_back(callee, share * kImportDecay);
  };
  for (llvm::Function* f : defined) {
    const unsigned part = home.lookup(f);
    calls_out(part, *f, 1.0);
    while (!work.empty()) {
      auto [next, share] = work.back();
      work.pop_back();
      calls_out(part, *next, share);
    }
  }

  // 4. What each part refers to that another part defines: made a hidden
  // global of its part, kept even when its part does not use it.
  llvm::DenseSet<const llvm::GlobalValue*> shared;
  auto note_uses = [&](unsigned part, const std::vector<const llvm::GlobalValue*>& used) {
    for (const llvm::GlobalValue* g : used)
      if (!g->isDeclaration() && home.lookup(g) != part) shared.insert(g);
  };
  for (llvm::Function* f : defined)
    note_uses(home.lookup(f), globals_used_by(*f));
  for (unsigned p = 0; p < parts; ++p)
    for (const llvm::GlobalValue* g : imports[p])
      note_uses(p, globals_used_by(*llvm::cast<llvm::Function>(g)));
  for (llvm::GlobalVariable& v : m.globals())
    if (!v.isDeclaration()) note_uses(home.lookup(&v), globals_used_by(v));
  for (unsigned p = 0; p < parts; ++p)
    for (const llvm::GlobalValue* g : imports[p])
      shared.insert(g);
  // (In module order: a name made unique takes the next free number.)
  for (llvm::GlobalValue& g : m.global_values()) {
    if (!shared.contains(&g) || !g.isDiscardableIfUnused()) continue;
    if (g.hasLocalLinkage()) g.setVisibility(llvm::GlobalValue::HiddenVisibility);
    g.setLinkage(llvm::GlobalValue::ExternalLinkage);
    g.setDSOLocal(true);
    if (!g.hasName()) g.setName("__fdo_part_shared");
  }

  // 5. Each part: its own definitions, its imports as available_externally
  // copies, every other global a declaration.
  for (unsigned p = 0; p < parts; ++p) {
    llvm::ValueToValueMapTy vmap;
    std::unique_ptr<llvm::Module> part =
        llvm::CloneModule(m, vmap, [&](const llvm::GlobalValue* g) {
          return home.lookup(g) == p || imports[p].contains(g);
        });
    for (const llvm::GlobalValue* g : imports[p]) {
      auto* copy = llvm::cast<llvm::Function>(vmap[g]);
      copy->setLinkage(llvm::GlobalValue::AvailableExternallyLinkage);
      normalize_import_profile(*copy, psi);
    }
    // The llvm.* arrays live in part 0; elsewhere their declarations go.
    std::vector<llvm::GlobalVariable*> stray;
    for (llvm::GlobalVariable& v : part->globals())
      if (v.isDeclaration() && v.getName().startswith("llvm.") && v.use_empty())
        stray.push_back(&v);
    for (llvm::GlobalVariable* v : stray)
      v->eraseFromParent();
    drop_unused_declarations(*part);
    strip_local_names(*part);
    take(std::move(part));
  }
}

} // namespace fdo::jit::detail
