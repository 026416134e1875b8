#include "cold_code.h"

#include <llvm/Analysis/LazyCallGraph.h>
#include <llvm/Analysis/LoopInfo.h>
#include <llvm/IR/Function.h>

namespace fdo::jit::detail {

std::size_t ColdFunctions::mark(llvm::Module& m) {
  for (llvm::Function& f : m) {
    // Size was asked for (the program's own optsize/minsize, or the profile's
    // i-cache layout putting it cold for size: code_layout.h): -O0 code is
    // bigger, and the verifier rejects optnone beside them.
    if (f.isDeclaration() || f.hasFnAttribute(llvm::Attribute::AlwaysInline) ||
        f.hasFnAttribute(llvm::Attribute::OptimizeForSize) ||
        f.hasFnAttribute(llvm::Attribute::MinSize))
      continue;
    const std::optional<llvm::Function::ProfileCount> count = f.getEntryCount();
    if (!count || count->getCount() != 0) continue;
    f.removeFnAttr(llvm::Attribute::InlineHint);
    f.addFnAttr(llvm::Attribute::NoInline);
    f.addFnAttr(llvm::Attribute::OptimizeNone);
    // Codegen's own placement of cold functions (CodeGenPrepare) is one of
    // the passes optnone skips: put it with the unlikely text here.
    f.setSectionPrefix("unlikely");
    cold_.insert(&f);
  }
  return cold_.size();
}

void ColdFunctions::adopt(const llvm::Module& m) {
  for (const llvm::Function& f : m) {
    if (f.isDeclaration() || !f.hasFnAttribute(llvm::Attribute::OptimizeNone)) continue;
    const std::optional<llvm::Function::ProfileCount> count = f.getEntryCount();
    const std::optional<llvm::StringRef> prefix = f.getSectionPrefix();
    if (count && count->getCount() == 0 && prefix && *prefix == "unlikely") cold_.insert(&f);
  }
}

bool ColdFunctions::skips(llvm::Any ir) const {
  if (cold_.empty()) return false;
  if (const auto* f = llvm::any_cast<const llvm::Function*>(&ir)) return cold_.count(*f) != 0;
  if (const auto* l = llvm::any_cast<const llvm::Loop*>(&ir))
    return cold_.count((*l)->getHeader()->getParent()) != 0;
  if (const auto* scc = llvm::any_cast<const llvm::LazyCallGraph::SCC*>(&ir)) {
    for (const llvm::LazyCallGraph::Node& n : **scc)
      if (!cold_.count(&n.getFunction())) return false;
    return true;
  }
  return false;
}

void ColdFunctions::register_callbacks(llvm::PassInstrumentationCallbacks& pic) {
  pic.registerShouldRunOptionalPassCallback(
      [this](llvm::StringRef, llvm::Any ir) { return !skips(ir); });
}

} // namespace fdo::jit::detail
