#include "partition.h"

#include "llvm_support.h"
#include "module_split.h"

#include <algorithm>
#include <llvm/Bitcode/BitcodeReader.h>
#include <llvm/Bitcode/BitcodeWriter.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Transforms/Utils/SplitModule.h>
#include <optional>
#include <system_error>
#include <thread>

namespace fdo::jit::detail {

std::size_t instruction_count(const llvm::Module& m) {
  std::size_t n = 0;
  for (const llvm::Function& f : m)
    if (!f.isDeclaration()) n += f.getInstructionCount();
  return n;
}

unsigned partition_count(std::size_t instructions, unsigned threads, std::size_t min_instructions) {
  if (threads <= 1) return 1;
  const std::size_t by_size = instructions / std::max<std::size_t>(min_instructions, 1);
  return static_cast<unsigned>(std::clamp<std::size_t>(by_size, 1, threads));
}

namespace {

// One part's codegen, on its own thread: its bitcode in, its object (or the
// reason there is none) and its context's warnings out.
struct PartJob {
  llvm::SmallVector<char, 0> bitcode;
  std::optional<std::string> object;
  std::string error;
  std::vector<std::string> warnings;

  void run(const TargetMachineFactory& make_target, const EmitObject& emit) {
    llvm::LLVMContext ctx;
    DiagnosticCollector diagnostics(ctx);
    auto module = llvm::parseBitcodeFile(
        llvm::MemoryBufferRef(llvm::StringRef(bitcode.data(), bitcode.size()), "part"), ctx);
    if (!module) {
      error = "reading a part back: " + llvm::toString(module.takeError());
      return;
    }
    // The bitcode is not needed once parsed: free it while codegen runs.
    bitcode = {};
    auto tm = make_target();
    if (!tm) {
      error = "target machine: " + llvm::toString(tm.takeError());
      return;
    }
    auto out = emit(**module, **tm);
    if (!out) {
      error = llvm::toString(out.takeError());
      return;
    }
    if (!diagnostics.errors().empty()) {
      for (const std::string& e : diagnostics.errors())
        error += (error.empty() ? "" : "; ") + e;
      return;
    }
    warnings = diagnostics.warnings();
    object = std::move(*out);
  }
};

} // namespace

bool PipelineCut::runs(llvm::StringRef pass) {
  if (pass == "ModuleInlinerWrapperPass" && !reached_ && inliners_before_cut_-- == 0)
    reached_ = true;
  return (side_ == Side::after) == reached_;
}

void PipelineCut::register_callbacks(llvm::PassInstrumentationCallbacks& pic) {
  pic.registerShouldRunOptionalPassCallback(
      [this](llvm::StringRef pass, llvm::Any) { return runs(pass); });
}

llvm::Expected<PartitionedObjects> emit_partitioned(llvm::Module& m, unsigned parts,
                                                    Splitter splitter,
                                                    const TargetMachineFactory& make_target,
                                                    const EmitObject& emit) {
  std::vector<std::unique_ptr<PartJob>> jobs;
  std::vector<std::thread> threads;
  // Each part's thread starts as soon as its bitcode is written, while the
  // next part is split off on this one.
  auto start_part = [&](std::unique_ptr<llvm::Module> part) {
    auto job = std::make_unique<PartJob>();
    llvm::raw_svector_ostream os(job->bitcode);
    llvm::WriteBitcodeToFile(*part, os);
    part.reset();
    PartJob* raw = job.get();
    jobs.push_back(std::move(job));
    try {
      threads.emplace_back([raw, &make_target, &emit] { raw->run(make_target, emit); });
    } catch (const std::system_error&) {
      // No thread to be had: this part is compiled here instead.
      raw->run(make_target, emit);
    }
  };
  if (splitter == Splitter::by_module_order)
    split_by_module_order(m, parts, start_part);
  else
    llvm::SplitModule(m, parts, start_part, /*PreserveLocals=*/false);
  for (std::thread& t : threads)
    t.join();

  PartitionedObjects out;
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    PartJob& job = *jobs[i];
    if (!job.object)
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "part " + std::to_string(i) + " of " +
                                         std::to_string(jobs.size()) + ": " + job.error);
    out.objects.push_back(std::move(*job.object));
    for (std::string& w : job.warnings)
      out.warnings.push_back(std::move(w));
  }
  return out;
}

} // namespace fdo::jit::detail
