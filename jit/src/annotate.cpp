#include "fdo/jit/annotate.h"

#include "llvm_support.h"
#include "module_prep.h"
#include "pgo.h"
#include "pipeline_options.h"

#include <algorithm>
#include <cctype>
#include <llvm/IR/CFG.h>
#include <llvm/IR/ModuleSlotTracker.h>
#include <llvm/IR/ProfDataUtils.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/ProfileData/InstrProf.h>
#include <llvm/Support/PGOOptions.h>
#include <llvm/Support/raw_ostream.h>
#include <map>

namespace fdo::jit {

using namespace detail;

namespace {

using Names = std::map<std::string, std::string>;

bool symbol_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '$' ||
         c == '-';
}

// Canonical local symbols (`@fdo.local.3`) back to the names they had.
std::string with_source_names(const std::string& text, const Names& local_names) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    if (text[i] != '@') {
      out += text[i++];
      continue;
    }
    std::size_t end = i + 1;
    while (end < text.size() && symbol_char(text[end]))
      ++end;
    auto it = local_names.find(text.substr(i + 1, end - i - 1));
    out += '@';
    out += it != local_names.end() ? it->second : text.substr(i + 1, end - i - 1);
    i = end;
  }
  return out;
}

// The count of the edges from `from` to `to`: the branch weights
// PGOInstrumentationUse wrote (exact unless scaled), or the block's own count
// when it has one successor or never ran.
std::optional<std::uint64_t>
edge_count(const llvm::BasicBlock& from, const llvm::BasicBlock& to,
           const std::map<const llvm::BasicBlock*, std::uint64_t>& known) {
  const llvm::Instruction* term = from.getTerminator();
  llvm::SmallVector<std::uint32_t, 4> weights;
  if (llvm::extractBranchWeights(*term, weights) && weights.size() == term->getNumSuccessors()) {
    std::uint64_t sum = 0;
    for (unsigned i = 0; i < term->getNumSuccessors(); ++i)
      if (term->getSuccessor(i) == &to) sum += weights[i];
    return sum;
  }
  auto it = known.find(&from);
  if (it == known.end()) return std::nullopt;
  if (it->second == 0) return 0;
  unsigned edges = 0;
  for (unsigned i = 0; i < term->getNumSuccessors(); ++i)
    if (term->getSuccessor(i) == &to) ++edges;
  if (edges == term->getNumSuccessors()) return it->second;
  return std::nullopt; // a multi-way terminator that ran, without weights
}

// Block counts from the entry count and the edge counts, to a fixed point: a
// loop's back edge is a weighted branch, so every cycle that ran resolves.
std::map<const llvm::BasicBlock*, std::uint64_t> solve_block_counts(const llvm::Function& f,
                                                                    std::uint64_t entry) {
  std::map<const llvm::BasicBlock*, std::uint64_t> known;
  known[&f.getEntryBlock()] = entry;
  for (bool changed = true; changed;) {
    changed = false;
    for (const llvm::BasicBlock& bb : f) {
      if (known.count(&bb)) continue;
      std::uint64_t total = 0;
      bool complete = true;
      llvm::SmallPtrSet<const llvm::BasicBlock*, 4> seen;
      for (const llvm::BasicBlock* pred : llvm::predecessors(&bb)) {
        if (!seen.insert(pred).second) continue;
        std::optional<std::uint64_t> e = edge_count(*pred, bb, known);
        if (!e) {
          complete = false;
          break;
        }
        total += *e;
      }
      if (!complete) continue;
      known[&bb] = total;
      changed = true;
    }
  }
  return known;
}

// Weights scaled below the counts show as a weighted block whose out-edges do
// not add up to its own count.
bool weights_scaled(const llvm::Function& f,
                    const std::map<const llvm::BasicBlock*, std::uint64_t>& known) {
  for (const llvm::BasicBlock& bb : f) {
    llvm::SmallVector<std::uint32_t, 4> weights;
    auto it = known.find(&bb);
    if (it == known.end() || !llvm::extractBranchWeights(*bb.getTerminator(), weights)) continue;
    std::uint64_t sum = 0;
    for (std::uint32_t w : weights)
      sum += w;
    if (sum != it->second) return true;
  }
  return false;
}

std::string block_label(const llvm::BasicBlock& bb, llvm::ModuleSlotTracker& mst) {
  if (bb.hasName()) return bb.getName().str();
  int slot = mst.getLocalSlot(&bb);
  return slot >= 0 ? std::to_string(slot) : std::string("?");
}

AnnotatedFunction annotate_function(const llvm::Function& f, llvm::ModuleSlotTracker& mst,
                                    const CanonicalNames& names) {
  AnnotatedFunction out;
  out.pgo_name = llvm::getPGOFuncName(f);
  auto src = names.source_names.find(out.pgo_name);
  out.source_name = src != names.source_names.end() ? src->second : out.pgo_name;
  auto local = names.local_names.find(f.getName().str());
  out.symbol = local != names.local_names.end() ? local->second : f.getName().str();
  {
    std::string text;
    llvm::raw_string_ostream os(text);
    f.print(os);
    os.flush();
    std::size_t start = text.find("define ");
    std::size_t end = text.find('\n', start == std::string::npos ? 0 : start);
    out.signature =
        with_source_names(text.substr(start == std::string::npos ? 0 : start,
                                      end == std::string::npos ? std::string::npos : end - start),
                          names.local_names);
  }
  std::map<const llvm::BasicBlock*, std::uint64_t> counts;
  if (std::optional<llvm::Function::ProfileCount> entry = f.getEntryCount()) {
    out.entry_count = entry->getCount();
    counts = solve_block_counts(f, *out.entry_count);
    out.approximate = weights_scaled(f, counts);
  }
  mst.incorporateFunction(f);
  for (const llvm::BasicBlock& bb : f) {
    AnnotatedBlock block;
    block.label = block_label(bb, mst);
    if (auto it = counts.find(&bb); it != counts.end()) block.count = it->second;
    for (const llvm::Instruction& inst : bb) {
      std::string line;
      llvm::raw_string_ostream os(line);
      inst.print(os, mst);
      os.flush();
      std::size_t first = line.find_first_not_of(' ');
      block.lines.push_back(with_source_names(
          first == std::string::npos ? line : line.substr(first), names.local_names));
    }
    out.blocks.push_back(std::move(block));
  }
  return out;
}

} // namespace

Expected<Annotation> annotate(std::string_view program_bytes, const fdo::ProfileDoc& profile,
                              const Limits& limits, const std::string& temp_dir) {
  ensure_llvm_initialized();
  llvm::LLVMContext ctx;
  DiagnosticCollector diagnostics(ctx);
  FDO_TRY(auto module, parse_and_verify(program_bytes, limits, ctx));
  llvm::Module& m = *module;
  auto tm = create_host_target_machine(codegen_level(profile.knobs));
  if (!tm) return to_fdo_error(tm.takeError(), Errc::internal, "target machine");
  FDO_TRY(CanonicalNames names, canonicalize(m, **tm));

  auto file = ProfileFile::write(profile, temp_dir);
  if (!file) return to_fdo_error(file.takeError(), Errc::internal, "profile use");
  if (!*file)
    return make_error(Errc::invalid_argument,
                      "the profile holds no counts yet (no instrumented stage has run)");
  const ProfileFile& profile_file = **file;

  // The same pipeline as an optimized compile, stopped after
  // PGOInstrumentationUse: every optional pass after it is skipped, and the
  // annotation is taken while the module is as PGO use left it.
  Annotation result;
  bool captured = false;
  llvm::PassInstrumentationCallbacks pic;
  pic.registerShouldRunOptionalPassCallback([&](llvm::StringRef, llvm::Any) { return !captured; });
  pic.registerAfterPassCallback(
      [&](llvm::StringRef pass, llvm::Any ir, const llvm::PreservedAnalyses&) {
        if (pass != "PGOInstrumentationUse" || captured) return;
        const auto* mod = llvm::any_cast<const llvm::Module*>(&ir);
        if (!mod) return;
        llvm::ModuleSlotTracker mst(*mod);
        for (const llvm::Function& f : **mod)
          if (!f.isDeclaration()) result.functions.push_back(annotate_function(f, mst, names));
        captured = true;
      });
  llvm::PassBuilder pb(tm->get(), tuning_options(profile.knobs),
                       llvm::PGOOptions(profile_file.path(), "", "", llvm::PGOOptions::IRUse),
                       &pic);
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  const llvm::OptimizationLevel level = optimization_level(profile.knobs);
  llvm::ModulePassManager mpm = level == llvm::OptimizationLevel::O0
                                    ? pb.buildO0DefaultPipeline(level)
                                    : pb.buildPerModuleDefaultPipeline(level);
  mpm.run(m, mam);
  if (!captured)
    return make_error(Errc::unsupported,
                      "the pipeline for these knobs runs no PGOInstrumentationUse (opt_level 0?)");
  if (!diagnostics.errors().empty()) return make_error(Errc::compile, diagnostics.errors().front());
  result.diagnostics = diagnostics.warnings();
  return result;
}

} // namespace fdo::jit
