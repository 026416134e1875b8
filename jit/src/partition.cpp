#include "partition.h"

#include "llvm_support.h"
#include "module_split.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <llvm/Bitcode/BitcodeReader.h>
#include <llvm/Bitcode/BitcodeWriter.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Transforms/Utils/SplitModule.h>
#include <mutex>
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

unsigned partition_count(std::size_t instructions, unsigned threads, std::size_t min_instructions,
                         unsigned max_parts) {
  if (threads <= 1) return 1;
  const std::size_t by_size = instructions / std::max<std::size_t>(min_instructions, 1);
  return static_cast<unsigned>(
      std::clamp<std::size_t>(by_size, 1, std::clamp(max_parts, 1u, kMaxPartitions)));
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

// Whether a part defines anything (its functions may all have been
// inlined and deleted before the cut).
static bool defines_anything(const llvm::Module& part) {
  for (const llvm::GlobalValue& g : part.global_values())
    if (!g.isDeclaration() && !g.hasAvailableExternallyLinkage()) return true;
  return false;
}

llvm::Expected<PartitionedObjects> emit_partitioned(llvm::Module& m, const SplitSpec& spec,
                                                    const TargetMachineFactory& make_target,
                                                    const EmitObject& emit) {
  std::vector<std::unique_ptr<PartJob>> jobs;
  // Parts are compiled by up to spec.threads threads, each taking the next
  // part in order as soon as it is split off (the split goes on on this
  // thread meanwhile).
  std::mutex mu;
  std::condition_variable ready;
  std::deque<PartJob*> queue;
  bool split_done = false;
  std::vector<std::thread> threads;
  auto compile_parts = [&] {
    for (;;) {
      PartJob* job = nullptr;
      {
        std::unique_lock lock(mu);
        ready.wait(lock, [&] { return split_done || !queue.empty(); });
        if (queue.empty()) return;
        job = queue.front();
        queue.pop_front();
      }
      job->run(make_target, emit);
    }
  };
  auto start_part = [&](std::unique_ptr<llvm::Module> part) {
    if (!defines_anything(*part)) return;
    auto job = std::make_unique<PartJob>();
    llvm::raw_svector_ostream os(job->bitcode);
    llvm::WriteBitcodeToFile(*part, os);
    if (spec.reuse)
      job->object = spec.reuse(static_cast<unsigned>(jobs.size()), *part,
                               llvm::StringRef(job->bitcode.data(), job->bitcode.size()));
    part.reset();
    PartJob* raw = job.get();
    jobs.push_back(std::move(job));
    if (raw->object) {
      raw->bitcode = {};
      return;
    }
    {
      std::lock_guard lock(mu);
      queue.push_back(raw);
    }
    ready.notify_one();
    if (threads.size() < std::max(1u, spec.threads)) {
      try {
        threads.emplace_back(compile_parts);
      } catch (const std::system_error&) {
        // No thread to be had: the parts wait for the threads there are,
        // or for this one once the split is done.
      }
    }
  };
  if (spec.splitter == Splitter::by_module_order && spec.plan)
    split_by_module_order(m, *spec.plan, start_part);
  else
    llvm::SplitModule(m, spec.parts, start_part, /*PreserveLocals=*/false);
  {
    std::lock_guard lock(mu);
    split_done = true;
  }
  ready.notify_all();
  if (threads.empty()) compile_parts();
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
