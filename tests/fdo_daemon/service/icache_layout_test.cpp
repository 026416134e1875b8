// The i-cache rule alone (icache_layout.h): which functions a set of sampled
// i-cache misses lays out hot and cold, when it abstains, and that a layout in
// place causes no churn.
#include "fdo/daemon/icache_layout.h"
#include "fdo/daemon/policy.h"

#include <catch2/catch.hpp>

using namespace fdo;
using namespace fdo::daemon;

namespace {
ProfileDoc three_functions() {
  ProfileDoc doc;
  doc.functions["fdo:fdo.local.1"] = FunctionProfile{.cfg_hash = 1, .counts = {900, 10}};
  doc.functions["fdo:fdo.local.1"].source_name = "interp.c:step";
  doc.functions["main"] = FunctionProfile{.cfg_hash = 2, .counts = {1, 1}};
  doc.functions["usage"] = FunctionProfile{.cfg_hash = 3, .counts = {0, 0}};
  return doc;
}
} // namespace

TEST_CASE("i-cache events: the generic name and PMU names", "[service][layout]") {
  CHECK(is_icache_miss_event("L1-icache-load-misses"));
  CHECK(is_icache_miss_event("ICACHE_64B.IFTAG_MISS"));
  CHECK(is_icache_miss_event("l1i.misses"));
  CHECK_FALSE(is_icache_miss_event("branch-misses"));
  CHECK_FALSE(is_icache_miss_event("cpu-clock"));
  std::map<std::string, std::uint64_t> into{{"main", 1}};
  add_icache_samples(into, {{"L1-icache-load-misses", {{"main", 4}, {"f", 2}}},
                            {"branch-misses", {{"main", 100}}}});
  CHECK(into == std::map<std::string, std::uint64_t>{{"main", 5}, {"f", 2}});
}

TEST_CASE("i-cache layout: concentrated misses lay out hot, never-run functions cold",
          "[service][layout]") {
  PolicyConfig cfg;
  cfg.cs_pgo_stages = 0; // the first round alone (cs_round_test.cpp has the CS round)
  ProfileDoc next = three_functions();
  auto reason =
      decide_icache_layout(cfg, {{"fdo:fdo.local.1", 30}, {"main", 2}}, std::nullopt, next);
  REQUIRE(reason);
  CHECK(next.functions.at("fdo:fdo.local.1").layout == FunctionLayout::hot);
  CHECK(next.functions.at("main").layout == FunctionLayout::normal);
  CHECK(next.functions.at("usage").layout == FunctionLayout::cold);
  CHECK_THAT(*reason, Catch::Contains("laid out hot interp.c:step (30 samples, 94%)"));
  CHECK_THAT(*reason, Catch::Contains("cold, for size: usage"));
  CHECK(next.knobs.size_level == 0);

  // In place already: nothing new, no rewrite.
  CHECK_FALSE(
      decide_icache_layout(cfg, {{"fdo:fdo.local.1", 30}, {"main", 2}}, std::nullopt, next));

  // Too few samples, or too little pressure counted: no decision.
  ProfileDoc fresh = three_functions();
  CHECK_FALSE(decide_icache_layout(cfg, {{"fdo:fdo.local.1", 19}}, std::nullopt, fresh));
  CHECK_FALSE(decide_icache_layout(cfg, {{"fdo:fdo.local.1", 30}}, 5.0, fresh));
  CHECK(fresh == three_functions());
  // Spread evenly over many functions: none holds the share.
  cfg.icache_hot_share = 0.6;
  CHECK_FALSE(decide_icache_layout(cfg, {{"fdo:fdo.local.1", 15}, {"main", 15}}, 30.0, fresh));
  // A function with samples is never laid out cold, even with zero counts.
  cfg.icache_hot_share = 0.2;
  ProfileDoc sampled = three_functions();
  REQUIRE(decide_icache_layout(cfg, {{"fdo:fdo.local.1", 30}, {"usage", 1}}, 30.0, sampled));
  CHECK(sampled.functions.at("usage").layout == FunctionLayout::normal);
}

TEST_CASE("i-cache layout through the policy: a rewrite with the reason, layout kept by counts",
          "[service][layout]") {
  PolicyConfig cfg;
  cfg.cs_pgo_stages = 0; // the first round alone (cs_round_test.cpp has the CS round)
  cfg.min_stages = 1;
  ProfileDoc current = three_functions();
  FeedbackAccumulator fb;
  fb.add(StageFeedback{{}, 1000, {}, std::nullopt});
  std::map<std::string, std::uint64_t> icache{{"fdo:fdo.local.1", 40}};
  PolicyInput in;
  in.current = &current;
  in.current_version = 1;
  in.feedback = &fb;
  in.icache_samples = &icache;
  in.now = std::chrono::system_clock::now();
  PolicyDecision d = decide(cfg, in);
  REQUIRE(d.action == PolicyAction::rewrite);
  CHECK_THAT(d.reason, Catch::StartsWith("i-cache misses concentrated (40 miss samples)"));
  CHECK(profile_digest(d.profile) != profile_digest(current));

  // New counts (a re-profile) keep the hot placement; a cold function that
  // now runs loses its cold one.
  FeedbackAccumulator counts;
  StageFeedback s;
  s.counts["fdo:fdo.local.1"] = FunctionCounts{1, {5000, 100}};
  s.counts["main"] = FunctionCounts{2, {1, 1}};
  s.counts["usage"] = FunctionCounts{3, {7, 0}};
  counts.add(s);
  cfg.drift_threshold = 0.0;
  in.current = &d.profile;
  in.feedback = &counts;
  in.icache_samples = nullptr;
  PolicyDecision again = decide(cfg, in);
  REQUIRE(again.action == PolicyAction::rewrite);
  CHECK(again.profile.functions.at("fdo:fdo.local.1").layout == FunctionLayout::hot);
  CHECK(again.profile.functions.at("usage").layout == FunctionLayout::normal);
}
