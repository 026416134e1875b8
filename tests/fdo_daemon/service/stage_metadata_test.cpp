// A cached entry's metadata is decoded once and kept with the entry
// (stage_metadata.h, cache::Entry::decoded).
#include "fdo/daemon/stage_metadata.h"

#include <catch2/catch.hpp>

using namespace fdo;
using namespace fdo::daemon;

namespace {

cache::Entry entry_with(const jit::CompileResult& r) {
  cache::Entry e;
  e.key = std::string(64, 'c');
  e.object = "object bytes";
  e.metadata = jit::metadata_to_json(r).dump();
  return e;
}

} // namespace

TEST_CASE("stage metadata: decoded on first use, then the same for every stage",
          "[service][stage_metadata]") {
  jit::CompileResult r;
  r.profile_key = std::string(64, 'a');
  r.mode = CompileMode::optimized;
  r.mutable_globals = false;
  r.counters_layout.push_back({"loop", 0x1234, 3});
  r.function_fingerprints["loop"] = "fp";
  r.source_names["loop"] = "/src/loop.c:loop";
  r.branch_weights["loop"] = {jit::BranchWeight{0, 90, 10}};
  const cache::Entry e = entry_with(r);
  auto first = stage_metadata_of(e);
  if (!first) FAIL(first.error().describe());
  CHECK((*first)->cfg_hashes.at("loop") == 0x1234);
  CHECK((*first)->counter_sizes.at("loop") == 3);
  CHECK((*first)->compile.source_names.at("loop") == "/src/loop.c:loop");
  REQUIRE((*first)->branch_weights.at("loop").size() == 1);
  CHECK((*first)->branch_weights.at("loop")[0].taken == 90);
  CHECK_FALSE((*first)->compile.mutable_globals);
  CHECK((*first)->json == nlohmann::json::parse(e.metadata));
  for (int i = 0; i < 3; ++i) {
    auto again = stage_metadata_of(e);
    REQUIRE(again);
    CHECK(again->get() == first->get());
  }
  // A copy of the entry (its metadata may be changed) decodes its own.
  cache::Entry copy = e;
  jit::CompileResult plain;
  plain.profile_key = std::string(64, 'b');
  copy.metadata = jit::metadata_to_json(plain).dump();
  auto other = stage_metadata_of(copy);
  REQUIRE(other);
  CHECK(other->get() != first->get());
  CHECK((*other)->cfg_hashes.empty());
}

TEST_CASE("stage metadata: corrupt metadata is a corrupt error, never kept",
          "[service][stage_metadata]") {
  cache::Entry e;
  e.key = std::string(64, 'd');
  e.metadata = "{not json";
  auto bad = stage_metadata_of(e);
  REQUIRE_FALSE(bad);
  CHECK(bad.error().code() == Errc::corrupt);
  CHECK_THAT(bad.error().message(), Catch::Contains(e.key));
  e.metadata = R"({"mode": 42})";
  auto wrong = stage_metadata_of(e);
  REQUIRE_FALSE(wrong);
  CHECK(wrong.error().code() == Errc::corrupt);
}
