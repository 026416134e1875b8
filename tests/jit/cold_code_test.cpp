// Cold code (jit/src/cold_code.h, docs/jit.md "Cold code"): in optimized
// mode the functions that did next to none of the profiled work compile
// without optimization.
#include "fdo/jit/compiler.h"
#include "fdo/jit/loader.h"
#include "jit_test_util.h"
#include "pgo_test_util.h"

#include <catch2/catch.hpp>
#include <regex>

using namespace fdo;
using namespace fdo::jit;
using namespace fdo::jit::test;

namespace {

// The attributes of `name`'s definition in printed IR (its attribute group).
std::string attributes_of(const std::string& ir, const std::string& name) {
  const std::regex define("^define .*@" + name + R"(\(.*\).* #(\d+))");
  std::string group;
  for (const std::string& line : lines_of(ir)) {
    std::smatch m;
    if (std::regex_search(line, m, define)) group = m[1];
  }
  if (group.empty()) return "";
  for (const std::string& line : lines_of(ir))
    if (line.starts_with("attributes #" + group + " = ")) return line;
  return "";
}
} // namespace

TEST_CASE("functions profiled at 0 calls compile without optimization unless cold_code optimize",
          "[jit][pgo][cold]") {
  Instrumented i = load_instrumented("loop_branch.ll");
  REQUIRE(i.program->call("run", std::vector<std::uint64_t>{1000}).has_value());
  ProfileDoc profile = profile_from(i);
  REQUIRE(profile.functions.at("cold_total").counts == std::vector<std::uint64_t>{0});

  CompileResult o =
      compile_or_throw(fixture("loop_branch.ll"), request(CompileMode::optimized, &profile, true));
  CHECK(o.cold_functions == 1);
  const std::string cold = attributes_of(o.ir, "cold_total");
  CHECK(contains(cold, "optnone"));
  CHECK(contains(cold, "noinline"));
  CHECK(contains(function_body(o.ir, "cold_total"), "!section_prefix"));
  CHECK(contains(o.ir, R"(!{!"function_section_prefix", !"unlikely"})"));
  for (const char* hot : {"run", "on_hot", "on_cold"})
    CHECK_FALSE(contains(attributes_of(o.ir, hot), "optnone"));
  // The metadata carries the count; the code computes what it did.
  auto meta = metadata_from_json(metadata_to_json(o));
  REQUIRE(meta);
  CHECK(meta->cold_functions == 1);
  auto p = i.loader->load(o.object, o);
  if (!p) FAIL(p.error().describe());
  CHECK((*p)->call("run", std::vector<std::uint64_t>{50}).value_or(0) == 45);
  CHECK((*p)->call("cold_total", std::vector<std::uint64_t>{}).value_or(99) == 5);

  // The knob turns it off; other modes never do it.
  profile.knobs.cold_code = ColdCode::optimize;
  CompileResult all =
      compile_or_throw(fixture("loop_branch.ll"), request(CompileMode::optimized, &profile, true));
  CHECK(all.cold_functions == 0);
  CHECK_FALSE(contains(attributes_of(all.ir, "cold_total"), "optnone"));
  profile.knobs.cold_code = ColdCode::baseline;
  CompileResult plain =
      compile_or_throw(fixture("loop_branch.ll"), request(CompileMode::plain, &profile, true));
  CHECK(plain.cold_functions == 0);
  CHECK_FALSE(contains(attributes_of(plain.ir, "cold_total"), "optnone"));
}

TEST_CASE("cold code: the pipeline's optional passes skip a function profiled at 0 calls",
          "[jit][pgo][cold]") {
  // A summing loop that the optimization pipeline (indvars) replaces by a
  // closed form: still a loop when the function is compiled at baseline.
  const std::string ir = R"(
define i64 @sum_to(i64 %n) noinline {
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i1, %loop ]
  %s = phi i64 [ 0, %entry ], [ %s1, %loop ]
  %s1 = add i64 %s, %i
  %i1 = add i64 %i, 1
  %more = icmp ult i64 %i1, %n
  br i1 %more, label %loop, label %done
done:
  ret i64 %s1
}
define i64 @hot(i64 %n) noinline {
entry:
  %r = call i64 @sum_to(i64 %n)
  ret i64 %r
}
define i64 @cold(i64 %n) noinline {
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i1, %loop ]
  %s = phi i64 [ 0, %entry ], [ %s1, %loop ]
  %s1 = add i64 %s, %i
  %i1 = add i64 %i, 1
  %more = icmp ult i64 %i1, %n
  br i1 %more, label %loop, label %done
done:
  %d = mul i64 %s1, 2
  ret i64 %d
}
)";
  CompileResult instrumented = compile_or_throw(ir, request(CompileMode::instrumented));
  auto loader = Loader::create();
  REQUIRE(loader);
  auto p = (*loader)->load(instrumented.object, instrumented);
  if (!p) FAIL(p.error().describe());
  REQUIRE((*p)->call("hot", std::vector<std::uint64_t>{10}).value_or(0) == 45);
  ProfileDoc profile = profile_from(instrumented, **p);
  // `cold` never ran: its loop stays a loop; optimized, it is a closed form.
  CompileResult baseline = compile_or_throw(ir, request(CompileMode::optimized, &profile, true));
  CHECK(baseline.cold_functions == 1);
  CHECK(contains(function_body(baseline.ir, "cold"), "phi i64"));
  CHECK_FALSE(contains(function_body(baseline.ir, "sum_to"), "phi i64")); // hot: optimized
  profile.knobs.cold_code = ColdCode::optimize;
  CompileResult optimized = compile_or_throw(ir, request(CompileMode::optimized, &profile, true));
  CHECK(optimized.cold_functions == 0);
  CHECK_FALSE(contains(function_body(optimized.ir, "cold"), "phi i64"));
  auto q = (*loader)->load(baseline.object, baseline);
  if (!q) FAIL(q.error().describe());
  CHECK((*q)->call("cold", std::vector<std::uint64_t>{10}).value_or(0) == 90);
  CHECK((*q)->call("hot", std::vector<std::uint64_t>{10}).value_or(0) == 45);
}

TEST_CASE("cold code: functions that did next to none of the profiled work compile at baseline",
          "[jit][pgo][cold]") {
  // `setup` runs once per call of `run` (three instructions), `step` on every
  // iteration of its loop, `run` itself is entered once around the loop:
  // with n = 100,000 the profiled work is ~10^6 instructions, and `setup`'s
  // three are under the 1/10,000 share; `run`'s entry count (1) is as low as
  // `setup`'s, but its loop's blocks are not.
  const std::string ir = R"(
define i64 @setup(i64 %n) noinline {
entry:
  %a = mul i64 %n, 3
  %b = add i64 %a, 7
  ret i64 %b
}
define i64 @step(i64 %x) noinline {
entry:
  %y = mul i64 %x, 2654435761
  %z = xor i64 %y, 12345
  ret i64 %z
}
define i64 @never(i64 %x) noinline {
entry:
  %y = add i64 %x, 1
  ret i64 %y
}
define i64 @run(i64 %n) {
entry:
  %s0 = call i64 @setup(i64 %n)
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i1, %loop ]
  %s = phi i64 [ %s0, %entry ], [ %s1, %loop ]
  %t = call i64 @step(i64 %s)
  %s1 = add i64 %t, %i
  %i1 = add i64 %i, 1
  %more = icmp ult i64 %i1, %n
  br i1 %more, label %loop, label %done
done:
  ret i64 %s1
}
)";
  CompileResult instrumented = compile_or_throw(ir, request(CompileMode::instrumented));
  auto loader = Loader::create();
  REQUIRE(loader);
  auto p = (*loader)->load(instrumented.object, instrumented);
  if (!p) FAIL(p.error().describe());
  const std::uint64_t expected = (*p)->call("run", std::vector<std::uint64_t>{100000}).value();
  ProfileDoc profile = profile_from(instrumented, **p);

  CompileResult o = compile_or_throw(ir, request(CompileMode::optimized, &profile, true));
  CHECK(o.cold_functions == 2);
  for (const char* baseline : {"setup", "never"}) {
    INFO(baseline);
    const std::string attrs = attributes_of(o.ir, baseline);
    CHECK(contains(attrs, "optnone"));
    CHECK(contains(attrs, "noinline"));
    CHECK(contains(function_body(o.ir, baseline), "!section_prefix"));
  }
  for (const char* optimized : {"run", "step"}) {
    INFO(optimized);
    CHECK_FALSE(contains(attributes_of(o.ir, optimized), "optnone"));
  }
  auto q = (*loader)->load(o.object, o);
  if (!q) FAIL(q.error().describe());
  CHECK((*q)->call("run", std::vector<std::uint64_t>{100000}).value_or(0) == expected);
  CHECK((*q)->call("setup", std::vector<std::uint64_t>{5}).value_or(0) == 22);

  // A workload where `setup`'s share is larger: n = 10 makes `run`'s loop
  // short, so nothing but the never-called function is under the share.
  (*p)->reset_counters();
  REQUIRE((*p)->call("run", std::vector<std::uint64_t>{10}).has_value());
  const ProfileDoc short_loop = profile_from(instrumented, **p);
  CompileResult s = compile_or_throw(ir, request(CompileMode::optimized, &short_loop, true));
  CHECK(s.cold_functions == 1);
  CHECK(contains(attributes_of(s.ir, "never"), "optnone"));
  CHECK_FALSE(contains(attributes_of(s.ir, "setup"), "optnone"));
}
