// Partitioned compiles (docs/jit.md, "Partitioned compiles"): the object set
// container, how many parts a compile makes, and that a program linked from
// parts behaves as the same program compiled whole: values, constructors,
// counters, value profiles, writable data restarted, function ranges and the
// block map; a damaged set is an error, never a crash or a partial link.
#include "fdo/jit/compiler.h"
#include "fdo/jit/loader.h"
#include "fdo/jit/object_set.h"
#include "fdo/util/hash.h"
#include "jit_test_util.h"
#include "loader_test_util.h"
#include "partition_test_util.h"

#include <catch2/catch.hpp>
#include <set>

using namespace fdo;
using namespace fdo::jit;
using namespace fdo::jit::test;

namespace {

std::set<std::string> symbols_of(const std::vector<FunctionRange>& ranges) {
  std::set<std::string> out;
  for (const FunctionRange& r : ranges)
    out.insert(r.name);
  return out;
}

} // namespace

TEST_CASE("object set: packs several objects, passes one through, refuses damage",
          "[jit][partition]") {
  const std::vector<std::string> one{"\x7f"
                                     "ELF-one"};
  CHECK(pack_objects(one) == one.front());
  auto single = unpack_objects(one.front());
  REQUIRE(single.has_value());
  CHECK(*single == std::vector<std::string_view>{one.front()});

  const std::vector<std::string> three{"first", "second object", "3"};
  const std::string blob = pack_objects(three);
  CHECK(blob.starts_with(kObjectSetMagic));
  auto back = unpack_objects(blob);
  REQUIRE(back.has_value());
  REQUIRE(back->size() == 3);
  for (std::size_t i = 0; i < 3; ++i)
    CHECK((*back)[i] == three[i]);

  auto corrupt = [](std::string bytes) {
    auto r = unpack_objects(bytes);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().code() == Errc::corrupt);
  };
  corrupt(blob.substr(0, blob.size() - 1));                // last object cut short
  corrupt(blob + "x");                                     // bytes past the last object
  corrupt(blob.substr(0, kObjectSetMagic.size() + 2));     // count cut short
  corrupt(blob.substr(0, kObjectSetMagic.size() + 4 + 8)); // sizes cut short
  std::string one_count = blob;
  one_count[kObjectSetMagic.size()] = 1; // a "set" of one
  corrupt(one_count);
  std::string huge = blob;
  huge[kObjectSetMagic.size() + 4 + 7] = '\x7f'; // first size ~2^62
  corrupt(huge);
  corrupt(pack_objects(std::vector<std::string>{"a", ""})); // an empty object inside
}

TEST_CASE("partitions: a small program, or one thread, pays nothing", "[jit][partition]") {
  const std::string ir = program(12);
  CompileRequest r = request(CompileMode::plain);
  r.threads = 8; // the default min_part_instructions: far more than this program has
  CompileResult small = compile_or_throw(ir, r);
  CHECK(small.partitions == 1);
  CHECK_FALSE(small.object.starts_with(kObjectSetMagic));
  CHECK(small.object.starts_with("\x7f"
                                 "ELF"));

  CompileResult one_thread = compile_or_throw(ir, partitioned(CompileMode::plain, 1));
  CHECK(one_thread.partitions == 1);
  CHECK(one_thread.object == small.object);

  CompileResult split = compile_or_throw(ir, partitioned(CompileMode::plain, 4));
  CHECK(split.partitions == 4);
  CHECK(split.object.starts_with(kObjectSetMagic));
  // The metadata says so, and reads back.
  auto meta = metadata_from_json(metadata_to_json(split));
  REQUIRE(meta.has_value());
  CHECK(meta->partitions == 4);
  CHECK(meta->split == PartitionSplit::inliner);
  // Kept IR is the whole module's: such a compile splits for codegen only.
  CompileRequest keep = partitioned(CompileMode::plain, 4);
  keep.keep_ir = true;
  CompileResult kept = compile_or_throw(ir, keep);
  CHECK(kept.partitions == 4);
  CHECK(kept.split == PartitionSplit::codegen);
  CHECK(contains(kept.ir, "define"));
}

TEST_CASE("partitions: the program linked from parts behaves as the whole one",
          "[jit][partition]") {
  const CompileMode mode = GENERATE(CompileMode::plain, CompileMode::instrumented);
  INFO(to_string(mode));
  const int n = 40;
  const std::string ir = program(n);
  CompileResult whole = compile_or_throw(ir, request(mode));
  CompileResult split = compile_or_throw(ir, partitioned(mode, 3));
  REQUIRE(whole.partitions == 1);
  REQUIRE(split.partitions == 3);
  CHECK(split.split == PartitionSplit::inliner);
  CHECK(split.code_size > 0);
  CHECK(split.entries.size() == whole.entries.size());
  CHECK(split.counters_layout.size() == whole.counters_layout.size());

  auto loader = make_loader();
  auto a = load_or_fail(*loader, whole);
  auto b = load_or_fail(*loader, split);
  // Constructors ran in both (run adds @seed = 17).
  for (std::uint64_t k : {0ULL, 1ULL, 12345ULL, 0xdeadbeefULL})
    CHECK(call(*b, "run", {k}) == call(*a, "run", {k}));
  for (std::uint64_t i : {0ULL, 7ULL, 21ULL, 39ULL})
    CHECK(call(*b, "via_table", {i, 5}) == call(*a, "via_table", {i, 5}));
  CHECK(call(*b, "calls_so_far", {}) == 4);
  CHECK(call(*a, "calls_so_far", {}) == 4);

  // Every function is found, with its range, in the parts.
  CHECK(symbols_of(b->function_ranges()) == symbols_of(a->function_ranges()));
  if (mode == CompileMode::instrumented) {
    // Counters and value profiles (the table's indirect calls) are read
    // wherever their part put them.
    CHECK(b->read_counters() == a->read_counters());
    auto va = a->read_value_profiles(), vb = b->read_value_profiles();
    REQUIRE(va.size() == vb.size());
    CHECK_FALSE(vb.empty());
  }
  // The block map covers the same functions and blocks.
  REQUIRE(split.block_map.size() == whole.block_map.size());

  // Writable data of every part goes back to its link-time contents.
  REQUIRE(b->restart().has_value());
  CHECK(call(*b, "calls_so_far", {}) == 0);
  CHECK(call(*b, "run", {1}) == call(*a, "run", {1}));
  CHECK(call(*b, "calls_so_far", {}) == 1);
  if (mode == CompileMode::instrumented) {
    // Counted since the restart only: two calls.
    for (const auto& [name, counts] : b->read_counters())
      if (name.ends_with("calls_so_far")) CHECK(counts.front() == 2);
  }
}

TEST_CASE("partitions: fixtures with constructors, destructors and every thunk",
          "[jit][partition]") {
  auto loader = make_loader();
  CompileResult r = compile_or_throw(fixture("thunks.ll"), partitioned(CompileMode::plain, 2));
  auto p = load_or_fail(*loader, r);
  CHECK(call(*p, "add_i32", {40, 2}) == 42);
  CHECK(call(*p, "calls_internal", {5}) == call(*p, "calls_internal", {5}));
  CHECK(as_double(call(*p, "cos_f64", {slot(0.0)})) == 1.0);
  CompileResult c = compile_or_throw(fixture("ctors.ll"), partitioned(CompileMode::plain, 2));
  CompileResult c1 = compile_or_throw(fixture("ctors.ll"), request(CompileMode::plain));
  auto pc = load_or_fail(*loader, c);
  auto pc1 = load_or_fail(*loader, c1);
  CHECK(call(*pc, "get_state", {}) == call(*pc1, "get_state", {}));
}

TEST_CASE("partitions: a damaged object set is an error, never a partial link",
          "[jit][partition]") {
  CompileResult split = compile_or_throw(program(30), partitioned(CompileMode::plain, 3));
  REQUIRE(split.partitions == 3);
  auto parts = unpack_objects(split.object);
  REQUIRE(parts.has_value());
  auto loader = make_loader();

  SECTION("truncated") {
    auto r =
        loader->load(std::string_view(split.object).substr(0, split.object.size() - 100), split);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().code() == Errc::corrupt);
  }
  SECTION("a part missing") {
    std::vector<std::string> two{std::string((*parts)[0]), std::string((*parts)[1])};
    auto r = loader->load(pack_objects(two), split);
    REQUIRE_FALSE(r.has_value());
    CHECK((r.error().code() == Errc::link || r.error().code() == Errc::invalid_argument));
  }
  SECTION("a part that is not an object") {
    std::vector<std::string> bad{std::string((*parts)[0]), std::string((*parts)[1]),
                                 std::string((*parts)[2].size(), 'x')};
    auto r = loader->load(pack_objects(bad), split);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().code() == Errc::corrupt);
  }
  SECTION("a part from another compile") {
    CompileResult other = compile_or_throw(program(31), partitioned(CompileMode::plain, 3));
    auto theirs = unpack_objects(other.object);
    REQUIRE(theirs.has_value());
    std::vector<std::string> mixed{std::string((*parts)[0]), std::string((*parts)[1]),
                                   std::string((*theirs)[2])};
    // Either a link error, or (when the foreign part happens to define what
    // is missing) a program; never a crash. A cache entry is one blob, so a
    // mixed set cannot come from the cache.
    auto r = loader->load(pack_objects(mixed), split);
    if (!r) CHECK((r.error().code() == Errc::link || r.error().code() == Errc::invalid_argument));
  }
  // The loader still links the intact set afterwards.
  auto ok = load_or_fail(*loader, split);
  CHECK(call(*ok, "calls_so_far", {}) == 0);
}

TEST_CASE("partitions: a profiled program compiled in parts behaves as the whole one",
          "[jit][partition]") {
  const std::string ir = program(40);
  auto loader = make_loader();
  const ProfileDoc doc = gathered_profile(ir, *loader);
  // Optimized mode splits before the inliner; cs_instrumented (its
  // instrumentation comes after the inliner) for codegen only.
  const CompileMode mode = GENERATE(CompileMode::optimized, CompileMode::cs_instrumented);
  INFO(to_string(mode));
  CompileResult whole = compile_or_throw(ir, request(mode, &doc));
  CompileRequest r = partitioned(mode, 3);
  r.profile = &doc;
  CompileResult split = compile_or_throw(ir, r);
  REQUIRE(split.partitions == 3);
  CHECK(split.split ==
        (mode == CompileMode::optimized ? PartitionSplit::inliner : PartitionSplit::codegen));
  CHECK(split.branch_weights == whole.branch_weights);
  CHECK(split.cold_functions == whole.cold_functions);
  CHECK(split.counters_layout.size() == whole.counters_layout.size());
  auto a = load_or_fail(*loader, whole);
  auto b = load_or_fail(*loader, split);
  for (std::uint64_t k : {0ULL, 9ULL, 77ULL, 1ULL << 40})
    CHECK(call(*b, "run", {k}) == call(*a, "run", {k}));
  for (std::uint64_t i : {0ULL, 13ULL, 39ULL})
    CHECK(call(*b, "via_table", {i, 11}) == call(*a, "via_table", {i, 11}));
  if (mode == CompileMode::cs_instrumented) CHECK(b->read_counters() == a->read_counters());
}

// --- Incremental recompiles (docs/jit.md, "Incremental recompiles") ---

namespace {

std::vector<PartOrigin> origins(const CompileResult& r) {
  std::vector<PartOrigin> out;
  for (const PartBuild& b : r.part_builds)
    out.push_back(b.origin);
  return out;
}

// The index of the part defining f<function>: parts are runs of the module
// order f0, f1, ...; the last part whose first function (a canonical name,
// mapped back through local_names) comes at or before it.
std::size_t part_defining(const CompileResult& r, int function) {
  std::size_t found = 0;
  for (std::size_t i = 0; i < r.part_builds.size(); ++i) {
    auto it = r.local_names.find(r.part_builds[i].first_function);
    const std::string first =
        it == r.local_names.end() ? r.part_builds[i].first_function : it->second;
    if (first.size() > 1 && first[0] == 'f' &&
        first.find_first_not_of("0123456789", 1) == std::string::npos &&
        std::stoi(first.substr(1)) <= function)
      found = i;
  }
  return found;
}

} // namespace

TEST_CASE("incremental: the same input again takes every part, a one-function profile change "
          "recompiles only the part it reaches",
          "[jit][partition][incremental]") {
  const std::string ir = program(40);
  auto loader = make_loader();
  const ProfileDoc doc = gathered_profile(ir, *loader);
  CompileRequest r = partitioned(CompileMode::optimized, 4);
  r.profile = &doc;
  const CompileResult first = compile_or_throw(ir, r);
  REQUIRE(first.partitions == 4);
  REQUIRE(first.part_builds.size() == 4);
  std::set<std::string> keys;
  for (const PartBuild& b : first.part_builds) {
    CHECK(b.origin == PartOrigin::not_held);
    CHECK(is_hex_key(b.key));
    CHECK(is_hex_key(b.slice));
    CHECK(is_hex_key(b.object_hash));
    CHECK(b.functions > 0);
    keys.insert(b.key);
  }
  CHECK(keys.size() == 4);

  // The same program and profile: every part taken, the same object set.
  r.held_parts = held_from(first);
  const CompileResult again = compile_or_throw(ir, r);
  CHECK(origins(again) == std::vector<PartOrigin>(4, PartOrigin::reused));
  CHECK(again.object == first.object);
  CHECK(again.block_map.size() == first.block_map.size());

  // One function's counts move by a tenth: only its part is recompiled,
  // and the set is what a compile from nothing gives (no mixed versions).
  ProfileDoc changed = doc;
  const int moved = 21;
  std::string moved_name;
  std::string canonical;
  const std::string moved_submitted = std::string("f").append(std::to_string(moved));
  for (const auto& [canon, submitted] : first.local_names)
    if (submitted == moved_submitted) canonical = canon;
  REQUIRE_FALSE(canonical.empty());
  for (auto& [name, f] : changed.functions)
    if (name == canonical || name.ends_with(":" + canonical) || name.ends_with(";" + canonical)) {
      moved_name = name;
      for (std::uint64_t& c : f.counts)
        c += c / 10;
    }
  INFO("f21 is " << canonical);
  REQUIRE_FALSE(moved_name.empty());
  CompileRequest fresh_request = partitioned(CompileMode::optimized, 4);
  fresh_request.profile = &changed;
  const CompileResult fresh = compile_or_throw(ir, fresh_request);
  CompileRequest incremental_request = fresh_request;
  incremental_request.held_parts = held_from(first);
  const CompileResult incremental = compile_or_throw(ir, incremental_request);
  REQUIRE(incremental.part_builds.size() == 4);
  const std::size_t reached = part_defining(incremental, moved);
  for (std::size_t i = 0; i < 4; ++i) {
    INFO("part " << i << " from " << incremental.part_builds[i].first_function);
    CHECK(incremental.part_builds[i].origin ==
          (i == reached ? PartOrigin::profile_changed : PartOrigin::reused));
  }
  // (Counts a tenth higher throughout keep f21's branch ratios: its code may
  // come out as before, but its part had to be compiled to know.)
  CHECK(incremental.object == fresh.object);
  // And it runs as the whole program compiled with that profile.
  const CompileResult whole = compile_or_throw(ir, request(CompileMode::optimized, &changed));
  auto a = load_or_fail(*loader, whole);
  auto b = load_or_fail(*loader, incremental);
  for (std::uint64_t k : {0ULL, 9ULL, 77ULL, 1ULL << 40})
    CHECK(call(*b, "run", {k}) == call(*a, "run", {k}));
  for (std::uint64_t i : {0ULL, 21ULL, 39ULL})
    CHECK(call(*b, "via_table", {i, 11}) == call(*a, "via_table", {i, 11}));
}

TEST_CASE("incremental: a damaged or foreign held part is compiled afresh, never linked",
          "[jit][partition][incremental]") {
  const std::string ir = program(40);
  auto loader = make_loader();
  const ProfileDoc doc = gathered_profile(ir, *loader);
  CompileRequest r = partitioned(CompileMode::optimized, 4);
  r.profile = &doc;
  const CompileResult first = compile_or_throw(ir, r);
  REQUIRE(first.part_builds.size() == 4);

  // Part 2's held object damaged (its hash no longer matches): recompiled.
  std::vector<HeldPart> held = held_from(first);
  std::string damaged(held[2].object);
  damaged[damaged.size() / 2] ^= 0x5a;
  held[2].object = damaged;
  r.held_parts = held;
  const CompileResult repaired = compile_or_throw(ir, r);
  CHECK(origins(repaired) == std::vector<PartOrigin>{PartOrigin::reused, PartOrigin::reused,
                                                     PartOrigin::held_damaged, PartOrigin::reused});
  CHECK(repaired.object == first.object);
  auto ok = load_or_fail(*loader, repaired);
  CHECK(call(*ok, "run", {5}) != 0);

  // Held parts of a compile with other settings (another knob): none taken.
  ProfileDoc other = doc;
  other.knobs.unroll = !doc.knobs.unroll;
  CompileRequest o = partitioned(CompileMode::optimized, 4);
  o.profile = &other;
  o.held_parts = held_from(first);
  const CompileResult foreign = compile_or_throw(ir, o);
  CHECK(origins(foreign) == std::vector<PartOrigin>(4, PartOrigin::input_changed));

  // Plain mode takes held parts too (its input does not move with the
  // profile), and a compile split for codegen only takes none.
  const CompileResult plain = compile_or_throw(ir, partitioned(CompileMode::plain, 3));
  REQUIRE(plain.part_builds.size() == 3);
  CompileRequest p = partitioned(CompileMode::plain, 3);
  p.held_parts = held_from(plain);
  CHECK(origins(compile_or_throw(ir, p)) == std::vector<PartOrigin>(3, PartOrigin::reused));
  CompileRequest cs = partitioned(CompileMode::cs_instrumented, 3);
  cs.profile = &doc;
  cs.held_parts = held_from(first);
  const CompileResult codegen_only = compile_or_throw(ir, cs);
  CHECK(codegen_only.split == PartitionSplit::codegen);
  CHECK(codegen_only.part_builds.empty());
}
