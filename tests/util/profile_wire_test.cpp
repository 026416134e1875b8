// The compile-affecting part of a profile in wire form (profile_wire.h): what
// a compile worker reads is the document's compile view, with its digest; a
// change to any compile-affecting field survives the trip; damaged bytes fail.
#include "fdo/util/profile_wire.h"

#include <catch2/catch.hpp>
#include <functional>

using namespace fdo;

namespace {

// Every field set, bookkeeping included.
ProfileDoc everything() {
  ProfileDoc d;
  d.knobs.opt_level = 3;
  d.knobs.size_level = 1;
  d.knobs.unroll = false;
  d.knobs.inline_threshold = -40;
  d.knobs.mode = CompileMode::optimized;
  d.knobs.text_offset = 32;
  d.knobs.spec_min_share = 60;
  d.knobs.spec_max_clones = 9;
  d.knobs.cold_code = ColdCode::optimize;
  d.functions["main"] =
      FunctionProfile{.cfg_hash = 0xdeadbeefcafef00dULL,
                      .counts = {900, 100, 0},
                      .unpredictable = {1, 7},
                      .fingerprint = "fp",
                      .source_name = "main.c:main",
                      .indirect_calls = {{{0x0123456789abcdefULL, 9}, {5, 1}}, {}},
                      .memop_sizes = {{{8, 40}, {65, 2}}},
                      .layout = FunctionLayout::hot,
                      .arg_values = {{.arg = 1, .values = {{4, 90}}, .other = 3}}};
  d.functions["helper"] =
      FunctionProfile{.cfg_hash = 42, .counts = {7}, .layout = FunctionLayout::cold};
  d.cs_functions["main"] =
      FunctionProfile{.cfg_hash = 9 | kCsHashFlag, .counts = {3, 4}, .fingerprint = "x"};
  d.outside_functions["memcpy"] =
      FunctionProfile{.cfg_hash = 5, .counts = {1}, .source_name = "memcpy"};
  d.gpu.launch_bounds.push_back({"sm_90", "saxpy", 128, 2});
  d.gpu.launches.push_back({"sm_90", "saxpy", 1024, {}, {}});
  d.gpu.trials.push_back({{"sm_90", "saxpy", 256, 0}, TrialVerdict::rejected, 1.2, 5});
  d.hardware = {{"branch_miss_rate", 0.25}};
  d.provenance.reason = "feedback";
  d.provenance.stage = 12;
  d.reprofile_of = 4;
  return d;
}

std::string encode(const ProfileDoc& d) {
  wire::WireWriter w;
  wire::put_compile_profile(w, d);
  auto bytes = std::move(w).take();
  REQUIRE(bytes);
  return *bytes;
}

Expected<ProfileDoc> decode(std::string_view bytes) {
  wire::WireReader r(bytes, "profile");
  ProfileDoc d = wire::get_compile_profile(r);
  FDO_TRY_STATUS(r.finish());
  return d;
}

} // namespace

TEST_CASE("profile wire: a compile worker reads the compile view, with the same digest",
          "[util][profile_wire]") {
  const ProfileDoc d = everything();
  auto back = decode(encode(d));
  REQUIRE(back);
  CHECK(*back == compile_view(d));
  CHECK(profile_digest(*back) == profile_digest(d));
  // Bookkeeping does not travel.
  CHECK(back->provenance.reason.empty());
  CHECK(back->hardware.empty());
  CHECK(back->reprofile_of == 0);
  CHECK(back->gpu.launches.empty());
  CHECK(back->gpu.trials.empty());
  CHECK(back->functions.at("main").source_name.empty());
  // The empty document too.
  auto empty = decode(encode(ProfileDoc{}));
  REQUIRE(empty);
  CHECK(*empty == ProfileDoc{});
}

TEST_CASE("profile wire: a change to any compile-affecting field survives the trip",
          "[util][profile_wire]") {
  const ProfileDoc d = everything();
  const std::string base = profile_digest(d);
  const std::vector<std::function<void(ProfileDoc&)>> changes{
      [](ProfileDoc& c) { c.knobs.opt_level = 1; },
      [](ProfileDoc& c) { c.knobs.size_level = 2; },
      [](ProfileDoc& c) { c.knobs.unroll = true; },
      [](ProfileDoc& c) { c.knobs.vectorize = false; },
      [](ProfileDoc& c) { c.knobs.inline_threshold.reset(); },
      [](ProfileDoc& c) { c.knobs.mode = CompileMode::cs_instrumented; },
      [](ProfileDoc& c) { c.knobs.mode.reset(); },
      [](ProfileDoc& c) { c.knobs.text_offset = 16; },
      [](ProfileDoc& c) { c.knobs.spec_min_share = 0; },
      [](ProfileDoc& c) { c.knobs.spec_max_clones = 1; },
      [](ProfileDoc& c) { c.knobs.cold_code = ColdCode::baseline; },
      [](ProfileDoc& c) { c.functions["main"].cfg_hash ^= 1; },
      [](ProfileDoc& c) { c.functions["main"].counts[2] = 1; },
      [](ProfileDoc& c) { c.functions["main"].unpredictable.pop_back(); },
      [](ProfileDoc& c) { c.functions["main"].indirect_calls[0][1].second++; },
      [](ProfileDoc& c) { c.functions["main"].memop_sizes[0][0].first = 16; },
      [](ProfileDoc& c) { c.functions["main"].layout = FunctionLayout::normal; },
      [](ProfileDoc& c) { c.functions["main"].arg_values[0].values[0].second = 91; },
      [](ProfileDoc& c) { c.functions["main"].arg_values[0].other = 4; },
      [](ProfileDoc& c) { c.functions["main"].arg_values[0].arg = 0; },
      [](ProfileDoc& c) { c.functions.erase("helper"); },
      [](ProfileDoc& c) { c.cs_functions["main"].counts[0] = 5; },
      [](ProfileDoc& c) { c.outside_functions["memcpy"].counts[0] = 2; },
      [](ProfileDoc& c) { c.gpu.launch_bounds[0].max_threads = 64; },
      [](ProfileDoc& c) { c.gpu.launch_bounds[0].min_blocks_per_sm = 0; },
  };
  for (std::size_t i = 0; i < changes.size(); ++i) {
    INFO("change " << i);
    ProfileDoc c = d;
    changes[i](c);
    REQUIRE(profile_digest(c) != base); // the change is compile-affecting
    auto back = decode(encode(c));
    REQUIRE(back);
    CHECK(*back == compile_view(c));
    CHECK(profile_digest(*back) == profile_digest(c));
  }
}

TEST_CASE("profile wire: damaged bytes and values out of range fail, naming what",
          "[util][profile_wire]") {
  const std::string bytes = encode(everything());
  // Cut anywhere: an error, never a crash or a partial document.
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    INFO("cut at " << n);
    auto cut = decode(std::string_view(bytes).substr(0, n));
    REQUIRE_FALSE(cut);
    CHECK(cut.error().code() == Errc::corrupt);
  }
  CHECK_FALSE(decode(bytes + "x")); // trailing bytes
  // Knobs outside the document's ranges, by the document's own check.
  auto refused = [](const ProfileDoc& d, const std::string& says) {
    auto r = decode(encode(d));
    REQUIRE_FALSE(r);
    CHECK(r.error().message().find(says) != std::string::npos);
  };
  ProfileDoc bad = everything();
  bad.knobs.opt_level = 7;
  refused(bad, "knobs.opt_level");
  bad = everything();
  bad.knobs.text_offset = 8;
  refused(bad, "knobs.text_offset");
  bad = everything();
  bad.format = 2;
  refused(bad, "format");
  // An enum past its last value: the layout byte of a document's only
  // function, after format and knobs, its count and name, cfg_hash and four
  // empty lists.
  const std::size_t knobs_end = encode(ProfileDoc{}).size() - 4 * 4;
  ProfileDoc one;
  one.functions["f"] = FunctionProfile{.cfg_hash = 1};
  std::string layout = encode(one);
  const std::size_t at = knobs_end + 4 + 4 + 1 + 8 + 4 * 4;
  REQUIRE(layout[at] == 0);
  layout[at] = 3;
  auto r = decode(layout);
  REQUIRE_FALSE(r);
  CHECK(r.error().message().find("layout") != std::string::npos);
  layout[at] = 2;
  CHECK(decode(layout));
}
