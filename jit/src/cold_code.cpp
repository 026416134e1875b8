#include "cold_code.h"

#include <algorithm>
#include <llvm/Analysis/BlockFrequencyInfo.h>
#include <llvm/Analysis/BranchProbabilityInfo.h>
#include <llvm/Analysis/LazyCallGraph.h>
#include <llvm/Analysis/LoopInfo.h>
#include <llvm/IR/Dominators.h>
#include <llvm/IR/Function.h>
#include <vector>

namespace fdo::jit::detail {

namespace {

// Marks what mark() chose, so that adopt() finds it in a part's module
// without judging the counts again (a part lacks the rest of the program).
constexpr const char* kBaselineAttr = "fdo-baseline";

// The function's profiled work: each block's count (its entry count scaled
// by the block's frequency, as the optimizer reads the profile) times its
// instructions.
double profiled_work(llvm::Function& f, std::uint64_t entry_count) {
  if (entry_count == 0) return 0;
  llvm::DominatorTree dt(f);
  llvm::LoopInfo li(dt);
  llvm::BranchProbabilityInfo bpi(f, li);
  llvm::BlockFrequencyInfo bfi(f, bpi, li);
  double work = 0;
  for (llvm::BasicBlock& bb : f)
    work += static_cast<double>(bfi.getBlockProfileCount(&bb).value_or(0)) *
            static_cast<double>(bb.size());
  return work;
}

} // namespace

std::size_t ColdFunctions::mark(llvm::Module& m) {
  struct Candidate {
    llvm::Function* f;
    double work;
  };
  std::vector<Candidate> candidates;
  double total = 0;
  for (llvm::Function& f : m) {
    if (f.isDeclaration()) continue;
    const std::optional<llvm::Function::ProfileCount> count = f.getEntryCount();
    if (!count) continue; // not in the profile: new code, no measure of its work
    const double work = profiled_work(f, count->getCount());
    total += work;
    // Size was asked for (the program's own optsize/minsize, or the profile's
    // i-cache layout putting it cold for size: code_layout.h): -O0 code is
    // bigger, and the verifier rejects optnone beside them.
    if (f.hasFnAttribute(llvm::Attribute::AlwaysInline) ||
        f.hasFnAttribute(llvm::Attribute::OptimizeForSize) ||
        f.hasFnAttribute(llvm::Attribute::MinSize))
      continue;
    candidates.push_back({&f, work});
  }
  // Least work first; ties in module order, so the choice is the same on
  // every compile of the same program and profile.
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Candidate& a, const Candidate& b) { return a.work < b.work; });
  const double budget = total * kBaselineWorkShare;
  double spent = 0;
  for (const Candidate& c : candidates) {
    if (spent + c.work > budget) break;
    spent += c.work;
    llvm::Function& f = *c.f;
    f.removeFnAttr(llvm::Attribute::InlineHint);
    f.addFnAttr(llvm::Attribute::NoInline);
    f.addFnAttr(llvm::Attribute::OptimizeNone);
    // Codegen's own placement of cold functions (CodeGenPrepare) is one of
    // the passes optnone skips: put it with the unlikely text here.
    f.setSectionPrefix("unlikely");
    f.addFnAttr(kBaselineAttr);
    cold_.insert(&f);
  }
  return cold_.size();
}

void ColdFunctions::adopt(const llvm::Module& m) {
  for (const llvm::Function& f : m)
    if (!f.isDeclaration() && f.hasFnAttribute(llvm::Attribute::OptimizeNone) &&
        f.hasFnAttribute(kBaselineAttr))
      cold_.insert(&f);
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
