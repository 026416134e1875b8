// profile_write.cpp against the long way round (profile_reference.h): the
// text and digest written from the struct are byte for byte those of the
// document's nlohmann tree, and normalize_profile accepts, refuses and
// rewrites exactly what a write and a read back through JSON would.
#include "fdo/util/profile.h"
#include "profile_reference.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <limits>
#include <random>

using namespace fdo;
using fdo::test::reference_digest;
using fdo::test::reference_text;
using nlohmann::json;

namespace {

// Names with every kind of byte a JSON string escapes or carries as is.
const std::vector<std::string> kNames = {"main",
                                         "helper",
                                         "fdo:fdo.local.0",
                                         "a\"quote",
                                         "back\\slash",
                                         "tab\there",
                                         "nl\nx",
                                         "ctl\x01\x1f",
                                         "del\x7f",
                                         "caf\xc3\xa9",
                                         "\xe6\x97\xa5",
                                         "z",
                                         "A",
                                         "dispatch.c:run_op",
                                         "",
                                         "\xf0\x9f\x98\x80 emoji",
                                         "b\bf\fr\r"};

std::uint64_t pick(std::mt19937_64& rng, std::uint64_t n) {
  return std::uniform_int_distribution<std::uint64_t>(0, n - 1)(rng);
}

std::uint64_t any_u64(std::mt19937_64& rng) {
  switch (pick(rng, 4)) {
  case 0:
    return 0;
  case 1:
    return pick(rng, 1000);
  case 2:
    return std::numeric_limits<std::uint64_t>::max();
  default:
    return rng();
  }
}

ValueSite site(std::mt19937_64& rng) {
  ValueSite s;
  for (std::uint64_t i = pick(rng, 4); i > 0; --i)
    s.emplace_back(any_u64(rng), any_u64(rng));
  return s;
}

FunctionProfile function(std::mt19937_64& rng, bool cs) {
  FunctionProfile f;
  f.cfg_hash = any_u64(rng);
  if (cs) f.cfg_hash |= kCsHashFlag;
  for (std::uint64_t i = pick(rng, 6); i > 0; --i)
    f.counts.push_back(any_u64(rng));
  for (std::uint64_t i = pick(rng, 3); i > 0; --i)
    f.unpredictable.push_back(static_cast<std::uint32_t>(rng()));
  if (pick(rng, 2)) f.fingerprint = kNames[pick(rng, kNames.size())];
  if (pick(rng, 2)) f.source_name = kNames[pick(rng, kNames.size())];
  for (std::uint64_t i = pick(rng, 3); i > 0; --i)
    f.indirect_calls.push_back(site(rng));
  for (std::uint64_t i = pick(rng, 3); i > 0; --i)
    f.memop_sizes.push_back(site(rng));
  f.layout = static_cast<FunctionLayout>(pick(rng, 3));
  for (std::uint32_t arg = 0, n = static_cast<std::uint32_t>(pick(rng, 3)); arg < n; ++arg)
    f.arg_values.push_back(ArgValues{.arg = arg * 7, .values = site(rng), .other = any_u64(rng)});
  return f;
}

std::map<std::string, FunctionProfile> functions(std::mt19937_64& rng, bool cs) {
  std::map<std::string, FunctionProfile> out;
  for (std::uint64_t i = pick(rng, 6); i > 0; --i)
    out[kNames[pick(rng, kNames.size())]] = function(rng, cs);
  return out;
}

// A document with every member drawn, valid for the format.
ProfileDoc random_doc(std::mt19937_64& rng) {
  ProfileDoc d;
  d.knobs.opt_level = static_cast<int>(pick(rng, 4));
  d.knobs.size_level = static_cast<int>(pick(rng, 3));
  d.knobs.unroll = pick(rng, 2) != 0;
  if (pick(rng, 2)) d.knobs.inline_threshold = static_cast<int>(pick(rng, 500)) - 100;
  if (pick(rng, 2)) d.knobs.mode = static_cast<CompileMode>(pick(rng, 4));
  d.knobs.text_offset = static_cast<int>(pick(rng, 4)) * kTextOffsetStep;
  if (pick(rng, 2))
    d.knobs.spec_min_share = pick(rng, 2) ? 0 : 50 + static_cast<int>(pick(rng, 51));
  if (pick(rng, 2)) d.knobs.cold_code = ColdCode::optimize;
  d.functions = functions(rng, false);
  if (pick(rng, 2)) d.cs_functions = functions(rng, true);
  if (pick(rng, 3) == 0) d.outside_functions = functions(rng, false);
  if (pick(rng, 2))
    d.hardware = {{"branch_miss_rate", 0.125 * static_cast<double>(pick(rng, 9))},
                  {"sampling", {{"samples", pick(rng, 100)}, {"name", kNames[pick(rng, 9)]}}}};
  d.provenance = {kNames[pick(rng, kNames.size())], "2026-12-02T03:00:00.000Z",
                  kNames[pick(rng, kNames.size())], static_cast<std::int64_t>(pick(rng, 50)), "ik"};
  if (pick(rng, 3) == 0) {
    d.guard.trialled_digest = "d1";
    d.guard.tuning_step = 2;
    d.guard.trials.push_back(TrialRecord{.candidate = kNames[pick(rng, kNames.size())],
                                         .incumbent = "plain O2",
                                         .verdict = TrialVerdict::rejected,
                                         .ratio = 1.07,
                                         .candidate_stages = 12,
                                         .incumbent_stages = 12,
                                         .early_stop = false,
                                         .profile_version = 3,
                                         .decided_at = "2026-12-01T00:00:00.000Z",
                                         .summary = "rejected"});
  }
  if (pick(rng, 4) == 0) {
    d.gpu.launches.push_back(GpuLaunchRecord{
        "sm_90", kNames[pick(rng, 9)], 1 << 20, {{528, 1, 1}, {256, 1, 1}, 0.12}, {}});
    if (pick(rng, 2)) d.gpu.launch_bounds.push_back({"sm_90", "saxpy", 256, 0});
  }
  if (pick(rng, 3) == 0) d.reprofile_of = static_cast<std::int64_t>(pick(rng, 9)) + 1;
  return d;
}

// What a write then a read through JSON makes of `d` (the reference), or its error.
Expected<ProfileDoc> through_json(const ProfileDoc& d) {
  return profile_from_json(to_json(d));
}

} // namespace

TEST_CASE("text and digest written from the struct are the JSON tree's, byte for byte",
          "[util][profile][profile_write]") {
  std::mt19937_64 rng(20261202);
  for (int i = 0; i < 2000; ++i) {
    INFO("document " << i);
    ProfileDoc d = random_doc(rng);
    auto back = through_json(d);
    REQUIRE(back);
    ProfileDoc n = d;
    REQUIRE(normalize_profile(n));
    CHECK(n == *back);
    auto text = profile_text(n);
    REQUIRE(text);
    CHECK(*text == reference_text(n));
    CHECK(profile_digest(n) == reference_digest(n));
    // The one-pass form gives both, the digest cut from the document's text.
    auto both = profile_text_and_digest(n);
    REQUIRE(both);
    CHECK(both->text == *text);
    CHECK(both->digest == reference_digest(n));
    // And the text reads back as the document it was written from.
    auto parsed = parse_profile(*text);
    REQUIRE(parsed);
    CHECK(*parsed == n);
  }
  // The empty document too.
  ProfileDoc empty;
  REQUIRE(normalize_profile(empty));
  CHECK(*profile_text(empty) == reference_text(empty));
  CHECK(profile_digest(empty) == reference_digest(empty));
  CHECK(profile_text_and_digest(empty)->digest == reference_digest(empty));
}

TEST_CASE("normalize_profile refuses what reading the document's JSON refuses",
          "[util][profile][profile_write]") {
  using Change = std::function<void(ProfileDoc&)>;
  const std::vector<std::pair<const char*, Change>> bad = {
      {"format 0", [](ProfileDoc& d) { d.format = 0; }},
      {"format 2", [](ProfileDoc& d) { d.format = ProfileDoc::kFormat + 1; }},
      {"opt_level 9", [](ProfileDoc& d) { d.knobs.opt_level = 9; }},
      {"size_level 3", [](ProfileDoc& d) { d.knobs.size_level = 3; }},
      {"inline_threshold", [](ProfileDoc& d) { d.knobs.inline_threshold = 200000; }},
      {"text_offset 8", [](ProfileDoc& d) { d.knobs.text_offset = 8; }},
      {"text_offset 64", [](ProfileDoc& d) { d.knobs.text_offset = 64; }},
      {"spec_min_share 30", [](ProfileDoc& d) { d.knobs.spec_min_share = 30; }},
      {"spec_max_clones 99", [](ProfileDoc& d) { d.knobs.spec_max_clones = 99; }},
      {"cs hash without its flag",
       [](ProfileDoc& d) { d.cs_functions["f"] = FunctionProfile{.cfg_hash = 5}; }},
      {"argument position",
       [](ProfileDoc& d) { d.functions["f"].arg_values.push_back(ArgValues{.arg = 70000}); }},
      {"argument twice",
       [](ProfileDoc& d) {
         d.functions["f"].arg_values = {ArgValues{.arg = 1}, ArgValues{.arg = 1}};
       }},
      {"layout outside the enum",
       [](ProfileDoc& d) { d.outside_functions["f"].layout = static_cast<FunctionLayout>(7); }},
      {"hardware an array", [](ProfileDoc& d) { d.hardware = json::array({1}); }},
      {"negative stage", [](ProfileDoc& d) { d.provenance.stage = -1; }},
      {"guard tuning step", [](ProfileDoc& d) { d.guard.tuning_step = -4; }},
  };
  for (const auto& [what, change] : bad) {
    INFO(what);
    ProfileDoc d;
    d.functions["main"] = FunctionProfile{.cfg_hash = 1, .counts = {3}};
    change(d);
    CHECK_FALSE(through_json(d));
    auto st = normalize_profile(d);
    REQUIRE_FALSE(st);
    CHECK(st.error().code() == Errc::invalid_argument);
  }
}

TEST_CASE("normalize_profile gives the form a read gives", "[util][profile][profile_write]") {
  ProfileDoc d;
  d.functions["main"] = FunctionProfile{.cfg_hash = 1, .counts = {3}};
  d.hardware = nullptr;
  d.reprofile_of = -3;
  d.guard.incumbent_version = 4; // not recorded while the guard is otherwise empty
  ProfileDoc n = d;
  REQUIRE(normalize_profile(n));
  CHECK(n.hardware == json::object());
  CHECK(n.reprofile_of == 0);
  CHECK(n.guard == GuardRecord{});
  CHECK(n == *through_json(d));
  // A figure that is not a number is written as null, and read so.
  ProfileDoc nan = d;
  nan.hardware = {{"rate", std::nan("")}, {"list", {1.5, INFINITY}}};
  ProfileDoc nn = nan;
  REQUIRE(normalize_profile(nn));
  CHECK(nn.hardware == json({{"rate", nullptr}, {"list", {1.5, nullptr}}}));
  CHECK(nn == *parse_profile(*profile_text(nn)));
}

TEST_CASE("a string that is not UTF-8 is refused, as canonical_json refuses it",
          "[util][profile][profile_write]") {
  const std::vector<std::pair<const char*, std::function<void(ProfileDoc&)>>> cases = {
      {"function name", [](ProfileDoc& d) { d.functions["bad\xff"] = FunctionProfile{}; }},
      {"source name", [](ProfileDoc& d) { d.functions["f"].source_name = "x\xc3"; }},
      {"provenance", [](ProfileDoc& d) { d.provenance.host = "\xfe"; }},
      {"hardware",
       [](ProfileDoc& d) {
         d.hardware = {{"k", "\xc0\xaf"}};
       }},
      {"guard", [](ProfileDoc& d) { d.guard.trialled_digest = "\x80"; }},
  };
  for (const auto& [what, change] : cases) {
    INFO(what);
    ProfileDoc d;
    change(d);
    CHECK_THROWS_AS(reference_text(d), json::type_error);
    auto text = profile_text(d);
    REQUIRE_FALSE(text);
    CHECK(text.error().code() == Errc::invalid_argument);
    auto both = profile_text_and_digest(d);
    REQUIRE_FALSE(both);
    CHECK(both.error().code() == Errc::invalid_argument);
  }
  ProfileDoc named;
  named.functions["bad\xff"] = FunctionProfile{};
  CHECK_THROWS_AS(profile_digest(named), json::type_error);
}
