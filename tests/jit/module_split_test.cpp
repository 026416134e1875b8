// Splitting before the inliner (jit/src/module_split.h): which functions of
// other parts a part gets copies of. Small callees always; medium ones only
// when the module's profile says their entry is hot; none the profile calls
// cold (ThinLTO's import limits and call-site multipliers).
#include "module_split.h"

#include <catch2/catch.hpp>
#include <llvm/AsmParser/Parser.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/Support/SourceMgr.h>
#include <llvm/Support/raw_ostream.h>
#include <set>
#include <string>
#include <utility>
#include <vector>

using namespace fdo::jit::detail;

namespace {

// A function of about `n` instructions (a chain of adds), with an entry
// count when `entry` is not negative.
std::string function(const std::string& name, int n, long entry) {
  std::string s = "define i32 @" + name + "(i32 %x)";
  if (entry >= 0) s += " !prof !{!\"function_entry_count\", i64 " + std::to_string(entry) + "}";
  s += " {\n  %v0 = add i32 %x, 1\n";
  for (int i = 1; i < n; ++i)
    s += "  %v" + std::to_string(i) + " = add i32 %v" + std::to_string(i - 1) + ", " +
         std::to_string(i) + "\n";
  return s + "  ret i32 %v" + std::to_string(n - 1) + "\n}\n";
}

// Hot entries count at least 100, cold ones at most 1.
const char* kSummary = R"(
!llvm.module.flags = !{!0}
!0 = !{i32 1, !"ProfileSummary", !1}
!1 = !{!2, !3, !4, !5, !6, !7, !8, !9}
!2 = !{!"ProfileFormat", !"InstrProf"}
!3 = !{!"TotalCount", i64 100000}
!4 = !{!"MaxCount", i64 10000}
!5 = !{!"MaxInternalCount", i64 1000}
!6 = !{!"MaxFunctionCount", i64 10000}
!7 = !{!"NumCounts", i64 8}
!8 = !{!"NumFunctions", i64 8}
!9 = !{!"DetailedSummary", !10}
!10 = !{!11, !12, !13}
!11 = !{i32 10000, i64 10000, i32 1}
!12 = !{i32 990000, i64 100, i32 3}
!13 = !{i32 999999, i64 1, i32 8}
)";

// The caller in part 0, every callee in part 1: the functions part 0 gets
// copies of.
std::set<std::string> imported_by_caller(bool profiled) {
  struct Callee {
    const char* name;
    int size;
    long entry; // with a profile
  };
  const std::vector<Callee> callees = {
      {"hot_medium", 400, 5000}, {"warm_medium", 400, 50}, {"cold_medium", 400, 0},
      {"hot_small", 40, 5000},   {"warm_small", 40, 50},   {"cold_small", 40, 0},
      {"hot_huge", 1500, 5000},
  };
  std::string ir = "define i32 @caller(i32 %x)";
  if (profiled) ir += " !prof !{!\"function_entry_count\", i64 5000}";
  ir += " {\n";
  std::string last = "%x";
  for (std::size_t i = 0; i < callees.size(); ++i) {
    std::string v = "%c" + std::to_string(i);
    ir += "  " + v + " = call i32 @" + callees[i].name + "(i32 " + last + ")\n";
    last = v;
  }
  ir += "  ret i32 " + last + "\n}\n";
  for (const Callee& c : callees)
    ir += function(c.name, c.size, profiled ? c.entry : -1);
  if (profiled) ir += kSummary;

  llvm::LLVMContext ctx;
  llvm::SMDiagnostic err;
  std::unique_ptr<llvm::Module> m = llvm::parseAssemblyString(ir, err, ctx);
  if (!m) FAIL("the test's IR does not parse: " << err.getMessage().str());
  PartPlan plan;
  plan.parts = 2;
  plan.part_of["caller"] = 0;
  for (const Callee& c : callees)
    plan.part_of[c.name] = 1;
  std::set<std::string> copies;
  unsigned index = 0;
  split_by_module_order(*m, plan, [&](std::unique_ptr<llvm::Module> part) {
    if (index++ != 0) return;
    for (const llvm::Function& f : *part)
      if (!f.isDeclaration() && f.hasAvailableExternallyLinkage()) copies.insert(f.getName().str());
  });
  CHECK(index == 2);
  return copies;
}

} // namespace

TEST_CASE("split: a part imports small callees - and medium ones only where the profile says hot",
          "[jit][partition][import]") {
  SECTION("with a profile: hot up to ten times the limit, cold none") {
    CHECK(imported_by_caller(true) ==
          std::set<std::string>{"hot_medium", "hot_small", "warm_small"});
  }
  SECTION("without a profile: small callees only") {
    CHECK(imported_by_caller(false) ==
          std::set<std::string>{"hot_small", "warm_small", "cold_small"});
  }
}

namespace {

// Splits `ir` by `plan` (function name -> part): each part's printed module.
std::vector<std::string> split_text(const std::string& ir,
                                    const std::vector<std::pair<std::string, unsigned>>& plan_of,
                                    unsigned parts) {
  llvm::LLVMContext ctx;
  llvm::SMDiagnostic err;
  std::unique_ptr<llvm::Module> m = llvm::parseAssemblyString(ir, err, ctx);
  if (!m) FAIL("the test's IR does not parse: " << err.getMessage().str());
  PartPlan plan;
  plan.parts = parts;
  for (const auto& [name, part] : plan_of)
    plan.part_of[name] = part;
  std::vector<std::string> out;
  split_by_module_order(*m, plan, [&](std::unique_ptr<llvm::Module> part) {
    std::string s;
    llvm::raw_string_ostream os(s);
    part->print(os, nullptr);
    out.push_back(os.str());
  });
  return out;
}

} // namespace

TEST_CASE("split: a comdat goes whole with its first member in module order", "[jit][partition]") {
  // `first` (planned for part 1) comes before `second` (planned for part 0).
  const std::string ir = R"(
$group = comdat any
define linkonce_odr i32 @first(i32 %x) comdat($group) { ret i32 %x }
define linkonce_odr i32 @second(i32 %x) comdat($group) { %y = add i32 %x, 1
  ret i32 %y }
define i32 @user(i32 %x) { %a = call i32 @first(i32 %x)
  %b = call i32 @second(i32 %a)
  ret i32 %b }
)";
  for (int round = 0; round < 20; ++round) {
    const std::vector<std::string> parts =
        split_text(ir, {{"first", 1}, {"second", 0}, {"user", 0}}, 2);
    REQUIRE(parts.size() == 2);
    INFO("round " << round << "\npart 0:\n" << parts[0] << "\npart 1:\n" << parts[1]);
    // (Both are used from part 0: made hidden globals of part 1.)
    CHECK_THAT(parts[1], Catch::Contains("define dso_local i32 @first("));
    CHECK_THAT(parts[1], Catch::Contains("define dso_local i32 @second("));
    CHECK_THAT(parts[0], Catch::Contains("declare dso_local i32 @first("));
    CHECK_THAT(parts[0], Catch::Contains("declare dso_local i32 @second("));
  }
}

TEST_CASE("split: unnamed globals another part uses are named in module order",
          "[jit][partition]") {
  // Two unnamed private constants of part 0 read by part 1: named by their
  // order in the module, whatever the allocator did.
  const std::string ir = R"(
@0 = private constant i32 7
@1 = private constant i32 9
define i32 @home() { %a = load i32, ptr @0
  %b = load i32, ptr @1
  %c = add i32 %a, %b
  ret i32 %c }
define i32 @reader() { %a = load i32, ptr @1
  %b = load i32, ptr @0
  %c = sub i32 %a, %b
  ret i32 %c }
)";
  const std::vector<std::string> parts = split_text(ir, {{"home", 0}, {"reader", 1}}, 2);
  REQUIRE(parts.size() == 2);
  INFO("part 0:\n" << parts[0]);
  CHECK_THAT(parts[0], Catch::Contains("@__fdo_part_shared = hidden constant i32 7"));
  CHECK_THAT(parts[0], Catch::Contains("@__fdo_part_shared.1 = hidden constant i32 9"));
}
