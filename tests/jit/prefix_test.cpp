// The pipeline's prefix (docs/jit.md, "The pipeline's prefix"): a compile
// split at the inliner keeps the module as the pipeline's profile-independent
// prefix leaves it; a later compile of the program, in either PGO mode, with
// the same key starts from it and builds exactly what a compile from nothing
// builds; a damaged, foreign or stale prefix is run afresh, never used.
#include "fdo/jit/compiler.h"
#include "fdo/util/hash.h"
#include "jit_test_util.h"
#include "loader_test_util.h"
#include "partition_test_util.h"

#include <catch2/catch.hpp>
#include <string>

using namespace fdo;
using namespace fdo::jit;
using namespace fdo::jit::test;

namespace {

// program(n) with a named struct type the prefix's module keeps (one read
// back into the compile's own context would come back renamed), and with
// its functions left to the inliners (the PGO pre-inliner in the prefix then
// has calls to inline) or kept out of line.
std::string typed_program(int n, bool inlinable) {
  std::string ir = "%struct.pair = type { i64, ptr }\n"
                   "@pairs = internal global [2 x %struct.pair] zeroinitializer\n"
                   "define i64 @pair_sum(i64 %i) {\n"
                   "  %j = and i64 %i, 1\n"
                   "  %p = getelementptr [2 x %struct.pair], ptr @pairs, i64 0, i64 %j, i32 0\n"
                   "  %v = load i64, ptr %p\n  %s = add i64 %v, %i\n  store i64 %s, ptr %p\n"
                   "  ret i64 %s\n}\n" +
                   program(n);
  if (inlinable)
    for (std::size_t at = ir.find(" noinline {"); at != std::string::npos;
         at = ir.find(" noinline {", at))
      ir.replace(at, 11, " {");
  return ir;
}
std::string inlinable_program(int n) {
  return typed_program(n, true);
}

HeldPrefix held_prefix_of(const CompileResult& r) {
  REQUIRE(r.prefix.has_value());
  REQUIRE_FALSE(r.prefix->bitcode.empty());
  return HeldPrefix{r.prefix->key, r.prefix->bitcode_hash, r.prefix->bitcode};
}

} // namespace

TEST_CASE("prefix: the optimized compile takes the instrumented compile's prefix and builds "
          "what a compile from nothing builds",
          "[jit][partition][prefix]") {
  const bool inlinable = GENERATE(false, true);
  INFO((inlinable ? "functions left to the inliners" : "functions kept out of line"));
  const std::string ir = typed_program(40, inlinable);
  auto loader = make_loader();
  const ProfileDoc doc = gathered_profile(ir, *loader);

  const CompileResult instrumented =
      compile_or_throw(ir, partitioned(CompileMode::instrumented, 4));
  REQUIRE(instrumented.split == PartitionSplit::inliner);
  REQUIRE(instrumented.prefix.has_value());
  CHECK(instrumented.prefix->origin == PrefixOrigin::not_held);
  CHECK(is_hex_key(instrumented.prefix->key));
  CHECK(instrumented.prefix->bitcode_hash == blake3_hex(instrumented.prefix->bitcode));

  CompileRequest r = partitioned(CompileMode::optimized, 4);
  r.profile = &doc;
  const CompileResult fresh = compile_or_throw(ir, r);
  REQUIRE(fresh.prefix.has_value());
  CHECK(fresh.prefix->origin == PrefixOrigin::not_held);
  // The prefix reads no counts: both modes have the same one.
  CHECK(fresh.prefix->key == instrumented.prefix->key);
  CHECK(fresh.prefix->bitcode == instrumented.prefix->bitcode);

  r.held_prefix = held_prefix_of(instrumented);
  const CompileResult taken = compile_or_throw(ir, r);
  REQUIRE(taken.prefix.has_value());
  CHECK(taken.prefix->origin == PrefixOrigin::reused);
  CHECK(taken.prefix->key == fresh.prefix->key);
  CHECK(taken.prefix->bitcode_hash == fresh.prefix->bitcode_hash);
  CHECK(taken.prefix->bitcode.empty()); // the caller holds it already
  // Byte for byte the compile from nothing: the same parts, the same set.
  REQUIRE(taken.part_builds.size() == fresh.part_builds.size());
  for (std::size_t i = 0; i < fresh.part_builds.size(); ++i)
    CHECK(taken.part_builds[i].key == fresh.part_builds[i].key);
  CHECK(taken.object == fresh.object);
  CHECK(taken.branch_weights == fresh.branch_weights);
  CHECK(taken.cold_functions == fresh.cold_functions);

  // With the parts held as well, nothing is compiled, and the same set comes.
  r.held_parts = held_from(fresh);
  const CompileResult all_held = compile_or_throw(ir, r);
  for (const PartBuild& b : all_held.part_builds)
    CHECK(b.origin == PartOrigin::reused);
  CHECK(all_held.object == fresh.object);

  // The instrumented compile from the prefix: the same counters, the same set.
  CompileRequest again = partitioned(CompileMode::instrumented, 4);
  again.held_prefix = held_prefix_of(fresh);
  const CompileResult instrumented_again = compile_or_throw(ir, again);
  CHECK(instrumented_again.prefix->origin == PrefixOrigin::reused);
  CHECK(instrumented_again.object == instrumented.object);
  CHECK(instrumented_again.counters_layout.size() == instrumented.counters_layout.size());

  // And the program behaves as compiled whole.
  const CompileResult whole = compile_or_throw(ir, request(CompileMode::optimized, &doc));
  auto a = load_or_fail(*loader, whole);
  auto b = load_or_fail(*loader, taken);
  for (std::uint64_t k : {0ULL, 9ULL, 77ULL, 1ULL << 40})
    CHECK(call(*b, "run", {k}) == call(*a, "run", {k}));
  for (std::uint64_t i : {0ULL, 21ULL, 39ULL})
    CHECK(call(*b, "via_table", {i, 11}) == call(*a, "via_table", {i, 11}));
}

TEST_CASE("prefix: a damaged, foreign or stale held prefix is run afresh, never used",
          "[jit][partition][prefix]") {
  const std::string ir = inlinable_program(40);
  auto loader = make_loader();
  const ProfileDoc doc = gathered_profile(ir, *loader);
  CompileRequest r = partitioned(CompileMode::optimized, 4);
  r.profile = &doc;
  const CompileResult fresh = compile_or_throw(ir, r);
  const HeldPrefix good = held_prefix_of(fresh);
  auto offered = [&](const CompileRequest& req, HeldPrefix held) {
    CompileRequest with = req;
    with.held_prefix = std::move(held);
    return compile_or_throw(ir, with);
  };

  SECTION("damaged bitcode (its hash no longer matches)") {
    std::string damaged(good.bitcode);
    damaged[damaged.size() / 2] ^= 0x5a;
    const CompileResult c = offered(r, HeldPrefix{good.key, good.bitcode_hash, damaged});
    CHECK(c.prefix->origin == PrefixOrigin::held_damaged);
    CHECK(c.prefix->bitcode == fresh.prefix->bitcode); // run afresh and offered back
    CHECK(c.object == fresh.object);
  }
  SECTION("bytes that hash as named but are no bitcode") {
    const std::string junk(4096, '\x42');
    const CompileResult c = offered(r, HeldPrefix{good.key, blake3_hex(junk), junk});
    CHECK(c.prefix->origin == PrefixOrigin::held_damaged);
    CHECK(c.object == fresh.object);
  }
  SECTION("truncated bitcode") {
    const std::string cut(good.bitcode.substr(0, good.bitcode.size() / 3));
    const CompileResult c = offered(r, HeldPrefix{good.key, blake3_hex(cut), cut});
    CHECK(c.prefix->origin == PrefixOrigin::held_damaged);
    CHECK(c.object == fresh.object);
  }
  SECTION("another program's prefix") {
    const std::string other_ir = inlinable_program(41);
    CompileRequest o = partitioned(CompileMode::instrumented, 4);
    const CompileResult other = compile_or_throw(other_ir, o);
    const CompileResult c = offered(r, held_prefix_of(other));
    CHECK(c.prefix->origin == PrefixOrigin::input_changed);
    CHECK(c.prefix->key == fresh.prefix->key);
    CHECK(c.object == fresh.object);
  }
  SECTION("a knob the pipeline reads changes the key") {
    ProfileDoc changed = doc;
    changed.knobs.unroll = !doc.knobs.unroll;
    CompileRequest o = r;
    o.profile = &changed;
    const CompileResult c = offered(o, good);
    CHECK(c.prefix->origin == PrefixOrigin::input_changed);
    CHECK(c.prefix->key != good.key);
  }
  SECTION("knobs only later passes or the loader read leave it") {
    ProfileDoc changed = doc;
    changed.knobs.text_offset = 32;
    changed.knobs.spec_min_share = 0;
    CompileRequest o = r;
    o.profile = &changed;
    const CompileResult c = offered(o, good);
    CHECK(c.prefix->origin == PrefixOrigin::reused);
    CompileRequest from_nothing = o;
    CHECK(c.object == compile_or_throw(ir, from_nothing).object);
  }
}

TEST_CASE("prefix: only a compile split at the inliner with a PGO pipeline has one",
          "[jit][partition][prefix]") {
  const std::string ir = inlinable_program(40);
  auto loader = make_loader();
  const ProfileDoc doc = gathered_profile(ir, *loader);
  const CompileResult instrumented =
      compile_or_throw(ir, partitioned(CompileMode::instrumented, 4));
  const HeldPrefix held = held_prefix_of(instrumented);

  // No PGO pass to end a prefix at: plain mode splits at the inliner without one.
  CompileRequest plain = partitioned(CompileMode::plain, 4);
  plain.held_prefix = held;
  const CompileResult p = compile_or_throw(ir, plain);
  CHECK(p.split == PartitionSplit::inliner);
  CHECK_FALSE(p.prefix.has_value());
  // In one piece, with kept IR, or context-sensitive (split for codegen only).
  CompileRequest one = request(CompileMode::optimized, &doc);
  one.held_prefix = held;
  CHECK_FALSE(compile_or_throw(ir, one).prefix.has_value());
  CompileRequest kept = partitioned(CompileMode::optimized, 4);
  kept.profile = &doc;
  kept.keep_ir = true;
  kept.held_prefix = held;
  CHECK_FALSE(compile_or_throw(ir, kept).prefix.has_value());
  CompileRequest cs = partitioned(CompileMode::cs_instrumented, 4);
  cs.profile = &doc;
  cs.held_prefix = held;
  const CompileResult c = compile_or_throw(ir, cs);
  CHECK(c.split == PartitionSplit::codegen);
  CHECK_FALSE(c.prefix.has_value());
}
