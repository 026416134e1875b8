// Rotates folded into a multiply are made explicit before codegen
// (jit/src/rotate_idiom.h): with a profile the hash loop is unrolled, and
// without the rewrite codegen's constant hoisting hid its rotate (the cause
// of profile-guided code running slower than unguided code, docs/perf.md).
#include "pgo_test_util.h"

#include <catch2/catch.hpp>

using namespace fdo;
using namespace fdo::jit;
using namespace fdo::jit::test;

namespace {
// The fixture's @hash, computed here.
std::uint64_t reference_hash(std::uint64_t n) {
  std::uint64_t h = 1469598103934665603ULL;
  for (std::uint64_t i = 0; i < n; ++i) {
    std::uint64_t hm = (h ^ (i & 255)) * 1099511628211ULL;
    h = (hm >> 60) < 4 ? (hm << 5) | (hm >> 59) : hm;
  }
  return h;
}
} // namespace

TEST_CASE("rotate behind a multiply: explicit in the profiled hash loop and results unchanged",
          "[jit][rotate]") {
  Instrumented i = load_instrumented("rotate_hash.ll");
  REQUIRE(i.program->call("hash", std::vector<std::uint64_t>{100000}).has_value());
  ProfileDoc profile = profile_from(i);

  CompileResult o =
      compile_or_throw(fixture("rotate_hash.ll"), request(CompileMode::optimized, &profile, true));
  const std::string hash = function_body(o.ir, "hash");
  REQUIRE_FALSE(hash.empty());
  INFO(hash);
  // The profile made the loop hot: unrolled, each copy's rotate explicit and
  // the folded multiply by P << 5 gone.
  CHECK(contains(hash, "@llvm.fshl.i64"));
  CHECK_FALSE(contains(hash, "35184372102752"));

  // Not a rotate (4 + 59 != 64): left alone.
  const std::string other = function_body(o.ir, "not_a_rotate");
  CHECK_FALSE(contains(other, "fshl"));

  auto p = i.loader->load(o.object, o);
  if (!p) FAIL(p.error().describe());
  for (std::uint64_t n : {0ULL, 1ULL, 2ULL, 7ULL, 1000ULL, 100001ULL})
    CHECK((*p)->call("hash", std::vector<std::uint64_t>{n}).value_or(0) ==
          reference_hash(n == 0 ? 1 : n));
  const std::uint64_t x = 0x0123456789abcdefULL;
  const std::uint64_t m = x * 1099511628211ULL;
  CHECK((*p)->call("not_a_rotate", std::vector<std::uint64_t>{x}).value_or(0) ==
        ((m >> 59) | (x * 17592186051376ULL)));
}
