// Front-end IR as fdod receives it (clang -O2 -Xclang -disable-llvm-optzns, no
// -march: every function pinned to baseline x86-64) compiles in plain mode
// like clang -O2 -march=native compiles the source: for the host CPU, with
// the front end's type-based alias information. bench/fdo_effect's
// codegen_gap.py checks the same on whole kernels against clang's own output.
#include "fdo/jit/compiler.h"
#include "jit_test_util.h"

#include <catch2/catch.hpp>
#include <regex>
#include <string>
#include <string_view>

using namespace fdo;
using namespace fdo::jit;
using fdo::jit::test::compile_or_throw;
using fdo::jit::test::contains;
using fdo::jit::test::fixture;
using fdo::jit::test::function_body;
using fdo::jit::test::request;

namespace {

std::string without(const std::string& text, const std::string& pattern) {
  return std::regex_replace(text, std::regex(pattern), "");
}

// The fixture with its function attributes pinning CPU and features removed.
std::string without_target_attributes(const std::string& ir) {
  return without(ir, R"re( "(target-cpu|target-features|tune-cpu)"="[^"]*")re");
}

// Whether the host's feature list (`+a,-b,...`) switches `feature` on.
bool host_has(std::string_view feature) {
  const std::string features = host_identity().features;
  std::string_view rest = features;
  while (!rest.empty()) {
    const std::size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    if (item.size() == feature.size() + 1 && item.front() == '+' && item.substr(1) == feature)
      return true;
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
  }
  return false;
}

} // namespace

TEST_CASE("front-end IR pinned to baseline x86-64 compiles for the host CPU",
          "[jit][compile][host]") {
  const std::string program = fixture("host_target.ll");
  REQUIRE(contains(program, "\"target-cpu\"=\"x86-64\""));
  REQUIRE(contains(program, "\"target-features\"=\"+cx8,+fxsr,+mmx,+sse,+sse2,+x87\""));

  CompileResult pinned = compile_or_throw(program, request(CompileMode::plain, nullptr, true));
  CompileResult unpinned = compile_or_throw(without_target_attributes(program),
                                            request(CompileMode::plain, nullptr, true));

  SECTION("the CPU attributes are dropped: the same object as without them") {
    CHECK_FALSE(contains(pinned.ir, "target-cpu"));
    CHECK_FALSE(contains(pinned.ir, "target-features"));
    CHECK_FALSE(contains(pinned.ir, "tune-cpu"));
    CHECK(pinned.object == unpinned.object);
  }
  SECTION("the loop is vectorized as wide as the host allows") {
    const std::string body = function_body(pinned.ir, "add_scaled");
    REQUIRE_FALSE(body.empty());
    CHECK(contains(body, "vector.body"));
    // Baseline x86-64 (SSE2) has 128-bit vectors: <4 x i32>. A host with
    // AVX2 gets 256 bits or more, which the pinned attributes would forbid.
    if (host_has("avx2"))
      CHECK((contains(body, "<8 x i32>") || contains(body, "<16 x i32>")));
    else
      WARN("host without AVX2: the vector width is not checked");
  }
}

TEST_CASE("type-based alias information survives canonicalisation", "[jit][compile][host]") {
  const std::string program = fixture("host_target.ll");
  REQUIRE(contains(program, "!tbaa"));
  CompileResult r = compile_or_throw(program, request(CompileMode::plain, nullptr, true));
  const std::string body = function_body(r.ir, "add_scaled");
  REQUIRE(contains(body, "vector.body"));
  CHECK(contains(body, "!tbaa"));
  // int32 stores cannot alias the float load: no run-time alias check before
  // the vector loop.
  CHECK_FALSE(contains(body, "vector.memcheck"));

  // The control: without TBAA the same loop needs the run-time check, so
  // the line above tests the metadata and not the loop's shape.
  CompileResult untyped = compile_or_throw(without(program, R"re(, !tbaa ![0-9]+)re"),
                                           request(CompileMode::plain, nullptr, true));
  CHECK(contains(function_body(untyped.ir, "add_scaled"), "vector.memcheck"));
}
