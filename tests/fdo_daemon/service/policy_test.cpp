#include "fdo/daemon/policy.h"

#include <catch2/catch.hpp>

using namespace fdo;
using namespace fdo::daemon;

namespace {
StageFeedback stage(std::uint64_t taken, std::uint64_t not_taken) {
  StageFeedback s;
  s.counts["loop"] = FunctionCounts{0x1234, {taken, not_taken}};
  s.exec_ns = 1000;
  return s;
}

PolicyInput input_for(const FeedbackAccumulator& fb, const ProfileDoc* current = nullptr,
                      std::int64_t version = 0) {
  PolicyInput in;
  in.current = current;
  in.current_version = version;
  in.feedback = &fb;
  in.now = std::chrono::system_clock::now();
  return in;
}
} // namespace

TEST_CASE("accumulator sums counts - counters and stages", "[daemon][policy]") {
  FeedbackAccumulator fb;
  fb.add(stage(900, 100));
  StageFeedback s = stage(90, 10);
  s.counters["branch-misses"] = 5;
  fb.add(s);
  CHECK(fb.stages() == 2);
  CHECK(fb.exec_ns_sum() == 2000);
  CHECK(fb.counts().at("loop").counts == std::vector<std::uint64_t>{990, 110});
  CHECK(fb.counters().at("branch-misses") == 5);
  CHECK(fb.total_counts() == 1100);

  // A reshaped function (new CFG hash) replaces rather than mixes counters.
  StageFeedback reshaped;
  reshaped.counts["loop"] = FunctionCounts{0x9999, {1, 2, 3}};
  fb.add(reshaped);
  CHECK(fb.counts().at("loop").counts == std::vector<std::uint64_t>{1, 2, 3});

  FeedbackAccumulator other;
  other.add(stage(1, 1));
  other.add(stage(1, 1));
  FeedbackAccumulator merged;
  merged.merge(other);
  CHECK(merged.stages() == 2);
  CHECK(merged.counts().at("loop").counts == std::vector<std::uint64_t>{2, 2});
}

TEST_CASE("first profile is written once enough stages and counts are seen", "[daemon][policy]") {
  PolicyConfig cfg;
  cfg.cs_pgo_stages = 0; // the first round alone (cs_round_test.cpp has the CS round)
  cfg.min_stages = 3;
  cfg.min_counts = 1000;
  FeedbackAccumulator fb;
  fb.add(stage(900, 100));
  fb.add(stage(900, 100));
  auto d = decide(cfg, input_for(fb));
  CHECK(d.action == PolicyAction::keep);
  CHECK(d.reason.find("waiting for stages (2 of 3)") != std::string::npos);
  fb.add(stage(900, 100));
  d = decide(cfg, input_for(fb));
  REQUIRE(d.action == PolicyAction::rewrite);
  CHECK(d.drift == Approx(1.0));
  REQUIRE(d.profile.functions.count("loop") == 1);
  CHECK(d.profile.functions["loop"].cfg_hash == 0x1234);
  CHECK(d.profile.functions["loop"].counts == std::vector<std::uint64_t>{2700, 300});
  CHECK(choose_mode(&d.profile) == CompileMode::optimized);
}

TEST_CASE("argument values add up across stages - bounded - and reach the rewrite",
          "[daemon][policy][spec]") {
  PolicyConfig cfg;
  cfg.cs_pgo_stages = 0;
  cfg.min_stages = 2;
  cfg.min_counts = 1;
  FeedbackAccumulator fb;
  StageFeedback a = stage(900, 100);
  a.counts["loop"].arg_values = {{1, {{4, 90}, {5, 10}}, 0}};
  StageFeedback b = stage(900, 100);
  // Eight new values for arg 1 (one of them 4 again), and arg 0 seen for the first time.
  b.counts["loop"].arg_values = {
      {0, {{7, 3}}, 0},
      {1, {{4, 80}, {10, 7}, {11, 6}, {12, 5}, {13, 4}, {14, 3}, {15, 2}, {16, 1}}, 2}};
  fb.add(a);
  fb.add(b);
  const std::vector<ArgValues>& args = fb.counts().at("loop").arg_values;
  REQUIRE(args.size() == 2);
  CHECK(args[0] == ArgValues{0, {{7, 3}}, 0});
  // Nine distinct values: the rarest (16) moves into other with the 2 already there.
  CHECK(args[1] ==
        ArgValues{1, {{4, 170}, {5, 10}, {10, 7}, {11, 6}, {12, 5}, {13, 4}, {14, 3}, {15, 2}}, 3});
  CHECK(args[1].total() == 210);
  auto d = decide(cfg, input_for(fb));
  REQUIRE(d.action == PolicyAction::rewrite);
  CHECK(d.profile.functions["loop"].arg_values == args);
}

TEST_CASE("too few counts waits", "[daemon][policy]") {
  PolicyConfig cfg;
  cfg.cs_pgo_stages = 0; // the first round alone (cs_round_test.cpp has the CS round)
  cfg.min_stages = 1;
  cfg.min_counts = 1000;
  FeedbackAccumulator fb;
  fb.add(stage(10, 10));
  auto d = decide(cfg, input_for(fb));
  CHECK(d.action == PolicyAction::keep);
  CHECK(d.reason.find("waiting for counts") != std::string::npos);
}

TEST_CASE("drift below threshold keeps the profile and above it rewrites", "[daemon][policy]") {
  PolicyConfig cfg;
  cfg.cs_pgo_stages = 0; // the first round alone (cs_round_test.cpp has the CS round)
  cfg.min_stages = 1;
  cfg.min_counts = 10;
  cfg.drift_threshold = 0.10;
  ProfileDoc current;
  current.functions["loop"] = FunctionProfile{.cfg_hash = 0x1234, .counts = {900, 100}};
  FeedbackAccumulator same;
  same.add(stage(1800, 205)); // ~ the same distribution
  auto d = decide(cfg, input_for(same, &current, 1));
  CHECK(d.action == PolicyAction::keep);
  CHECK(d.drift < 0.01);
  FeedbackAccumulator shifted;
  shifted.add(stage(500, 500)); // 90/10 -> 50/50: TVD 0.4
  d = decide(cfg, input_for(shifted, &current, 1));
  REQUIRE(d.action == PolicyAction::rewrite);
  CHECK(d.drift == Approx(0.4));
  CHECK(d.profile.functions["loop"].counts == std::vector<std::uint64_t>{500, 500});
}

// The rate cap is the lifecycle's (program_lifecycle_test.cpp, "the rate cap
// leaves room for a round..."): the policy proposes, the lifecycle approves.
TEST_CASE("pinned profiles stop rewrites and rewrites say what they are for", "[daemon][policy]") {
  PolicyConfig cfg;
  cfg.cs_pgo_stages = 0; // the first round alone (cs_round_test.cpp has the CS round)
  cfg.min_stages = 1;
  cfg.min_counts = 1;
  FeedbackAccumulator fb;
  fb.add(stage(900, 100));
  PolicyInput in = input_for(fb);
  in.pinned = true;
  auto d = decide(cfg, in);
  CHECK(d.action == PolicyAction::keep);
  CHECK(d.reason == "profile is pinned");

  in = input_for(fb);
  d = decide(cfg, in);
  CHECK(d.action == PolicyAction::rewrite);
  CHECK(d.kind == RewriteKind::counts);
}

TEST_CASE("counts_distance sees which functions are hot as well as how their branches go",
          "[daemon][policy]") {
  std::map<std::string, FunctionProfile> old{{"a", {1, {90, 10}, {}, ""}},
                                             {"b", {2, {5, 5}, {}, ""}}};
  // The same shape: 0.
  std::map<std::string, FunctionCounts> same{{"a", {1, {180, 20}}}, {"b", {2, {10, 10}}}};
  CHECK(counts_distance(old, same) == Approx(0.0));
  // Each function's branches as before, but b is now the hot one: count_drift
  // alone sees nothing, the functions' shares do.
  std::map<std::string, FunctionCounts> moved{{"a", {1, {9, 1}}}, {"b", {2, {450, 450}}}};
  CHECK(count_drift(old, moved) == Approx(0.0));
  CHECK(counts_distance(old, moved) > 0.8);
  // A function that is gone, or new, counts in full.
  std::map<std::string, FunctionCounts> gone{{"a", {1, {90, 10}}}};
  CHECK(counts_distance(old, gone) == Approx(10.0 / 110.0));
  CHECK(counts_distance({}, gone) == Approx(1.0));
  CHECK(counts_distance({}, {}) == Approx(0.0));
}

TEST_CASE("count_drift weighs functions by their share", "[daemon][policy]") {
  std::map<std::string, FunctionProfile> old{{"a", {1, {50, 50}, {}, ""}},
                                             {"b", {2, {10, 0}, {}, ""}}};
  std::map<std::string, FunctionCounts> fresh{{"a", {1, {50, 50}}}, {"b", {2, {0, 100}}}};
  // a unchanged (weight 0.5, tvd 0), b flipped (weight 0.5, tvd 1).
  CHECK(count_drift(old, fresh) == Approx(0.5));
  fresh["b"].cfg_hash = 3; // reshaped: counts as new
  CHECK(count_drift(old, fresh) == Approx(0.5));
  CHECK(count_drift(old, {}) == 0.0);
}

TEST_CASE("hardware findings under an optimized build", "[daemon][policy]") {
  PolicyConfig cfg;
  cfg.cs_pgo_stages = 0; // the first round alone (cs_round_test.cpp has the CS round)
  cfg.min_stages = 1;
  ProfileDoc current;
  current.functions["f"] = FunctionProfile{.cfg_hash = 7, .counts = {500, 500}};
  std::map<std::string, std::vector<BranchStat>> stats{
      {"f", {BranchStat{0, 500, 500}, BranchStat{1, 990, 10}}}};

  FeedbackAccumulator quiet;
  StageFeedback s;
  s.counters = {{"branch-misses", 10}, {"branch-instructions", 1000}};
  quiet.add(s);
  PolicyInput in = input_for(quiet, &current, 1);
  in.branch_stats = &stats;
  CHECK(decide(cfg, in).action == PolicyAction::keep);

  FeedbackAccumulator noisy;
  s.counters = {{"branch-misses", 300},
                {"branch-instructions", 1000},
                {"L1-icache-load-misses", 50},
                {"instructions", 1000}};
  noisy.add(s);
  in.feedback = &noisy;
  auto d = decide(cfg, in);
  REQUIRE(d.action == PolicyAction::rewrite);
  CHECK(d.profile.functions["f"].unpredictable == std::vector<std::uint32_t>{0});
  // A high counted i-cache miss rate is recorded, but no longer turns the
  // whole module to -Os: layout follows the sampled misses (icache_layout.h).
  CHECK(d.profile.knobs.size_level == 0);
  CHECK(d.profile.hardware.at("icache_mpki") == Approx(50.0));
  CHECK(profile_digest(d.profile) != profile_digest(current));

  // Without a PMU nothing is counted, and nothing is rewritten.
  FeedbackAccumulator software_only;
  software_only.add(StageFeedback{{}, 5000, {}, std::nullopt});
  in.feedback = &software_only;
  d = decide(cfg, in);
  CHECK(d.action == PolicyAction::keep);
  CHECK(d.reason.find("no new information") != std::string::npos);
}
