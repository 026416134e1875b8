// Samples at known code addresses of a compiled program map to the right IR
// function, block and conditional branch (docs/perf.md, "Attribution to IR
// branches"), wherever the loader links the object.
#include "fdo/daemon/stage_sampling.h"
#include "fdo/jit/compiler.h"
#include "fdo/jit/loader.h"

#include <catch2/catch.hpp>
#include <llvm/Object/ELFObjectFile.h>
#include <llvm/Object/ObjectFile.h>

using namespace fdo;
using namespace fdo::daemon;
using nlohmann::json;

namespace {
// Blocks of @run in function order: entry 0 (branch 0), big 1 (branch 1),
// huge 2, small 3, done 4. Each of big, huge and small calls its own marker,
// so the call sites' relocations say where those blocks' code lies,
// independently of the block map under test.
constexpr const char* kProgram = R"(
define void @m0(ptr %p) noinline {
  store volatile i64 0, ptr %p
  ret void
}
define void @m1(ptr %p) noinline {
  store volatile i64 1, ptr %p
  ret void
}
define void @m2(ptr %p) noinline {
  store volatile i64 2, ptr %p
  ret void
}
define i64 @run(i64 %n, ptr %p) {
entry:
  %c = icmp sgt i64 %n, 10
  br i1 %c, label %big, label %small
big:
  call void @m1(ptr %p)
  %d = icmp sgt i64 %n, 100
  br i1 %d, label %huge, label %done
huge:
  call void @m2(ptr %p)
  br label %done
small:
  call void @m0(ptr %p)
  br label %done
done:
  %r = phi i64 [ 1, %huge ], [ 2, %small ], [ 3, %big ]
  ret i64 %r
}
)";

// Offset from @run's start of the call to `callee` (the relocation sits one
// byte past the call opcode).
std::uint64_t call_offset(const std::string& object, const std::string& callee) {
  auto file = llvm::object::ObjectFile::createObjectFile(
      llvm::MemoryBufferRef(llvm::StringRef(object), "object"));
  REQUIRE(bool(file));
  std::uint64_t run = UINT64_MAX;
  for (const auto& sym : (*file)->symbols())
    if (auto name = sym.getName(); name && *name == "run") run = llvm::cantFail(sym.getValue());
  REQUIRE(run != UINT64_MAX);
  for (const auto& section : (*file)->sections())
    for (const auto& reloc : section.relocations()) {
      auto sym = reloc.getSymbol();
      if (sym == (*file)->symbol_end()) continue;
      auto name = sym->getName();
      if (name && *name == callee) return reloc.getOffset() - 1 - run;
    }
  FAIL("no call to " << callee);
  return 0;
}

perf::Sample at(std::uint32_t event, std::uint64_t ip) {
  perf::Sample s;
  s.event = event;
  s.ip = ip;
  return s;
}
} // namespace

TEST_CASE("samples at known code addresses map to their IR block and branch, wherever linked",
          "[jobs][sampling][blocks]") {
  jit::CompileRequest req;
  req.mode = CompileMode::plain;
  auto compiled = jit::compile(kProgram, req);
  REQUIRE(compiled);
  REQUIRE_FALSE(compiled->block_map.empty());
  const std::uint64_t in_big = call_offset(compiled->object, "m1");
  const std::uint64_t in_huge = call_offset(compiled->object, "m2");
  const std::uint64_t in_small = call_offset(compiled->object, "m0");

  // Two loaders: the same object linked twice, at two addresses.
  auto first_loader = jit::Loader::create();
  auto second_loader = jit::Loader::create();
  REQUIRE(first_loader);
  REQUIRE(second_loader);
  auto first = (*first_loader)->load(compiled->object, *compiled);
  auto second = (*second_loader)->load(compiled->object, *compiled);
  REQUIRE(first);
  REQUIRE(second);
  // The program runs as compiled (the debug sections change nothing).
  std::uint64_t cell = 0;
  auto r = (*first)->call("run",
                          std::vector<std::uint64_t>{50, reinterpret_cast<std::uintptr_t>(&cell)});
  REQUIRE(r);
  CHECK(*r == 3);
  CHECK(cell == 1);

  std::vector<perf::SamplerEvent> events(1);
  events[0].name = "branch-misses";
  events[0].status = perf::EventStatus::available;
  StageSamplingRequest request{{"branch-misses"}, 1000, 100};

  for (auto* program : {first->get(), second->get()}) {
    const auto& ranges = program->function_ranges();
    auto run = std::find_if(ranges.begin(), ranges.end(),
                            [](const jit::FunctionRange& f) { return f.name == "run"; });
    REQUIRE(run != ranges.end());
    REQUIRE_FALSE(run->blocks.empty());
    perf::SampleSet set;
    set.events = {"branch-misses"};
    set.samples = {at(0, run->start),            // the entry block
                   at(0, run->start + in_big),   // big, twice
                   at(0, run->start + in_big),   //
                   at(0, run->start + in_huge),  // huge: no conditional branch
                   at(0, run->start + in_small), // small: none either
                   at(0, 0x10)};                 // not program code
    auto j = stage_sample_report(events, request, set, ranges);
    REQUIRE(j);
    const auto& blocks = j->tallies.blocks.at("branch-misses").at("run");
    CHECK(blocks == std::map<std::uint32_t, std::uint64_t>{{0, 1}, {1, 2}, {2, 1}, {3, 1}});
    const auto& branches = j->tallies.branches.at("run");
    CHECK(branches.at(0).at("branch-misses") == 1);
    CHECK(branches.at(1).at("branch-misses") == 2);
    CHECK(branches.size() == 2); // huge and small end in no conditional branch
    CHECK(j->outside_jit.at("branch-misses") == 1);
  }
  const auto start_of = [](const jit::LoadedProgram& p) {
    for (const auto& f : p.function_ranges())
      if (f.name == "run") return f.start;
    return std::uint64_t{0};
  };
  CHECK(start_of(**first) != start_of(**second));
}

TEST_CASE("a mispredicted branch from the branch stack counts for its own block",
          "[jobs][sampling][blocks]") {
  jit::CompileRequest req;
  req.mode = CompileMode::plain;
  auto compiled = jit::compile(kProgram, req);
  REQUIRE(compiled);
  auto loader = jit::Loader::create();
  REQUIRE(loader);
  auto program = (*loader)->load(compiled->object, *compiled);
  REQUIRE(program);
  const auto& ranges = (*program)->function_ranges();
  auto run = std::find_if(ranges.begin(), ranges.end(),
                          [](const jit::FunctionRange& f) { return f.name == "run"; });
  REQUIRE(run != ranges.end());
  // The sample's IP skidded into `small`; the branch stack says the branch in
  // `big` was the one mispredicted.
  perf::Sample s = at(0, run->start + call_offset(compiled->object, "m0"));
  s.branches.push_back({run->start + call_offset(compiled->object, "m1"), run->start, true});
  perf::SampleSet set;
  set.events = {"branch-misses"};
  set.samples = {s};
  std::vector<perf::SamplerEvent> events(1);
  events[0].name = "branch-misses";
  events[0].status = perf::EventStatus::available;
  auto j =
      stage_sample_report(events, StageSamplingRequest{{"branch-misses"}, 1000, 100}, set, ranges);
  REQUIRE(j);
  CHECK(j->tallies.blocks.at("branch-misses").at("run").at(3) == 1); // where the IP was
  CHECK(j->tallies.branches.at("run").at(1).at("branch-misses") == 1);
  CHECK(j->tallies.branches.at("run").size() == 1);
}
