#include "fdo/jit/compiler.h"

#include "arg_profile.h"
#include "block_map.h"
#include "code_layout.h"
#include "cold_code.h"
#include "fdo/jit/object_set.h"
#include "fdo/util/strings.h"
#include "fingerprint.h"
#include "llvm_support.h"
#include "module_prep.h"
#include "part_keys.h"
#include "partition.h"
#include "pgo.h"
#include "pgo_setup.h"
#include "pipeline_options.h"
#include "pipeline_prefix.h"
#include "rotate_idiom.h"
#include "thunks.h"

#include <algorithm>
#include <chrono>
#include <llvm/Analysis/TargetLibraryInfo.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/IR/DebugInfo.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Object/ObjectFile.h>
#include <llvm/Passes/OptimizationLevel.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/FileSystem.h>
#include <llvm/Support/PGOOptions.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Transforms/Utils/Cloning.h>

namespace fdo::jit {

using namespace detail;

namespace {

using Clock = std::chrono::steady_clock;

llvm::Expected<std::string> emit_object(llvm::Module& m, llvm::TargetMachine& tm) {
  llvm::SmallVector<char, 0> buffer;
  llvm::raw_svector_ostream os(buffer);
  llvm::legacy::PassManager pm;
  pm.add(new llvm::TargetLibraryInfoWrapperPass(llvm::Triple(m.getTargetTriple())));
  if (tm.addPassesToEmitFile(pm, os, nullptr, llvm::CGFT_ObjectFile))
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "the target cannot emit object files");
  pm.run(m);
  return std::string(buffer.data(), buffer.size());
}

std::size_t executable_bytes(const std::string& object) {
  auto file = llvm::object::ObjectFile::createObjectFile(
      llvm::MemoryBufferRef(llvm::StringRef(object), "object"));
  if (!file) {
    llvm::consumeError(file.takeError());
    return 0;
  }
  std::size_t total = 0;
  for (const llvm::object::SectionRef& section : (*file)->sections())
    if (section.isText()) total += section.getSize();
  return total;
}

struct Prepared {
  std::unique_ptr<llvm::Module> module;
  std::unique_ptr<llvm::TargetMachine> tm;
  CanonicalNames names;
};

Expected<Prepared> prepare(std::string_view bytes, const Limits& limits, llvm::LLVMContext& ctx,
                           llvm::CodeGenOpt::Level level, PhaseTimes& times) {
  Clock::time_point start = Clock::now();
  FDO_TRY(auto module, parse_and_verify(bytes, limits, ctx));
  times.parse = micros_since(start);

  start = Clock::now();
  auto tm = create_host_target_machine(level);
  if (!tm) return to_fdo_error(tm.takeError(), Errc::internal, "target machine");
  FDO_TRY(CanonicalNames names, canonicalize(*module, **tm));
  times.canonicalize = micros_since(start);
  return Prepared{std::move(module), std::move(*tm), std::move(names)};
}

} // namespace

std::string_view to_string(PartitionSplit s) {
  switch (s) {
  case PartitionSplit::inliner:
    return "inliner";
  case PartitionSplit::codegen:
    return "codegen";
  case PartitionSplit::none:
    break;
  }
  return "none";
}

std::string_view to_string(PartOrigin o) {
  switch (o) {
  case PartOrigin::reused:
    return "reused";
  case PartOrigin::profile_changed:
    return "profile slice changed";
  case PartOrigin::input_changed:
    return "code or settings changed";
  case PartOrigin::held_damaged:
    return "held object damaged";
  case PartOrigin::not_held:
    break;
  }
  return "not held";
}

std::string_view to_string(PrefixOrigin o) {
  switch (o) {
  case PrefixOrigin::reused:
    return "reused";
  case PrefixOrigin::input_changed:
    return "program or settings changed";
  case PrefixOrigin::held_damaged:
    return "held prefix damaged";
  case PrefixOrigin::not_held:
    break;
  }
  return "not held";
}

std::string CompilerIdentity::canonical() const {
  return "fdo-identity-v1;llvm=" + llvm_version + ";fdo=" + fdo_version +
         ";pipeline=" + std::to_string(pipeline_version) + ";triple=" + triple + ";cpu=" + cpu +
         ";features=" + features + (driver.empty() ? "" : ";driver=" + driver);
}

CompilerIdentity host_identity() {
  const HostTarget& host = host_target();
  CompilerIdentity id;
  id.llvm_version = LLVM_VERSION_STRING;
  id.fdo_version = std::string(kFdoVersion);
  id.pipeline_version = kPipelineVersion;
  id.triple = host.triple;
  id.cpu = host.cpu;
  id.features = host.features;
  return id;
}

Expected<Analysis> analyze(std::string_view program_bytes, const Limits& limits) {
  ensure_llvm_initialized();
  llvm::LLVMContext ctx;
  DiagnosticCollector diagnostics(ctx);
  PhaseTimes times;
  FDO_TRY(Prepared p, prepare(program_bytes, limits, ctx, llvm::CodeGenOpt::Default, times));
  Fingerprints fp = fingerprint_module(*p.module);
  return Analysis{std::move(fp.module), std::move(fp.functions), find_entries(*p.module),
                  std::move(p.names.source_names)};
}

// Writable global variables the program itself defines (before any
// instrumentation adds its counters; llvm.* globals are compiler bookkeeping).
static bool has_mutable_globals(const llvm::Module& m) {
  for (const llvm::GlobalVariable& g : m.globals())
    if (!g.isDeclaration() && !g.isConstant() && !g.getName().starts_with("llvm.")) return true;
  return false;
}

Expected<CompileResult> compile(std::string_view program_bytes, const CompileRequest& request) {
  ensure_llvm_initialized();
  const bool uses_profile =
      request.mode == CompileMode::optimized || request.mode == CompileMode::cs_instrumented;
  if (uses_profile && !request.profile)
    return make_error(Errc::invalid_argument,
                      std::string(to_string(request.mode)) + " mode needs a profile");
  const fdo::Knobs knobs = request.profile ? request.profile->knobs : fdo::Knobs{};

  CompileResult result;
  result.mode = request.mode;
  llvm::LLVMContext ctx;
  // Where a held pipeline prefix is read (pipeline_prefix.h): declared
  // before the module, which may come to live in it.
  llvm::LLVMContext prefix_ctx;
  DiagnosticCollector diagnostics(ctx);
  diagnostics.also_collect(prefix_ctx);
  FDO_TRY(Prepared p,
          prepare(program_bytes, request.limits, ctx, codegen_level(knobs), result.times));
  // The module as submitted, until the pipeline's prefix (which may replace it).
  llvm::Module& submitted = *p.module;
  result.local_names = std::move(p.names.local_names);
  result.source_names = std::move(p.names.source_names);
  {
    Clock::time_point start = Clock::now();
    Fingerprints fp = fingerprint_module(submitted);
    result.profile_key = std::move(fp.module);
    result.function_fingerprints = std::move(fp.functions);
    result.entries = find_entries(submitted);
    result.mutable_globals = has_mutable_globals(submitted);
    result.times.canonicalize += micros_since(start);
  }

  Clock::time_point start = Clock::now();
  if (request.profile) {
    std::vector<std::string> warnings;
    mark_unpredictable(submitted, *request.profile, warnings);
    for (std::string& w : warnings)
      diagnostics.add_warning(std::move(w));
  }
  const std::optional<CodeLayout> layout = CodeLayout::from(request.profile, request.mode);
  if (layout) layout->before_pipeline(submitted);
  if (request.block_locations == BlockLocations::on) add_block_locations(submitted);
  // PGO runs inside the O-level pipeline, as clang's -fprofile-generate /
  // -fprofile-use: a pre-inliner and early cleanup, then
  // PGOInstrumentationGen (and its lowering) or PGOInstrumentationUse +
  // indirect-call promotion; context-sensitive instrumentation or use after
  // the inliner (pgo_setup.h). The profile is read from a file (all LLVM 16
  // takes), removed when `pgo` goes.
  std::vector<std::string> pgo_warnings;
  auto pgo = pgo_setup(request.mode, request.profile, pgo_warnings);
  if (!pgo) return to_fdo_error(pgo.takeError(), Errc::compile, "profile use");
  for (std::string& w : pgo_warnings)
    diagnostics.add_warning(std::move(w));
  result.times.instrument_or_annotate = micros_since(start);

  start = Clock::now();
  const llvm::OptimizationLevel level = optimization_level(knobs);
  const bool optimizes = level != llvm::OptimizationLevel::O0;
  // A large module is compiled in parts at once (partition.h, docs/jit.md
  // "Partitioned compiles"). Where the O-level pipeline has an inliner and
  // no context-sensitive PGO pass (which finds functions by a PGO name a
  // split changes), the whole module runs the pipeline up to the inliner —
  // the profile's instrumentation or use, value specialization and
  // cold-code marking see the whole program — and each part the rest on a
  // thread of its own. Otherwise (and for kept IR) the split is for codegen.
  const unsigned parts = partition_count(
      instruction_count(submitted), std::min(request.threads, kMaxPartitions),
      request.min_part_instructions, request.max_parts != 0 ? request.max_parts : request.threads);
  const bool cs_pgo = pgo->options && pgo->options->CSAction != llvm::PGOOptions::NoCSAction;
  const PipelineCut::Pgo pgo_passes =
      pgo->options && (pgo->options->Action == llvm::PGOOptions::IRInstr ||
                       pgo->options->Action == llvm::PGOOptions::IRUse)
          ? PipelineCut::Pgo::instrument_or_use
          : PipelineCut::Pgo::none;
  const bool split_wanted = parts > 1 && optimizes && !request.keep_ir && !cs_pgo;
  PartPlan plan;
  if (split_wanted) {
    // On the program as submitted: the same whatever the profile
    // (module_split.h), so a rewrite leaves the parts it does not reach alone.
    plan = plan_by_module_order(submitted, parts);
    // The pipeline's prefix apart (pipeline_prefix.h): taken from the held
    // one when its key matches, else run here and kept for the next compile.
    if (pgo_passes == PipelineCut::Pgo::instrument_or_use) {
      const PrefixPipeline prefix{p.tm.get(), tuning_options(knobs), pgo->options, level};
      auto built = bring_to_prefix(p.module, prefix_ctx, prefix, prefix_key(submitted, knobs),
                                   request.held_prefix);
      if (!built) return to_fdo_error(built.takeError(), Errc::internal, "pipeline prefix");
      result.prefix = std::move(*built);
    }
  }
  // From here on the module the pipeline continues with.
  llvm::Module& m = *p.module;
  // The counter layout is read off the intrinsics between
  // PGOInstrumentationGen and the lowering that replaces them; the argument
  // value recording goes in there too, and value specialization right after
  // the profile is applied (arg_profile.h). Both change the module between
  // two passes, so they drop every cached analysis of it.
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PassInstrumentationCallbacks pic;
  bool layout_read = false, weights_read = false;
  // Functions that did next to none of the profiled work: no optimization
  // (cold_code.h).
  ColdFunctions cold;
  cold.register_callbacks(pic);
  const bool profile_args = request.mode == CompileMode::instrumented && knobs.spec_min_share > 0;
  pic.registerAfterPassCallback(
      [&](llvm::StringRef pass, llvm::Any ir, const llvm::PreservedAnalyses&) {
        if (pass == "PGOInstrumentationUse") {
          // The first (non-CS) use: its IR is the one the branch index
          // convention counts on; a CSIRUse pass runs later, after inlining.
          if (weights_read) return;
          if (const auto* mod = llvm::any_cast<const llvm::Module*>(&ir))
            result.branch_weights = read_branch_weights(**mod);
          weights_read = true;
          if (request.mode == CompileMode::optimized && knobs.cold_code == ColdCode::baseline)
            result.cold_functions = cold.mark(m);
          if (request.profile) {
            SpecializationPlan plan = specialize_functions(m, *request.profile);
            if (!plan.made.empty()) mam.invalidate(m, llvm::PreservedAnalyses::none());
            result.specializations = std::move(plan.made);
            result.specializations_skipped = std::move(plan.skipped);
          }
          return;
        }
        if (pass != "PGOInstrumentationGen" || layout_read) return;
        if (const auto* mod = llvm::any_cast<const llvm::Module*>(&ir)) {
          result.counters_layout = read_layout(**mod);
          layout_read = true;
          if (profile_args) {
            instrument_arguments(m, result.counters_layout);
            mam.invalidate(m, llvm::PreservedAnalyses::none());
          }
        }
      });
  llvm::PassBuilder pb(p.tm.get(), tuning_options(knobs), pgo->options, &pic);
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);

  PipelineCut cut(PipelineCut::Side::before, pgo_passes);
  PrefixCut prefix_cut(PrefixCut::Side::rest);
  if (split_wanted) {
    cut.register_callbacks(pic);
    if (result.prefix) prefix_cut.register_callbacks(pic);
  }
  llvm::ModulePassManager mpm =
      optimizes ? pb.buildPerModuleDefaultPipeline(level) : pb.buildO0DefaultPipeline(level);
  mpm.run(m, mam);
  const bool split_early = cut.reached();
  // Each part carries the summary: rounded, so that counts elsewhere in the
  // program do not change a part's input (part_keys.h).
  if (split_early) round_profile_summary(m);
  if (instruments(request.mode)) {
    if (!layout_read)
      return make_error(Errc::internal,
                        "instrumentation: the pipeline ran no PGOInstrumentationGen");
    // A part's own runtime calls are checked once its pipeline has run.
    if (!split_early)
      if (llvm::Error e = check_runtime_calls(m))
        return to_fdo_error(std::move(e), Errc::compile, "instrumentation");
    if (llvm::Error e = expose_counters(m, result.counters_layout))
      return to_fdo_error(std::move(e), Errc::internal, "instrumentation");
  }
  lower_ctors_dtors(m);
  // Entry thunks after the inliner (no entry is inlined into one), rotates
  // made explicit before codegen's constant hoisting can hide them
  // (rotate_idiom.h): here for the whole module, or in each part of one split
  // before the inliner once its own pipeline has run (finish_part below).
  if (!split_early) {
    add_thunks(m, result.entries);
    if (optimizes) restore_folded_rotates(m);
  }
  if (layout) {
    layout->before_codegen(m);
    layout->configure_codegen(*p.tm);
  }
  auto verify = [](llvm::Module& mod) -> llvm::Error {
    std::string report;
    llvm::raw_string_ostream os(report);
    if (llvm::verifyModule(mod, &os))
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "optimised module fails the verifier: " + os.str());
    return llvm::Error::success();
  };
  if (!split_early)
    if (llvm::Error e = verify(m)) return to_fdo_error(std::move(e), Errc::internal, "");
  const bool instrumented = instruments(request.mode);
  auto finish_part = [&](llvm::Module& mod) -> llvm::Error {
    if (instrumented)
      if (llvm::Error e = check_runtime_calls(mod)) return e;
    add_thunks(mod, result.entries);
    if (optimizes) restore_folded_rotates(mod);
    return verify(mod);
  };
  result.times.optimize = micros_since(start);

  if (!diagnostics.errors().empty())
    return make_error(Errc::compile, join(diagnostics.errors(), "; "));
  if (request.keep_ir) {
    // Without the synthetic block locations, which say nothing to a reader
    // that the block's position does not (block_map.h).
    std::unique_ptr<llvm::Module> shown = llvm::CloneModule(m);
    llvm::StripDebugInfo(*shown);
    llvm::raw_string_ostream os(result.ir);
    shown->print(os, nullptr);
  }

  start = Clock::now();
  std::vector<std::string> objects;
  if (parts <= 1) {
    auto object = emit_object(m, *p.tm);
    if (!object) return to_fdo_error(object.takeError(), Errc::compile, "codegen");
    objects.push_back(std::move(*object));
  } else {
    const llvm::CodeGenOpt::Level cg_level = p.tm->getOptLevel();
    auto make_target = [&]() -> llvm::Expected<std::unique_ptr<llvm::TargetMachine>> {
      auto tm = create_host_target_machine(cg_level);
      if (tm && layout) layout->configure_codegen(**tm);
      return tm;
    };
    // Each part's own pipeline: the O-level pipeline from the inliner on,
    // with this compile's options, its cold functions still skipped.
    const llvm::PipelineTuningOptions tuning = tuning_options(knobs);
    const std::optional<llvm::PGOOptions> pgo_options = pgo->options;
    auto compile_part = [&](llvm::Module& mod,
                            llvm::TargetMachine& tm) -> llvm::Expected<std::string> {
      if (split_early) {
        ColdFunctions part_cold;
        part_cold.adopt(mod);
        PipelineCut part_cut(PipelineCut::Side::after, pgo_passes);
        llvm::PassInstrumentationCallbacks part_pic;
        part_cold.register_callbacks(part_pic);
        part_cut.register_callbacks(part_pic);
        run_default_pipeline(mod, tm, tuning, pgo_options, part_pic, level);
        if (llvm::Error e = finish_part(mod)) return e;
      }
      return emit_object(mod, tm);
    };
    // Split at the inliner, a part whose input a held part shares takes
    // its object (part_keys.h, docs/jit.md "Incremental recompiles").
    PartReuse reuse(request.held_parts, part_settings(request, result.entries));
    SplitSpec spec;
    spec.threads = std::min(request.threads, kMaxPartitions);
    if (split_early) {
      spec.splitter = Splitter::by_module_order;
      spec.plan = &plan;
      spec.reuse = [&](unsigned index, const llvm::Module& part, llvm::StringRef bitcode) {
        return reuse.offer(index, part, bitcode);
      };
    } else {
      spec.splitter = Splitter::by_name_hash;
      spec.parts = parts;
    }
    auto made = emit_partitioned(m, spec, make_target, compile_part);
    if (!made) return to_fdo_error(made.takeError(), Errc::compile, "partitioned compile");
    objects = std::move(made->objects);
    if (split_early && objects.size() > 1) result.part_builds = reuse.finish(objects);
    for (std::string& w : made->warnings)
      diagnostics.add_warning(std::move(w));
  }
  result.partitions = static_cast<unsigned>(objects.size());
  if (result.partitions > 1)
    result.split = split_early ? PartitionSplit::inliner : PartitionSplit::codegen;
  for (const std::string& object : objects)
    result.code_size += executable_bytes(object);
  // Applied by the loader; here only carried to it with the object.
  if (request.profile) result.text_offset = request.profile->knobs.text_offset;
  if (request.block_locations == BlockLocations::on) {
    for (const std::string& object : objects) {
      auto blocks = read_block_map(object);
      if (!blocks) return to_fdo_error(blocks.takeError(), Errc::internal, "block map");
      std::move(blocks->begin(), blocks->end(), std::back_inserter(result.block_map));
    }
  }
  result.object = pack_objects(objects);
  result.times.codegen = micros_since(start);
  if (!diagnostics.errors().empty())
    return make_error(Errc::compile, join(diagnostics.errors(), "; "));
  result.diagnostics = diagnostics.warnings();
  return result;
}

} // namespace fdo::jit
