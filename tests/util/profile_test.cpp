#include "fdo/util/hash.h"
#include "fdo/util/profile.h"
#include "profile_reference.h"

#include <catch2/catch.hpp>

using namespace fdo;
using fdo::test::reference_digest;
using nlohmann::json;

namespace {
ProfileDoc sample() {
  ProfileDoc d;
  d.knobs.opt_level = 3;
  d.functions["main"] = FunctionProfile{.cfg_hash = 0xdeadbeefcafef00dULL,
                                        .counts = {900, 100},
                                        .unpredictable = {1},
                                        .fingerprint = "fp"};
  d.functions["helper"] = FunctionProfile{.cfg_hash = 42, .counts = {7}};
  d.functions["fdo:fdo.local.0"] =
      FunctionProfile{.cfg_hash = 7,
                      .counts = {10, 2},
                      .source_name = "dispatch.c:run_op",
                      .indirect_calls = {{{0x0123456789abcdefULL, 9}, {5, 1}}, {}},
                      .memop_sizes = {{{8, 40}, {65, 2}}}};
  d.provenance.reason = "feedback";
  d.provenance.created_at = "2026-11-22T00:00:00Z";
  d.hardware = {{"branch_miss_rate", 0.25}};
  return d;
}
} // namespace

TEST_CASE("profile JSON round-trips", "[util][profile]") {
  ProfileDoc d = sample();
  auto back = profile_from_json(to_json(d));
  REQUIRE(back);
  CHECK(*back == d);
  auto parsed = parse_profile(to_json(d).dump(2));
  REQUIRE(parsed);
  CHECK(*parsed == d);
}

TEST_CASE("profile digest ignores bookkeeping and key order", "[util][profile]") {
  ProfileDoc d = sample();
  std::string base = profile_digest(d);
  ProfileDoc e = d;
  e.provenance.reason = "import";
  e.provenance.created_at = "2030-01-01T00:00:00Z";
  e.hardware = json::object();
  e.functions["main"].fingerprint = "other";
  e.functions["main"].source_name = "main.c:main";
  CHECK(profile_digest(e) == base);
  // The same document written with keys in another order parses to the same digest.
  std::string reordered = R"({"provenance":{"reason":"x"},"functions":{"helper":{"counts":[7],
    "cfg_hash":"2a"},"fdo:fdo.local.0":{"memop_sizes":[[[8,40],[65,2]]],"counts":[10,2],
    "indirect_calls":[[["0123456789abcdef",9],["5",1]],[]],"cfg_hash":"7"},"main":{"unpredictable":[1],"counts":[900,100],"cfg_hash":"deadbeefcafef00d"}},
    "knobs":{"vectorize":true,"unroll":true,"opt_level":3},"format":1})";
  auto r = parse_profile(reordered);
  REQUIRE(r);
  CHECK(profile_digest(*r) == base);
}

TEST_CASE("profile digest changes with every compile-affecting field", "[util][profile]") {
  ProfileDoc d = sample();
  std::string base = profile_digest(d);
  auto changed = [&](auto mutate) {
    ProfileDoc c = d;
    mutate(c);
    return profile_digest(c) != base;
  };
  CHECK(changed([](ProfileDoc& c) { c.knobs.opt_level = 2; }));
  CHECK(changed([](ProfileDoc& c) { c.knobs.size_level = 1; }));
  CHECK(changed([](ProfileDoc& c) { c.knobs.unroll = false; }));
  CHECK(changed([](ProfileDoc& c) { c.knobs.vectorize = false; }));
  CHECK(changed([](ProfileDoc& c) { c.knobs.inline_threshold = 500; }));
  CHECK(changed([](ProfileDoc& c) { c.knobs.mode = CompileMode::plain; }));
  CHECK(changed([](ProfileDoc& c) { c.functions["main"].counts[0] = 901; }));
  CHECK(changed([](ProfileDoc& c) { c.functions["main"].cfg_hash ^= 1; }));
  CHECK(changed([](ProfileDoc& c) { c.functions["main"].unpredictable.clear(); }));
  CHECK(changed([](ProfileDoc& c) { c.functions.erase("helper"); }));
  CHECK(changed([](ProfileDoc& c) { c.functions["new"] = {}; }));
  CHECK(
      changed([](ProfileDoc& c) { c.functions["fdo:fdo.local.0"].indirect_calls[0][1].second++; }));
  CHECK(changed([](ProfileDoc& c) { c.functions["fdo:fdo.local.0"].memop_sizes.clear(); }));
  CHECK(changed([](ProfileDoc& c) { c.functions["main"].layout = FunctionLayout::hot; }));
  CHECK(changed([](ProfileDoc& c) { c.functions["helper"].layout = FunctionLayout::cold; }));
}

TEST_CASE("the digest written from the struct is the one of the document's JSON",
          "[util][profile]") {
  auto same = [](const ProfileDoc& d) { CHECK(reference_digest(d) == profile_digest(d)); };
  ProfileDoc d = sample();
  same(d);
  same(ProfileDoc{});
  ProfileDoc cs = d;
  cs.cs_functions["main"] = FunctionProfile{.cfg_hash = 9, .counts = {3, 4}, .fingerprint = "x"};
  same(cs);
  ProfileDoc outside = d;
  outside.outside_functions["libc:memcpy"] =
      FunctionProfile{.cfg_hash = 5, .counts = {1}, .source_name = "memcpy"};
  same(outside);
  ProfileDoc knobs = d;
  knobs.knobs.mode = CompileMode::plain;
  knobs.knobs.text_offset = 32;
  knobs.functions["main"].layout = FunctionLayout::cold;
  knobs.reprofile_of = 3;
  same(knobs);
  // Bookkeeping outside the compile does not change either.
  ProfileDoc book = d;
  book.functions["main"].fingerprint = "other";
  book.functions["helper"].source_name = "helper.c:helper";
  book.provenance.reason = "another";
  CHECK(reference_digest(book) == profile_digest(d));
}

TEST_CASE("function layout: round-trips, absent in older documents, bad values rejected",
          "[util][profile]") {
  ProfileDoc d;
  d.functions["hot"] = FunctionProfile{.cfg_hash = 1, .counts = {5}};
  d.functions["hot"].layout = FunctionLayout::hot;
  d.functions["cold"] = FunctionProfile{.cfg_hash = 2, .counts = {0}};
  d.functions["cold"].layout = FunctionLayout::cold;
  d.functions["plain"] = FunctionProfile{.cfg_hash = 3, .counts = {1}};
  const json j = to_json(d);
  CHECK(j["functions"]["hot"]["layout"] == "hot");
  CHECK(j["functions"]["cold"]["layout"] == "cold");
  CHECK_FALSE(j["functions"]["plain"].contains("layout")); // older documents' digest kept
  auto back = profile_from_json(j);
  REQUIRE(back);
  CHECK(*back == d);
  // A document written before layouts existed reads as all normal.
  auto old = parse_profile(
      R"({"format":1,"functions":{"f":{"cfg_hash":"2a","counts":[7],"unpredictable":[]}}})");
  REQUIRE(old);
  CHECK(old->functions.at("f").layout == FunctionLayout::normal);
  // "normal" spelled out reads, and digests, as absent.
  auto spelled = parse_profile(
      R"({"format":1,"functions":{"f":{"cfg_hash":"2a","counts":[7],"unpredictable":[],"layout":"normal"}}})");
  REQUIRE(spelled);
  CHECK(profile_digest(*spelled) == profile_digest(*old));
  auto bad = parse_profile(R"({"functions":{"f":{"cfg_hash":"1","layout":"warm"}}})");
  REQUIRE_FALSE(bad);
  CHECK_THAT(bad.error().message(), Catch::Contains("functions.f.layout"));
  CHECK_THAT(bad.error().message(), Catch::Contains("hot"));
  CHECK_FALSE(parse_profile(R"({"functions":{"f":{"cfg_hash":"1","layout":3}}})"));
}

TEST_CASE("the text offset knob: round-trips, absent at 0, in the digest, bad values rejected",
          "[util][profile]") {
  ProfileDoc d = sample();
  const std::string base_digest = profile_digest(d);
  CHECK_FALSE(to_json(d)["knobs"].contains("text_offset")); // older documents' digest kept
  d.knobs.text_offset = 32;
  const json j = to_json(d);
  CHECK(j["knobs"]["text_offset"] == 32);
  auto back = profile_from_json(j);
  REQUIRE(back);
  CHECK(*back == d);
  CHECK(profile_digest(d) != base_digest); // a compile of its own
  auto knobs = knobs_from_json(to_json(d.knobs));
  REQUIRE(knobs);
  CHECK(knobs->text_offset == 32);
  // 0 spelled out reads, and digests, as absent.
  json zero = to_json(sample());
  zero["knobs"]["text_offset"] = 0;
  auto z = profile_from_json(zero);
  REQUIRE(z);
  CHECK(profile_digest(*z) == base_digest);
  for (const json& v : {json(8), json(64), json(-16), json("32"), json(33.0)}) {
    json badj = to_json(sample());
    badj["knobs"]["text_offset"] = v;
    auto bad = profile_from_json(badj);
    INFO(v.dump());
    REQUIRE_FALSE(bad);
    CHECK_THAT(bad.error().message(), Catch::Contains("knobs.text_offset"));
  }
}

TEST_CASE("documents without source names or value profiles read and digest as before",
          "[util][profile]") {
  // Written before the fields existed: no source_name, no value sites. They
  // parse (display falls back to the PGO name) and keep the digest they had,
  // so existing cache entries stay valid.
  auto old = parse_profile(
      R"({"format":1,"functions":{"fdo:fdo.local.0":{"cfg_hash":"2a","counts":[7],"unpredictable":[]}}})");
  REQUIRE(old);
  const FunctionProfile& f = old->functions.at("fdo:fdo.local.0");
  CHECK(f.source_name.empty());
  CHECK(f.indirect_calls.empty());
  CHECK(f.memop_sizes.empty());
  CHECK(display_name("fdo:fdo.local.0", f) == "fdo:fdo.local.0");
  CHECK_FALSE(to_json(*old)["functions"]["fdo:fdo.local.0"].contains("source_name"));
  CHECK(
      profile_digest(*old) ==
      blake3_hex("fdo.profile.v1\n" + canonical_json({{"format", 1},
                                                      {"knobs", to_json(*old)["knobs"]},
                                                      {"functions",
                                                       {{"fdo:fdo.local.0",
                                                         {{"cfg_hash", "000000000000002a"},
                                                          {"counts", {7}},
                                                          {"unpredictable", json::array()}}}}}})));
  ProfileDoc named = *old;
  named.functions.at("fdo:fdo.local.0").source_name = "lib.c:helper";
  CHECK(display_name("fdo:fdo.local.0", named.functions.at("fdo:fdo.local.0")) == "lib.c:helper");
}

TEST_CASE("profile_from_json rejects bad fields with their path", "[util][profile]") {
  auto bad = [](const char* text) {
    auto r = parse_profile(text);
    REQUIRE_FALSE(r);
    return r.error().message();
  };
  CHECK(bad("[1]").find("object") != std::string::npos);
  CHECK(bad(R"({"knobs":{"opt_level":9}})").find("knobs.opt_level") != std::string::npos);
  CHECK(bad(R"({"functions":{"f":{"cfg_hash":"xyz"}}})").find("functions.f.cfg_hash") !=
        std::string::npos);
  CHECK(bad(R"({"functions":{"f":{"cfg_hash":"1","counts":[-1]}}})").find("counts") !=
        std::string::npos);
  CHECK(bad(R"({"knobs":{"mode":"fast"}})").find("fast") != std::string::npos);
  CHECK(parse_profile("{not json").error().code() == Errc::parse);
  CHECK(bad(R"({"functions":{"f":{"cfg_hash":"1","indirect_calls":[[["xyz",1]]]}}})")
            .find("functions.f.indirect_calls") != std::string::npos);
  CHECK(bad(R"({"functions":{"f":{"cfg_hash":"1","memop_sizes":[[[8]]]}}})")
            .find("functions.f.memop_sizes") != std::string::npos);
  CHECK(bad(R"({"functions":{"f":{"cfg_hash":"1","memop_sizes":[[[8,-1]]]}}})").find("counts") !=
        std::string::npos);
}

TEST_CASE("choose_mode follows the profile", "[util][profile]") {
  CHECK(choose_mode(nullptr) == CompileMode::instrumented);
  ProfileDoc empty;
  CHECK(choose_mode(&empty) == CompileMode::instrumented);
  ProfileDoc d = sample();
  CHECK(choose_mode(&d) == CompileMode::optimized);
  d.knobs.mode = CompileMode::plain;
  CHECK(choose_mode(&d) == CompileMode::plain);
  CHECK(canonical_json(json{{"b", 1}, {"a", {1, 2}}}) == R"({"a":[1,2],"b":1})");
}

TEST_CASE("context-sensitive counts round trip - change the digest - need the CS flag",
          "[util][profile][cs]") {
  ProfileDoc d = sample();
  const std::string before = profile_digest(d);
  // No CS section: the document keeps the form (and digest) it had.
  CHECK_FALSE(to_json(d).contains("cs_functions"));
  d.cs_functions["run"] = FunctionProfile{.cfg_hash = kCsHashFlag | 0x1234, .counts = {5, 0, 7}};
  CHECK(is_cs_hash(d.cs_functions.at("run").cfg_hash));
  CHECK(profile_digest(d) != before);
  const json j = to_json(d);
  CHECK(j["cs_functions"]["run"]["cfg_hash"] == "1000000000001234");
  auto back = profile_from_json(j);
  REQUIRE(back);
  CHECK(*back == d);
  CHECK(profile_digest(*back) == profile_digest(d));
  // Bookkeeping inside the CS section stays out of the digest too.
  ProfileDoc named = d;
  named.cs_functions.at("run").source_name = "run.c:run";
  CHECK(profile_digest(named) == profile_digest(d));

  auto bad = parse_profile(R"({"cs_functions":{"run":{"cfg_hash":"1234","counts":[1]}}})");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message().find("cs_functions.run.cfg_hash") != std::string::npos);
  CHECK(bad.error().message().find("context-sensitive flag") != std::string::npos);
  CHECK_FALSE(parse_profile(R"({"cs_functions":[1]})"));
  CHECK(parse_compile_mode("cs_instrumented").value() == CompileMode::cs_instrumented);
  d.knobs.mode = CompileMode::cs_instrumented;
  CHECK(choose_mode(&d) == CompileMode::cs_instrumented);
}

TEST_CASE("an import's records outside the program round trip - enter the digest - make no counts",
          "[util][profile][import]") {
  ProfileDoc d = sample();
  const std::string before = profile_digest(d);
  // None: the document keeps the form (and digest) it had.
  CHECK_FALSE(to_json(d).contains("outside_functions"));
  d.outside_functions["main"] = FunctionProfile{
      .cfg_hash = 0x0bb577ac0282cf44, .counts = {0, 3, 3, 1}, .source_name = "main"};
  CHECK(profile_digest(d) != before);
  const json j = to_json(d);
  CHECK(j["outside_functions"]["main"]["cfg_hash"] == "0bb577ac0282cf44");
  auto back = profile_from_json(j);
  REQUIRE(back);
  CHECK(*back == d);
  CHECK(profile_digest(*back) == profile_digest(d));
  // Their counts shape the summary only: with no counts of its own a document
  // still compiles instrumented.
  ProfileDoc only;
  only.outside_functions = d.outside_functions;
  CHECK(choose_mode(&only) == CompileMode::instrumented);
  auto bad = parse_profile(R"({"outside_functions":{"main":{"counts":[1]}}})");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message().find("outside_functions.main.cfg_hash") != std::string::npos);
}

TEST_CASE("reprofile_of is bookkeeping - round trips - absent when 0", "[util][profile]") {
  ProfileDoc d = sample();
  const std::string before = profile_digest(d);
  CHECK_FALSE(to_json(d).contains("reprofile_of"));
  d.reprofile_of = 4;
  CHECK(profile_digest(d) == before); // never a recompile
  const json j = to_json(d);
  CHECK(j["reprofile_of"] == 4);
  auto back = profile_from_json(j);
  REQUIRE(back);
  CHECK(back->reprofile_of == 4);
  CHECK(*back == d);
  auto bad = parse_profile(R"({"reprofile_of": -1})");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message().find("reprofile_of") != std::string::npos);
  auto text = parse_profile(R"({"reprofile_of": "3"})");
  REQUIRE_FALSE(text);
}

TEST_CASE("the GPU part: launches and trials are bookkeeping, launch bounds enter the digest",
          "[util][profile]") {
  ProfileDoc d = sample();
  const std::string before = profile_digest(d);
  CHECK_FALSE(to_json(d).contains("gpu"));
  d.gpu.launches.push_back(GpuLaunchRecord{"sm_90",
                                           "saxpy",
                                           1 << 20,
                                           {{528, 1, 1}, {256, 1, 1}, 0.12},
                                           {{{64, 1, 1}, {64, 1, 1}, 0.5}}});
  d.gpu.trials.push_back(
      GpuBoundsTrial{{"sm_90", "saxpy", 128, 0}, TrialVerdict::rejected, 1.07, 12});
  CHECK(profile_digest(d) == before); // tuned launches and verdicts never recompile
  CHECK(reference_digest(d) == before);
  d.gpu.launch_bounds.push_back({"sm_90", "saxpy", 256, 0});
  const std::string bounded = profile_digest(d);
  CHECK(bounded != before);
  CHECK(reference_digest(d) == bounded);
  // Another architecture's bound is another document.
  ProfileDoc other = d;
  other.gpu.launch_bounds[0].arch = "sm_80";
  CHECK(profile_digest(other) != bounded);
  // The order bounds were added in does not change the digest.
  d.gpu.launch_bounds.push_back({"sm_80", "reduce_sum", 512, 2});
  ProfileDoc swapped = d;
  std::swap(swapped.gpu.launch_bounds[0], swapped.gpu.launch_bounds[1]);
  CHECK(profile_digest(swapped) == profile_digest(d));

  const json j = to_json(d);
  CHECK(j["gpu"]["launch_bounds"][0]["arch"] == "sm_80"); // sorted
  CHECK(j["gpu"]["launch_bounds"][0]["min_blocks_per_sm"] == 2);
  auto back = profile_from_json(j);
  REQUIRE(back);
  CHECK(back->gpu.launches == d.gpu.launches);
  CHECK(back->gpu.trials == d.gpu.trials);
  CHECK(profile_digest(*back) == profile_digest(d));
  CHECK(find_bounds(back->gpu, "sm_90", "saxpy")->max_threads == 256);
  CHECK(find_launch(back->gpu, "sm_90", "saxpy", 1 << 20)->chosen.block[0] == 256);
  CHECK(find_launch(back->gpu, "sm_90", "saxpy", 4096) == nullptr);
}

TEST_CASE("the GPU part rejects bad fields with their path", "[util][profile]") {
  auto expect_bad = [](const char* text, const char* field) {
    auto r = parse_profile(text);
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::invalid_argument);
    CHECK_THAT(r.error().message(), Catch::Contains(field));
  };
  expect_bad(R"({"gpu": []})", "'gpu'");
  expect_bad(R"({"gpu": {"launch_bounds": [{"arch": "sm_90", "kernel": "k", "max_threads": 0}]}})",
             "gpu.launch_bounds[0].max_threads");
  expect_bad(R"({"gpu": {"launch_bounds": [{"arch": "", "kernel": "k", "max_threads": 32}]}})",
             "gpu.launch_bounds[0].arch");
  expect_bad(R"({"gpu": {"launch_bounds": [{"arch": "sm_90", "kernel": "k", "max_threads": 32},
                                             {"arch": "sm_90", "kernel": "k", "max_threads": 64}]}})",
             "a second time");
  expect_bad(R"({"gpu": {"launches": [{"arch": "sm_90", "kernel": "k", "items": 5,
               "chosen": {"grid": [1, 1], "block": [1, 1, 1], "median_ms": 1}}]}})",
             "gpu.launches[0].chosen.grid");
  expect_bad(R"({"gpu": {"launches": [{"arch": "sm_90", "kernel": "k", "items": 5,
               "chosen": {"grid": [1, 1, 1], "block": [0, 1, 1], "median_ms": 1}}]}})",
             "gpu.launches[0].chosen.block");
  expect_bad(R"({"gpu": {"launches": [{"arch": "sm_90", "kernel": "k", "items": 0,
               "chosen": {"grid": [1, 1, 1], "block": [1, 1, 1], "median_ms": 1}}]}})",
             "gpu.launches[0].items");
  expect_bad(R"({"gpu": {"trials": [{"bounds": {"arch": "sm_90", "kernel": "k", "max_threads": 32},
               "verdict": "maybe", "ratio": 1}]}})",
             "gpu.trials[0].verdict");
  expect_bad(R"({"gpu": {"trials": [{"bounds": {"arch": "sm_90", "kernel": "k", "max_threads": 32},
               "verdict": "accepted", "ratio": -1}]}})",
             "gpu.trials[0].ratio");
}

TEST_CASE("argument values and the specialization knobs: round trip, digest, defaults absent",
          "[util][profile][spec]") {
  ProfileDoc d = sample();
  const std::string base_digest = profile_digest(d);
  const json base = to_json(d);
  // Older documents keep their form and digest: nothing written at the defaults.
  CHECK_FALSE(base["knobs"].contains("spec_min_share"));
  CHECK_FALSE(base["knobs"].contains("spec_max_clones"));
  CHECK_FALSE(base["functions"]["main"].contains("arg_values"));

  d.functions["main"].arg_values = {{1, {{4, 1500}, {5, 100}}, 0}, {2, {{3, 1592}}, 8}};
  const json j = to_json(d);
  CHECK(j["functions"]["main"]["arg_values"][1] ==
        json{{"arg", 2}, {"values", {{3, 1592}}}, {"other", 8}});
  auto back = profile_from_json(j);
  REQUIRE(back);
  CHECK(*back == d);
  CHECK(back->functions["main"].arg_values[1].total() == 1600);
  const std::string with_args = profile_digest(d);
  CHECK(with_args != base_digest); // compile-affecting

  d.knobs.spec_min_share = 95;
  d.knobs.spec_max_clones = 1;
  auto knobs = knobs_from_json(to_json(d.knobs));
  REQUIRE(knobs);
  CHECK(*knobs == d.knobs);
  CHECK(profile_digest(d) != with_args);
  // The defaults spelled out read, and digest, as absent.
  json spelled = to_json(sample());
  spelled["knobs"]["spec_min_share"] = Knobs::kDefaultSpecMinShare;
  spelled["knobs"]["spec_max_clones"] = Knobs::kDefaultSpecMaxClones;
  auto s = profile_from_json(spelled);
  REQUIRE(s);
  CHECK(profile_digest(*s) == base_digest);

  auto bad = [](const char* key, json v) {
    json b = to_json(sample());
    b["knobs"][key] = v;
    auto r = profile_from_json(b);
    REQUIRE_FALSE(r);
    return r.error().message();
  };
  CHECK_THAT(bad("spec_min_share", 30), Catch::Contains("knobs.spec_min_share"));
  CHECK_THAT(bad("spec_min_share", 101), Catch::Contains("knobs.spec_min_share"));
  CHECK_THAT(bad("spec_max_clones", 65), Catch::Contains("knobs.spec_max_clones"));
  auto bad_args = [](json v) {
    json b = to_json(sample());
    b["functions"]["main"]["arg_values"] = v;
    auto r = profile_from_json(b);
    REQUIRE_FALSE(r);
    return r.error().message();
  };
  CHECK_THAT(bad_args(json::object()), Catch::Contains("functions.main.arg_values"));
  CHECK_THAT(bad_args(json::array({{{"values", json::array()}}})), Catch::Contains("arg"));
  CHECK_THAT(bad_args(json::array({{{"arg", 1}, {"values", {{4, -1}}}}})),
             Catch::Contains("counts"));
  CHECK_THAT(bad_args(json::array({{{"arg", 1}, {"values", json::array()}},
                                   {{"arg", 1}, {"values", json::array()}}})),
             Catch::Contains("twice"));
}

TEST_CASE("the cold_code knob: round trip, digest, default absent, bad values refused",
          "[util][profile]") {
  ProfileDoc d = sample();
  const std::string base_digest = profile_digest(d);
  CHECK_FALSE(to_json(d)["knobs"].contains("cold_code")); // older documents keep their digest
  d.knobs.cold_code = ColdCode::optimize;
  const json j = to_json(d);
  CHECK(j["knobs"]["cold_code"] == "optimize");
  auto back = profile_from_json(j);
  REQUIRE(back);
  CHECK(back->knobs.cold_code == ColdCode::optimize);
  CHECK(profile_digest(d) != base_digest); // compile-affecting
  json spelled = to_json(sample());
  spelled["knobs"]["cold_code"] = "baseline";
  auto s = profile_from_json(spelled);
  REQUIRE(s);
  CHECK(profile_digest(*s) == base_digest);
  for (json v : {json("fast"), json(1), json(nullptr)}) {
    json b = to_json(sample());
    b["knobs"]["cold_code"] = v;
    auto r = profile_from_json(b);
    REQUIRE_FALSE(r);
    CHECK_THAT(r.error().message(), Catch::Contains("knobs.cold_code"));
  }
  CHECK(parse_cold_code("optimize").value() == ColdCode::optimize);
  CHECK_FALSE(parse_cold_code("O0"));
}
