// What a part of a partitioned compile carries of the profile (jit/src/part_keys.h):
// the summary reduced to what ProfileSummaryInfo reads, and the copies a part
// imports annotated by their class, not their exact counts — so that a rewrite
// scaling one function's counts changes its own part and no importer's input,
// unless the function changes class.
#include "module_split.h"
#include "part_keys.h"

#include <catch2/catch.hpp>
#include <llvm/Analysis/ProfileSummaryInfo.h>
#include <llvm/AsmParser/Parser.h>
#include <llvm/Bitcode/BitcodeWriter.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Metadata.h>
#include <llvm/IR/ProfileSummary.h>
#include <llvm/Support/SourceMgr.h>
#include <llvm/Support/raw_ostream.h>
#include <optional>
#include <string>
#include <vector>

using namespace fdo::jit::detail;

namespace {

// A summary with every default cutoff: hot entries (99%) count at least 4096
// once rounded (5000 exact), cold ones (99.9999%) at most 2; `at_60` is the
// 60% cutoff's count, which nothing after the cut reads.
std::string summary(long total, long at_60) {
  return R"(
!llvm.module.flags = !{!0}
!0 = !{i32 1, !"ProfileSummary", !1}
!1 = !{!2, !3, !4, !5, !6, !7, !8, !9}
!2 = !{!"ProfileFormat", !"InstrProf"}
!3 = !{!"TotalCount", i64 )" +
         std::to_string(total) + R"(}
!4 = !{!"MaxCount", i64 1000000}
!5 = !{!"MaxInternalCount", i64 100000}
!6 = !{!"MaxFunctionCount", i64 1000000}
!7 = !{!"NumCounts", i64 40}
!8 = !{!"NumFunctions", i64 8}
!9 = !{!"DetailedSummary", !10}
!10 = !{!11, !12, !13, !14, !15, !17, !16}
!11 = !{i32 10000, i64 1000000, i32 1}
!12 = !{i32 600000, i64 )" +
         std::to_string(at_60) + R"(, i32 4}
!13 = !{i32 950000, i64 9000, i32 10}
!14 = !{i32 990000, i64 5000, i32 14}
!15 = !{i32 999000, i64 70, i32 20}
!16 = !{i32 999999, i64 3, i32 40}
!17 = !{i32 999990, i64 5, i32 30}
)";
}

// `caller` (part 0) calls `callee` (part 1), a small function with a
// two-way branch, an indirect call with a value profile and an entry count
// of `entry`; every count of the callee scales with `entry` (100 = 1x).
std::string program(long entry) {
  auto times = [&](long n) { return std::to_string(n * entry / 100); };
  return R"(
define i32 @caller(i32 %x, ptr %f) !prof !{!"function_entry_count", i64 20000} {
  %r = call i32 @callee(i32 %x, ptr %f)
  ret i32 %r
}
define i32 @callee(i32 %x, ptr %f) !prof !{!"function_entry_count", i64 )" +
         times(100) + R"(} {
  %c = icmp sgt i32 %x, 0
  br i1 %c, label %yes, label %no, !prof !{!"branch_weights", i32 )" +
         times(75) + ", i32 " + times(25) + R"(}
yes:
  %v = call i32 %f(i32 %x), !prof !{!"VP", i32 0, i64 )" +
         times(60) + ", i64 1234, i64 " + times(60) + R"(}
  ret i32 %v
no:
  ret i32 0
}
)" + summary(1000000, 262144);
}

struct Parts {
  std::vector<std::string> bitcode; // per part
  // Part 0's copy of `callee`: its entry count, its branch's weights, its
  // value profile's operands after the kind (total, value, count).
  std::optional<std::uint64_t> entry;
  std::vector<std::uint64_t> weights;
  std::vector<std::uint64_t> vp;
};

std::vector<std::uint64_t> operands(const llvm::MDNode* md, unsigned from) {
  std::vector<std::uint64_t> out;
  for (unsigned i = from; md && i < md->getNumOperands(); ++i)
    out.push_back(llvm::mdconst::extract<llvm::ConstantInt>(md->getOperand(i))->getZExtValue());
  return out;
}

Parts split(const std::string& ir) {
  llvm::LLVMContext ctx;
  llvm::SMDiagnostic err;
  std::unique_ptr<llvm::Module> m = llvm::parseAssemblyString(ir, err, ctx);
  if (!m) FAIL("the test's IR does not parse: " << err.getMessage().str());
  round_profile_summary(*m);
  PartPlan plan;
  plan.parts = 2;
  plan.part_of["caller"] = 0;
  plan.part_of["callee"] = 1;
  Parts out;
  split_by_module_order(*m, plan, [&](std::unique_ptr<llvm::Module> part) {
    std::string bc;
    llvm::raw_string_ostream os(bc);
    llvm::WriteBitcodeToFile(*part, os);
    os.flush();
    out.bitcode.push_back(bc);
    if (out.bitcode.size() == 1)
      if (const llvm::Function* copy = part->getFunction("callee");
          copy && copy->hasAvailableExternallyLinkage()) {
        if (auto c = copy->getEntryCount()) out.entry = c->getCount();
        for (const llvm::BasicBlock& b : *copy)
          for (const llvm::Instruction& i : b) {
            const llvm::MDNode* prof = i.getMetadata(llvm::LLVMContext::MD_prof);
            if (llvm::isa<llvm::BranchInst>(i)) out.weights = operands(prof, 1);
            if (llvm::isa<llvm::CallBase>(i)) out.vp = operands(prof, 2);
          }
      }
  });
  REQUIRE(out.bitcode.size() == 2);
  return out;
}

std::vector<std::uint64_t> detailed_counts(const llvm::Module& m) {
  std::unique_ptr<llvm::ProfileSummary> s(
      llvm::ProfileSummary::getFromMD(m.getProfileSummary(/*IsCS=*/false)));
  REQUIRE(s);
  std::vector<std::uint64_t> out;
  for (const llvm::ProfileSummaryEntry& e : s->getDetailedSummary()) {
    out.push_back(e.Cutoff);
    out.push_back(e.MinCount);
    out.push_back(e.NumCounts);
  }
  return out;
}

} // namespace

TEST_CASE("part keys: the summary keeps what ProfileSummaryInfo reads, rounded",
          "[jit][partition][summary]") {
  llvm::LLVMContext ctx;
  llvm::SMDiagnostic err;
  auto parse = [&](long total, long at_60) {
    std::unique_ptr<llvm::Module> m = llvm::parseAssemblyString(
        "define void @f() { ret void }\n" + summary(total, at_60), err, ctx);
    REQUIRE(m);
    return m;
  };
  std::unique_ptr<llvm::Module> exact = parse(1000000, 262144);
  const llvm::ProfileSummaryInfo before(*exact);
  round_profile_summary(*exact);
  const llvm::ProfileSummaryInfo after(*exact);
  // The entries the 95%, 99%, 99.995% (answered by 99.999%) and 99.9999%
  // cutoffs read, counts down to a power of two, counts of counters on the
  // same side of the working-set thresholds.
  CHECK(detailed_counts(*exact) ==
        std::vector<std::uint64_t>{950000, 8192, 1, 990000, 4096, 1, 999990, 4, 1, 999999, 2, 1});
  CHECK(after.isColdCountNthPercentile(999950, 4) == before.isColdCountNthPercentile(999950, 5));
  // (3 is cold by the 99.999% entry's 4, not by the 99.9999% entry's 2.)
  CHECK(after.isColdCountNthPercentile(999950, 3));
  REQUIRE(after.hasProfileSummary());
  CHECK(after.getOrCompHotCountThreshold() == 4096);
  CHECK(after.getOrCompColdCountThreshold() == 2);
  CHECK(before.getOrCompHotCountThreshold() == 5000);
  CHECK(after.hasLargeWorkingSetSize() == before.hasLargeWorkingSetSize());
  CHECK(after.hasHugeWorkingSetSize() == before.hasHugeWorkingSetSize());

  // What only the totals and the unread cutoffs say moves nothing.
  std::unique_ptr<llvm::Module> moved = parse(2000000, 131072);
  round_profile_summary(*moved);
  CHECK(detailed_counts(*moved) == detailed_counts(*exact));
  std::string a, b;
  llvm::raw_string_ostream(a) << *exact->getProfileSummary(false);
  llvm::raw_string_ostream(b) << *moved->getProfileSummary(false);
  CHECK(a == b);
}

TEST_CASE("part keys: an imported copy carries its class, not its counts",
          "[jit][partition][import]") {
  const Parts base = split(program(100));
  // 100 calls lie between cold (2) and hot (4096): the geometric mean of
  // 3 and 4095; the branch keeps 3:1 at a total of 2^20; the value profile
  // scales with the entry count (110/100).
  CHECK(base.entry == std::optional<std::uint64_t>{110});
  CHECK(base.weights == std::vector<std::uint64_t>{786432, 262144});
  CHECK(base.vp == std::vector<std::uint64_t>{66, 1234, 66});

  SECTION("counts scaled inside the class: the importer's part is the same") {
    const Parts doubled = split(program(200));
    CHECK(doubled.bitcode[0] == base.bitcode[0]);
    CHECK(doubled.bitcode[1] != base.bitcode[1]); // the callee's own part has its counts
  }
  SECTION("another class: the importer's part changes") {
    const Parts hot = split(program(8000)); // 8,000 calls: hot
    CHECK(hot.bitcode[0] != base.bitcode[0]);
    CHECK(hot.entry == std::optional<std::uint64_t>{4096});
    // The ratios stay; the value profile scales to the class's count.
    CHECK(hot.weights == std::vector<std::uint64_t>{786432, 262144});
    CHECK(hot.vp == std::vector<std::uint64_t>{2457, 1234, 2457});
  }
  SECTION("without a summary: the copy keeps its counts, its branches their ratios") {
    std::string ir = program(100);
    ir.erase(ir.find("\n!llvm.module.flags"));
    const Parts bare = split(ir);
    CHECK(bare.entry == std::optional<std::uint64_t>{100});
    CHECK(bare.vp == std::vector<std::uint64_t>{60, 1234, 60});
    CHECK(bare.weights == std::vector<std::uint64_t>{786432, 262144});
  }
  SECTION("other ratios: the importer's part changes") {
    std::string ir = program(100);
    const std::string from = "i32 75, i32 25";
    REQUIRE(ir.find(from) != std::string::npos);
    ir.replace(ir.find(from), from.size(), "i32 50, i32 50");
    CHECK(split(ir).bitcode[0] != base.bitcode[0]);
  }
}
