// The context-sensitive PGO round in the stage sequence (cs_round.h): the
// policy's decisions alone, then the service's stages through fake workers.
#include "fdo/daemon/cs_round.h"
#include "fdo/daemon/guard.h"
#include "fdo/daemon/policy.h"
#include "service_harness.h"

#include <catch2/catch.hpp>

using namespace fdo;
using namespace fdo::daemon;
using namespace fdo::daemon::testing;
using nlohmann::json;

namespace {
StageFeedback counted(std::uint64_t hash, std::vector<std::uint64_t> counts) {
  StageFeedback s;
  s.counts["loop"] = FunctionCounts{hash, std::move(counts)};
  s.exec_ns = 1000;
  return s;
}

PolicyDecision decide_with(const PolicyConfig& cfg, const FeedbackAccumulator& fb,
                           const ProfileDoc* current, std::int64_t version) {
  PolicyInput in;
  in.current = current;
  in.current_version = version;
  in.feedback = &fb;
  in.now = std::chrono::system_clock::now();
  return decide(cfg, in);
}
} // namespace

TEST_CASE("cs round: a first profile asks for it only when configured", "[daemon][policy][cs]") {
  PolicyConfig cfg;
  cfg.min_stages = 1;
  cfg.min_counts = 10;
  FeedbackAccumulator fb;
  fb.add(counted(0x1234, {900, 100}));

  CHECK(cfg.cs_pgo_stages == 2); // on by default
  cfg.cs_pgo_stages = 0;
  PolicyDecision off = decide_with(cfg, fb, nullptr, 0);
  REQUIRE(off.action == PolicyAction::rewrite);
  CHECK_FALSE(off.profile.knobs.mode.has_value());

  cfg.cs_pgo_stages = 2;
  PolicyDecision on = decide_with(cfg, fb, nullptr, 0);
  REQUIRE(on.action == PolicyAction::rewrite);
  CHECK(on.profile.knobs.mode == CompileMode::cs_instrumented);
  CHECK(choose_mode(&on.profile) == CompileMode::cs_instrumented);
  CHECK_THAT(on.reason, Catch::Contains("next 2 stages gather context-sensitive counts"));

  // An operator's mode wins: no round.
  ProfileDoc pinned_mode;
  pinned_mode.knobs.mode = CompileMode::optimized;
  PolicyDecision kept = decide_with(cfg, fb, &pinned_mode, 1);
  REQUIRE(kept.action == PolicyAction::rewrite);
  CHECK(kept.profile.knobs.mode == CompileMode::optimized);
}

TEST_CASE("cs round: not run again for a program the guard serves without CS counts",
          "[daemon][policy][cs]") {
  PolicyConfig cfg;
  cfg.min_stages = 1;
  cfg.min_counts = 10;
  cfg.cs_pgo_stages = 2;
  FeedbackAccumulator fb;
  fb.add(counted(0x1234, {100, 900})); // the workload changed: a re-profile

  ProfileDoc v3; // counts + CS counts, the guard's incumbent: profiled O2 -cs
  v3.functions["loop"] = FunctionProfile{.cfg_hash = 0x1234, .counts = {900, 100}};
  v3.cs_functions["loop"] = FunctionProfile{.cfg_hash = 0x1234 | kCsHashFlag, .counts = {9, 1, 3}};
  v3.guard.incumbent_base = VariantBase::profiled;
  v3.guard.incumbent_version = 3;
  v3.guard.incumbent_knobs = json{{"opt_level", 2}, {"cs_counts", false}};
  REQUIRE(incumbent_drops_cs(v3.guard));
  PolicyDecision d = decide_with(cfg, fb, &v3, 3);
  REQUIRE(d.action == PolicyAction::rewrite);
  CHECK_FALSE(d.profile.knobs.mode.has_value()); // straight to optimized
  CHECK(d.profile.cs_functions.empty());         // the old CS counts are not carried over
  CHECK(d.profile.guard == v3.guard);
  CHECK_THAT(d.reason, Catch::Contains("no context-sensitive round: the guard serves this "
                                       "program without context-sensitive counts"));

  // An incumbent that keeps them (or none yet): the round runs as configured.
  v3.guard.incumbent_knobs = json{{"opt_level", 2}};
  PolicyDecision again = decide_with(cfg, fb, &v3, 3);
  REQUIRE(again.action == PolicyAction::rewrite);
  CHECK(again.profile.knobs.mode == CompileMode::cs_instrumented);
}

TEST_CASE("cs round: ends after its stages with the CS counts in cs_functions",
          "[daemon][policy][cs]") {
  PolicyConfig cfg;
  cfg.min_stages = 5; // the round counts its own stages, not min_stages
  cfg.cs_pgo_stages = 2;
  ProfileDoc v1;
  v1.functions["loop"] =
      FunctionProfile{.cfg_hash = 0x1234, .counts = {900, 100}, .source_name = "loop.c:loop"};
  v1.knobs.mode = CompileMode::cs_instrumented;

  FeedbackAccumulator fb;
  fb.add(counted(0x1234 | kCsHashFlag, {10, 0, 30}));
  PolicyDecision wait = decide_with(cfg, fb, &v1, 1);
  CHECK(wait.action == PolicyAction::keep);
  CHECK(wait.reason == "waiting for context-sensitive stages (1 of 2)");

  fb.add(counted(0x1234 | kCsHashFlag, {10, 0, 30}));
  PolicyDecision done = decide_with(cfg, fb, &v1, 1);
  REQUIRE(done.action == PolicyAction::rewrite);
  CHECK_FALSE(done.profile.knobs.mode.has_value());
  CHECK(choose_mode(&done.profile) == CompileMode::optimized);
  CHECK(done.profile.functions == v1.functions); // the first round's counts stay
  REQUIRE(done.profile.cs_functions.count("loop") == 1);
  const FunctionProfile& cs = done.profile.cs_functions.at("loop");
  CHECK(cs.cfg_hash == (0x1234 | kCsHashFlag));
  CHECK(cs.counts == std::vector<std::uint64_t>{20, 0, 60});
  CHECK(cs.source_name == "loop.c:loop");
  CHECK_THAT(done.reason, Catch::Contains("context-sensitive counts from 2 stages (80 counts"));

  SECTION("counts without the CS flag (another build served) are not CS counts") {
    FeedbackAccumulator plain;
    plain.add(counted(0x1234, {1, 2}));
    plain.add(counted(0x1234, {1, 2}));
    PolicyDecision d = decide_with(cfg, plain, &v1, 1);
    REQUIRE(d.action == PolicyAction::rewrite);
    CHECK(d.profile.cs_functions.empty());
    CHECK_FALSE(d.profile.knobs.mode.has_value());
    CHECK_THAT(d.reason, Catch::Contains("counted nothing"));
  }
  SECTION("switched off mid-round, the round ends at its next stage") {
    cfg.cs_pgo_stages = 0;
    FeedbackAccumulator one;
    one.add(counted(0x1234 | kCsHashFlag, {1, 0, 1}));
    CHECK(decide_with(cfg, one, &v1, 1).action == PolicyAction::rewrite);
  }
}

TEST_CASE("service: instrumented -> cs_instrumented v1 -> optimized v2 with CS counts",
          "[service][cs]") {
  Config c = Harness::base_config();
  // The daemon's default: the round is on, two stages.
  c.policy.cs_pgo_stages = Config{}.policy.cs_pgo_stages;
  REQUIRE(c.policy.cs_pgo_stages == 2);
  Harness h(c);
  auto reg = h.call("program.register", {{"ir", "program cs"}});
  REQUIRE(reg);
  const std::string id = (*reg)["program"], pk = (*reg)["profile_key"];
  auto stage = [&] {
    auto r = h.call("execute", {{"program", id}, {"entry", "main"}});
    REQUIRE(r);
    return *r;
  };

  // First round: min_stages (2) instrumented stages, then v1.
  json s0 = stage();
  CHECK(s0["stage"]["mode"] == "instrumented");
  json s1 = stage();
  CHECK(s1["stage"]["mode"] == "instrumented");
  REQUIRE(s1["stage"]["profile_rewritten"].is_object());
  CHECK(s1["stage"]["profile_rewritten"]["to"] == 1);
  CHECK_THAT(s1["stage"]["profile_rewritten"]["reason"].get<std::string>(),
             Catch::Contains("context-sensitive"));

  // The CS round: v1's optimized build with CS instrumentation, cs_pgo_stages stages.
  json s2 = stage();
  CHECK(s2["stage"]["mode"] == "cs_instrumented");
  CHECK(s2["stage"]["profile_version"] == 1);
  CHECK(s2["stage"]["recompiled"] == true);
  CHECK(s2["value"] == 42);
  json s3 = stage();
  CHECK(s3["stage"]["mode"] == "cs_instrumented");
  REQUIRE(s3["stage"]["profile_rewritten"].is_object());
  CHECK(s3["stage"]["profile_rewritten"]["to"] == 2);

  // v2: optimized, compiled with the CS counts (the fake's object says so).
  json s4 = stage();
  CHECK(s4["stage"]["mode"] == "optimized");
  CHECK(s4["stage"]["profile_version"] == 2);
  CHECK(s4["stage"]["recompiled"] == true);
  CHECK(s4["value"] == 43);
  json s5 = stage();
  CHECK(s5["stage"]["mode"] == "optimized");
  CHECK(s5["stage"]["profile_rewritten"].is_null());

  auto prof = h.call("profile.get", {{"profile_key", pk}});
  REQUIRE(prof);
  const json& doc = (*prof)["profile"];
  CHECK(doc["functions"]["main"]["counts"] == json{1800, 200});
  CHECK(doc["cs_functions"]["main"]["counts"] == json{60, 0, 140});
  CHECK(doc["cs_functions"]["main"]["cfg_hash"] == "100000000000feed");
  CHECK(doc["knobs"]["mode"].is_null());
}
