#include "fdo/jit/annotate.h"

#include "block_map.h"
#include "llvm_support.h"
#include "module_prep.h"
#include "pgo.h"
#include "pipeline_options.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <llvm/IR/CFG.h>
#include <llvm/IR/DebugInfoMetadata.h>
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

// The block locations annotate() adds make LLVM print `, !dbg !N` after each
// instruction and ` !dbg !N` in the define line: bookkeeping of ours, not of
// the program, so it is left out of the text shown.
std::string without_block_locations(std::string text) {
  static constexpr std::string_view kDbg = "!dbg !";
  for (std::size_t at = text.find(kDbg); at != std::string::npos; at = text.find(kDbg, at)) {
    std::size_t end = at + kDbg.size();
    while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end])))
      ++end;
    std::size_t start = at;
    if (start >= 2 && text.compare(start - 2, 2, ", ") == 0)
      start -= 2;
    else if (start >= 1 && text[start - 1] == ' ')
      start -= 1;
    text.erase(start, end - start);
    at = start;
  }
  return text;
}

// The profile's per-block sample tallies (hardware.sampling.blocks, written
// by the daemon from the block map): function -> canonical block -> samples.
struct Tallies {
  SamplingSummary summary;
  std::map<std::string, std::map<std::uint32_t, EventSamples>> blocks;
};

std::optional<std::uint64_t> sample_count(const nlohmann::json& v) {
  if (v.is_number_unsigned()) return v.get<std::uint64_t>();
  if (v.is_number_integer() && v.get<std::int64_t>() >= 0)
    return static_cast<std::uint64_t>(v.get<std::int64_t>());
  return std::nullopt;
}

std::optional<std::uint32_t> block_index(std::string_view s) {
  std::uint32_t v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || ptr != s.data() + s.size() || (s.size() > 1 && s[0] == '0'))
    return std::nullopt;
  return v;
}

// Entries that do not fit the schema are left out, each named in
// `problems`; the rest is shown.
std::optional<Tallies> read_tallies(const nlohmann::json& hardware,
                                    std::vector<std::string>& problems) {
  if (!hardware.is_object()) return std::nullopt;
  auto sampling = hardware.find("sampling");
  if (sampling == hardware.end() || !sampling->is_object()) return std::nullopt;
  auto blocks = sampling->find("blocks");
  if (blocks == sampling->end()) return std::nullopt;
  const std::string where = "the profile's hardware.sampling.blocks";
  if (!blocks->is_object()) {
    problems.push_back(where + " is not an object; per-block samples are not shown");
    return std::nullopt;
  }
  Tallies t;
  auto event = sampling->find("event");
  if (event != sampling->end() && event->is_string())
    t.summary.clock_event = event->get<std::string>();
  auto samples = sampling->find("samples");
  if (samples != sampling->end()) {
    if (std::optional<std::uint64_t> n = sample_count(*samples))
      t.summary.clock_samples = *n;
    else
      problems.push_back("the profile's hardware.sampling.samples is not a sample count; "
                         "sample shares are not shown");
  }
  for (auto e = blocks->begin(); e != blocks->end(); ++e) {
    if (!e->is_object()) {
      problems.push_back(where + "[" + e.key() + "] is not an object; left out");
      continue;
    }
    for (auto f = e->begin(); f != e->end(); ++f) {
      if (!f->is_object()) {
        problems.push_back(where + "[" + e.key() + "][" + f.key() + "] is not an object; left out");
        continue;
      }
      for (auto b = f->begin(); b != f->end(); ++b) {
        std::optional<std::uint32_t> index = block_index(b.key());
        std::optional<std::uint64_t> n = sample_count(*b);
        if (!index || !n) {
          problems.push_back(where + "[" + e.key() + "][" + f.key() + "][" + b.key() + "]: " +
                             (!index ? "not a block index" : "not a sample count") + "; left out");
          continue;
        }
        if (*n != 0) t.blocks[f.key()][*index][e.key()] += *n;
      }
    }
  }
  return t;
}

// The canonical block an instruction of `f` came from: the line of the block
// location add_block_locations() gave it (index + 1). Code inlined from
// another function carries that function's location (and counts for its
// blocks); instructions merged from several blocks get line 0 and belong to
// none.
std::optional<std::uint32_t> canonical_block_of(const llvm::Instruction& inst,
                                                const llvm::DISubprogram* sp) {
  const llvm::DebugLoc& dl = inst.getDebugLoc();
  if (sp == nullptr || !dl || dl.getInlinedAt() != nullptr || dl.getLine() == 0 ||
      dl->getScope()->getSubprogram() != sp)
    return std::nullopt;
  return dl.getLine() - 1;
}

// Each canonical block goes to the shown block holding most of its
// instructions (the first of equals): one home per index, so no sample is
// counted twice when a block was split or duplicated.
void attach_samples(const llvm::Function& f, AnnotatedFunction& out, const Tallies* tallies) {
  std::map<std::uint32_t, std::map<std::size_t, std::size_t>> held; // index -> block -> insts
  std::size_t pos = 0;
  for (const llvm::BasicBlock& bb : f) {
    for (const llvm::Instruction& inst : bb)
      if (std::optional<std::uint32_t> index = canonical_block_of(inst, f.getSubprogram()))
        ++held[*index][pos];
    ++pos;
  }
  std::map<std::uint32_t, std::size_t> home;
  for (const auto& [index, blocks] : held) {
    auto best = std::max_element(blocks.begin(), blocks.end(), [](const auto& a, const auto& b) {
      return a.second < b.second || (a.second == b.second && a.first > b.first);
    });
    home[index] = best->first;
    out.blocks[best->first].canonical_blocks.push_back(index);
  }
  if (tallies == nullptr) return;
  auto fn = tallies->blocks.find(out.pgo_name);
  if (fn != tallies->blocks.end())
    for (const auto& [index, samples] : fn->second) {
      auto h = home.find(index);
      EventSamples& into = h != home.end() ? out.blocks[h->second].samples : out.unplaced_samples;
      for (const auto& [event, n] : samples)
        into[event] += n;
    }
  const SamplingSummary& s = tallies->summary;
  if (s.clock_event.empty() || s.clock_samples == 0) return;
  for (AnnotatedBlock& b : out.blocks) {
    // A block of code inlined from elsewhere holds no canonical block of
    // this function: its samples count for the function it came from.
    if (b.canonical_blocks.empty()) continue;
    auto n = b.samples.find(s.clock_event);
    b.sample_share = n == b.samples.end()
                         ? 0.0
                         : static_cast<double>(n->second) / static_cast<double>(s.clock_samples);
  }
}

// Samples of functions the IR shown no longer has (a local the pre-inliner
// inlined everywhere and deleted): named, so that none go unaccounted.
void note_unshown_functions(const Tallies& tallies, const CanonicalNames& names,
                            Annotation& result) {
  for (const auto& [fn, blocks] : tallies.blocks) {
    if (std::any_of(result.functions.begin(), result.functions.end(),
                    [&](const AnnotatedFunction& f) { return f.pgo_name == fn; }))
      continue;
    EventSamples total;
    for (const auto& [index, samples] : blocks)
      for (const auto& [event, n] : samples)
        total[event] += n;
    std::string text;
    for (const auto& [event, n] : total)
      text += (text.empty() ? "" : ", ") + std::to_string(n) + " " + event;
    auto src = names.source_names.find(fn);
    result.diagnostics.push_back(
        text + " samples of " + (src != names.source_names.end() ? src->second : fn) +
        ", which is no function of its own here (inlined everywhere before PGO use); they ran "
        "in its callers' code");
  }
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
                                    const CanonicalNames& names, const Tallies* tallies) {
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
        with_source_names(without_block_locations(text.substr(
                              start == std::string::npos ? 0 : start,
                              end == std::string::npos ? std::string::npos : end - start)),
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
          without_block_locations(first == std::string::npos ? line : line.substr(first)),
          names.local_names));
    }
    out.blocks.push_back(std::move(block));
  }
  attach_samples(f, out, tallies);
  return out;
}

} // namespace

Expected<Annotation> annotate(std::string_view program_bytes, const fdo::ProfileDoc& profile,
                              const Limits& limits) {
  ensure_llvm_initialized();
  llvm::LLVMContext ctx;
  DiagnosticCollector diagnostics(ctx);
  FDO_TRY(auto module, parse_and_verify(program_bytes, limits, ctx));
  llvm::Module& m = *module;
  auto tm = create_host_target_machine(codegen_level(profile.knobs));
  if (!tm) return to_fdo_error(tm.takeError(), Errc::internal, "target machine");
  FDO_TRY(CanonicalNames names, canonicalize(m, **tm));
  // The block locations of a compile (block_map.h), on the same canonical
  // module: line = canonical block index + 1, the numbering the block map
  // gave the samples, carried by LLVM to the IR shown below.
  add_block_locations(m);
  std::vector<std::string> problems;
  std::optional<Tallies> tallies = read_tallies(profile.hardware, problems);

  auto file = ProfileFile::write(profile);
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
  pic.registerAfterPassCallback([&](llvm::StringRef pass, llvm::Any ir,
                                    const llvm::PreservedAnalyses&) {
    if (pass != "PGOInstrumentationUse" || captured) return;
    const auto* mod = llvm::any_cast<const llvm::Module*>(&ir);
    if (!mod) return;
    llvm::ModuleSlotTracker mst(*mod);
    for (const llvm::Function& f : **mod)
      if (!f.isDeclaration())
        result.functions.push_back(annotate_function(f, mst, names, tallies ? &*tallies : nullptr));
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
  result.diagnostics.insert(result.diagnostics.end(), problems.begin(), problems.end());
  if (tallies) note_unshown_functions(*tallies, names, result);
  if (tallies) result.sampling = tallies->summary;
  return result;
}

} // namespace fdo::jit
