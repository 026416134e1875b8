// The per-branch loop end to end, on a recorded sample stream fed through the
// perf syscall seam (this kind of host has no PMU): branch-miss samples land
// on one branch of a profiled program -> the policy marks exactly that branch
// !unpredictable -> the next optimized object's code for it changes.
#include "fdo/daemon/block_samples.h"
#include "fdo/daemon/policy.h"
#include "recorded_stage.h"

#include <catch2/catch.hpp>
#include <llvm/MC/MCAsmInfo.h>
#include <llvm/MC/MCContext.h>
#include <llvm/MC/MCDisassembler/MCDisassembler.h>
#include <llvm/MC/MCInst.h>
#include <llvm/MC/MCInstrInfo.h>
#include <llvm/MC/MCRegisterInfo.h>
#include <llvm/MC/MCSubtargetInfo.h>
#include <llvm/MC/MCTargetOptions.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Object/ELFObjectFile.h>
#include <llvm/Object/ObjectFile.h>
#include <llvm/Support/Host.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <random>

using namespace fdo;
using namespace fdo::daemon;
using namespace fdo::daemon::testing;
using namespace fdo::perf::testing;
using nlohmann::json;

namespace {
// Branch 0 (in %loop) tests two independent loaded values: about half the
// elements pass, in no learnable order. Branch 1 (the latch) is the loop's
// exit test. Instruction selection splits branch 0's `and` into two
// conditional jumps unless the branch is !unpredictable, when it keeps one
// jump on the combined condition (LLVM 16's SelectionDAGBuilder::visitBr).
constexpr const char* kProgram = R"(
define i64 @run(ptr %a, ptr %b, ptr %o, i64 %n) {
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i.next, %latch ]
  %pa = getelementptr i64, ptr %a, i64 %i
  %pb = getelementptr i64, ptr %b, i64 %i
  %v = load i64, ptr %pa
  %w = load i64, ptr %pb
  %c1 = icmp sgt i64 %v, 100
  %c2 = icmp slt i64 %w, 1000
  %c = and i1 %c1, %c2
  br i1 %c, label %then, label %latch
then:
  %po = getelementptr i64, ptr %o, i64 %i
  store i64 %v, ptr %po
  br label %latch
latch:
  %i.next = add i64 %i, 1
  %done = icmp eq i64 %i.next, %n
  br i1 %done, label %out, label %loop
out:
  ret i64 0
}
)";

// Conditional jumps in the code of `symbol` in `object`.
int conditional_jumps(const std::string& object, const std::string& symbol) {
  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetDisassembler();
  const std::string triple = llvm::sys::getProcessTriple();
  std::string error;
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(triple, error);
  REQUIRE(target != nullptr);
  std::unique_ptr<llvm::MCRegisterInfo> mri(target->createMCRegInfo(triple));
  llvm::MCTargetOptions options;
  std::unique_ptr<llvm::MCAsmInfo> mai(target->createMCAsmInfo(*mri, triple, options));
  std::unique_ptr<llvm::MCSubtargetInfo> sti(target->createMCSubtargetInfo(triple, "", ""));
  std::unique_ptr<llvm::MCInstrInfo> mii(target->createMCInstrInfo());
  llvm::MCContext ctx(llvm::Triple(triple), mai.get(), mri.get(), sti.get());
  std::unique_ptr<llvm::MCDisassembler> dis(target->createMCDisassembler(*sti, ctx));
  REQUIRE(dis != nullptr);

  auto file = llvm::object::ObjectFile::createObjectFile(
      llvm::MemoryBufferRef(llvm::StringRef(object), "object"));
  REQUIRE(bool(file));
  for (const auto& sym : (*file)->symbols()) {
    auto name = sym.getName();
    if (!name || *name != symbol) continue;
    const std::uint64_t start = llvm::cantFail(sym.getValue());
    const std::uint64_t size = llvm::object::ELFSymbolRef(sym).getSize();
    auto section = llvm::cantFail(sym.getSection());
    llvm::StringRef contents = llvm::cantFail(section->getContents());
    llvm::ArrayRef<std::uint8_t> code(
        reinterpret_cast<const std::uint8_t*>(contents.data()) + start, size);
    int jumps = 0;
    for (std::uint64_t at = 0; at < code.size();) {
      llvm::MCInst inst;
      std::uint64_t length = 0;
      if (dis->getInstruction(inst, length, code.slice(at), at, llvm::nulls()) !=
          llvm::MCDisassembler::Success) {
        ++at;
        continue;
      }
      if (mii->get(inst.getOpcode()).isConditionalBranch()) ++jumps;
      at += length;
    }
    return jumps;
  }
  FAIL("no symbol " << symbol);
  return -1;
}

// Runs the instrumented program over inputs where branch 0 goes either way
// about half the time, and returns the profile its counters make.
ProfileDoc profile_from_a_mixed_run() {
  return profile_from_a_run(kProgram, [](jit::LoadedProgram& program) {
    constexpr std::size_t n = 4000;
    std::vector<std::int64_t> a(n), b(n), o(n);
    std::mt19937_64 rng(7);
    for (std::size_t i = 0; i < n; ++i) {
      a[i] = rng() % 2 ? 500 : 0;  // passes c1 half the time
      b[i] = rng() % 8 ? 0 : 5000; // passes c2 7/8 of the time
    }
    auto r = program.call(
        "run", std::vector<std::uint64_t>{reinterpret_cast<std::uintptr_t>(a.data()),
                                          reinterpret_cast<std::uintptr_t>(b.data()),
                                          reinterpret_cast<std::uintptr_t>(o.data()), n});
    REQUIRE(r);
  });
}

const jit::BlockRange* range_of_branch(const jit::FunctionRange& f, std::int32_t branch) {
  for (const auto& b : f.blocks)
    if (b.function == "run" && b.branch == branch) return &b;
  return nullptr;
}
// The program compiled optimized with the mixed run's profile and loaded:
// its branch weights and where each block of `run` lies.
struct Optimized {
  ProfileDoc profile;
  jit::CompileRequest request;
  jit::CompileResult compiled;
  std::map<std::string, std::vector<BranchStat>> weights;
  std::unique_ptr<jit::Loader> loader;
  std::unique_ptr<jit::LoadedProgram> program;
  const jit::FunctionRange* run = nullptr;
  const jit::BlockRange* b0 = nullptr; // the unpredictable branch's block
  const jit::BlockRange* b1 = nullptr; // the latch's
};

std::unique_ptr<Optimized> optimized_program() {
  auto o = std::make_unique<Optimized>();
  o->profile = profile_from_a_mixed_run();
  o->request.mode = CompileMode::optimized;
  o->request.profile = &o->profile;
  auto optimized = jit::compile(kProgram, o->request);
  REQUIRE(optimized);
  o->compiled = std::move(*optimized);
  REQUIRE(o->compiled.branch_weights.count("run") == 1);
  for (const auto& w : o->compiled.branch_weights.at("run"))
    o->weights["run"].push_back({w.index, w.taken, w.not_taken});
  auto loader = jit::Loader::create();
  REQUIRE(loader);
  o->loader = std::move(*loader);
  auto program = o->loader->load(o->compiled.object, o->compiled);
  REQUIRE(program);
  o->program = std::move(*program);
  const auto& ranges = o->program->function_ranges();
  auto run = std::find_if(ranges.begin(), ranges.end(),
                          [](const jit::FunctionRange& f) { return f.name == "run"; });
  REQUIRE(run != ranges.end());
  o->run = &*run;
  o->b0 = range_of_branch(*run, 0);
  o->b1 = range_of_branch(*run, 1);
  REQUIRE(o->b0 != nullptr);
  REQUIRE(o->b1 != nullptr);
  return o;
}

// The policy on one optimized stage that sampled `tallies`.
PolicyDecision decide_on(const Optimized& o, const BlockTallies& tallies, PolicyConfig cfg = {}) {
  const auto stats = branch_stats(o.weights, tallies);
  cfg.min_stages = 1;
  ProfileDoc current = o.profile;
  FeedbackAccumulator fb;
  fb.add(
      StageFeedback{{}, 1000, {}, std::nullopt}); // an optimized stage: no counts, no PMU counters
  PolicyInput in;
  in.current = &current;
  in.current_version = 1;
  in.feedback = &fb;
  in.branch_stats = &stats;
  in.now = std::chrono::system_clock::now();
  return decide(cfg, in);
}
} // namespace

TEST_CASE("branch-miss samples on one branch mark exactly it !unpredictable and change its code",
          "[jobs][sampling][blocks]") {
  const auto o = optimized_program();
  // The optimized compile reports the profile's weights by branch index.
  REQUIRE(o->weights["run"].size() == 2);
  const BranchStat& even = o->weights["run"][0];
  CHECK(even.index == 0);
  CHECK(std::min(even.taken, even.not_taken) * 10 > (even.taken + even.not_taken) * 3);
  const jit::FunctionRange* run = o->run;
  const jit::BlockRange* b0 = o->b0;
  const jit::BlockRange* b1 = o->b1;

  // A recorded stream, as the kernel would write it: the sampler reads it out
  // of its rings through the syscall seam, exactly as in the exec worker.
  const StageObservation reply = recorded_stage(
      {"cpu-clock", "branch-misses"}, o->program->function_ranges(),
      [&](std::vector<RingWriter>& rings) {
        for (int i = 0; i < 40; ++i)
          rings[1].append(sample_record(run->start + b0->offset + (i % b0->size), 100));
        for (int i = 0; i < 5; ++i) // the latch: too few to matter
          rings[1].append(sample_record(run->start + b1->offset, 100));
        for (int i = 0; i < 30; ++i)
          rings[0].append(sample_record(run->start + b0->offset, 1000000));
      });

  // The service's side: tallies per branch, with the compile's weights.
  REQUIRE(reply.samples);
  const BlockTallies& tallies = reply.samples->tallies;
  CHECK(tallies.branches.at("run").at(0).at("branch-misses") == 40);
  CHECK(tallies.branches.at("run").at(1).at("branch-misses") == 5);
  CHECK(tallies.blocks.at("cpu-clock").at("run").at(b0->block) == 30);

  PolicyDecision d = decide_on(*o, tallies);
  INFO(d.reason);
  REQUIRE(d.action == PolicyAction::rewrite);
  CHECK(d.profile.functions.at("run").unpredictable == std::vector<std::uint32_t>{0});
  CHECK_THAT(d.reason, Catch::Contains("run branch 0 (40 miss samples"));

  // Fewer samples than the threshold: nothing is marked.
  PolicyConfig strict;
  strict.branch_miss_min_samples = 41;
  CHECK(decide_on(*o, tallies, strict).action == PolicyAction::keep);

  // The next compile carries the mark, and the branch's code changed: one
  // conditional jump on the combined condition instead of two.
  jit::CompileRequest req = o->request;
  req.profile = &d.profile;
  auto marked = jit::compile(kProgram, req);
  REQUIRE(marked);
  const int before = conditional_jumps(o->compiled.object, "run");
  const int after = conditional_jumps(marked->object, "run");
  INFO("conditional jumps before " << before << ", after " << after);
  CHECK(after == before - 1);
}

// A host with a branch stack (LBR): each branch-miss sample's IP has skidded
// past the branch into the latch, but its records name the mispredicted
// branch (the newest mispredicted entry's source), so the misses are
// attributed to branch 0 and it, not the latch, is marked.
TEST_CASE("branch-stack records carry skidded miss samples back to their branch and mark it",
          "[jobs][sampling][blocks]") {
  const auto o = optimized_program();
  const std::uint64_t base = o->run->start;
  const std::uint64_t branch0 = base + o->b0->offset + o->b0->size - 1; // its last instruction
  const std::uint64_t latch = base + o->b1->offset;
  std::vector<bool> stacks;
  const StageObservation reply = recorded_stage(
      {"cpu-clock", "branch-misses"}, o->program->function_ranges(),
      [&](std::vector<RingWriter>& rings) {
        for (int i = 0; i < 40; ++i) {
          // Newest first, as the kernel writes them: the latch's jump
          // (predicted), then branch 0 (mispredicted), then an older latch.
          const std::vector<FixtureBranch> lbr{
              {latch + o->b1->size - 1, base + o->b0->offset, false},
              {branch0, latch, true},
              {latch + o->b1->size - 1, base + o->b0->offset, false}};
          rings[1].append(sample_record(latch + (i % o->b1->size), 100, &lbr));
        }
        for (int i = 0; i < 30; ++i)
          rings[0].append(sample_record(base + o->b0->offset, 1000000));
      },
      BranchStackHost::hardware_events, &stacks);
  // cpu-clock was opened without a branch stack, branch-misses with one.
  CHECK(stacks == std::vector<bool>{false, true});
  REQUIRE(reply.samples);
  const BlockTallies& tallies = reply.samples->tallies;
  // By IP the misses are in the latch's block; by branch stack, on branch 0.
  CHECK(tallies.blocks.at("branch-misses").at("run").at(o->b1->block) == 40);
  CHECK(tallies.branches.at("run").at(0).at("branch-misses") == 40);
  CHECK(tallies.branches.at("run").count(1) == 0);

  PolicyDecision d = decide_on(*o, tallies);
  INFO(d.reason);
  REQUIRE(d.action == PolicyAction::rewrite);
  CHECK(d.profile.functions.at("run").unpredictable == std::vector<std::uint32_t>{0});
  CHECK_THAT(d.reason, Catch::Contains("run branch 0 (40 miss samples"));
}
