// The program lifecycle alone (lifecycle.h): its transitions and their
// causes, what stages count for, the rate cap, stale stages, compile
// failures, restarts. program_lifecycle_model_test.cpp drives it through
// random event sequences.
#include "lifecycle_test_support.h"

#include <catch2/catch.hpp>

using namespace fdo;
using namespace fdo::daemon;
using namespace fdo::daemon::testing;

TEST_CASE("lifecycle: a new program goes profiling - cs - optimized - trial - steady",
          "[service][lifecycle]") {
  ProgramLifecycle lc;
  const LifecycleConfig c = config();
  StageDirective d = lc.begin(none(), 0, c, kT0);
  CHECK(lc.phase() == Phase::profiling);
  CHECK_FALSE(d.guard);
  CHECK(d.sync);
  StageUse u = lc.ran(ran_as_planned(0, "none", CompileMode::instrumented), kT0);
  CHECK(u.counts);
  CHECK(u.current);
  CHECK(u.samples);
  REQUIRE(lc.approve(RewriteKind::counts, c, kT0));
  CHECK_FALSE(lc.approve(RewriteKind::cs_counts, c, kT0));
  CHECK_FALSE(lc.approve(RewriteKind::drift, c, kT0));
  lc.rewritten(RewriteKind::counts, facts(1, "d1", CompileMode::cs_instrumented, true), 2, "counts",
               c, kT0);
  CHECK(lc.phase() == Phase::cs_profiling);

  d = lc.begin(facts(1, "d1", CompileMode::cs_instrumented, true), 3, c, kT0);
  CHECK_FALSE(d.guard);
  // An instrumented (first-round) build's counts are not the round's.
  CHECK_FALSE(lc.ran(ran_as_planned(3, "d1", CompileMode::instrumented), kT0).counts);
  CHECK(lc.ran(ran_as_planned(3, "d1", CompileMode::cs_instrumented), kT0).counts);
  REQUIRE(lc.approve(RewriteKind::cs_counts, c, kT0));
  lc.rewritten(RewriteKind::cs_counts, facts(2, "d2", CompileMode::optimized), 4, "cs", c, kT0);
  CHECK(lc.phase() == Phase::optimized);

  d = lc.begin(facts(2, "d2", CompileMode::optimized), 5, c, kT0);
  CHECK(d.guard);
  lc.planned(GuardPlanKind::waiting, 5, "v2 profiled O2", kT0);
  CHECK(lc.phase() == Phase::optimized);
  CHECK(lc.watches_drift());
  lc.planned(GuardPlanKind::trial, 25, "v2 profiled O2 against plain O2", kT0);
  CHECK(lc.phase() == Phase::trial);
  CHECK_FALSE(lc.watches_drift());
  // Trial stages never feed samples, whichever arm they ran.
  CHECK_FALSE(lc.ran(ran_as_planned(25, "plain", CompileMode::plain, true), kT0).samples);
  CHECK_FALSE(lc.approve(RewriteKind::drift, c, kT0));
  CHECK_FALSE(lc.approve(RewriteKind::hardware, c, kT0));
  lc.trial_ended(TrialEnd::accepted, 3, 31, "accepted", kT0);
  CHECK(lc.phase() == Phase::steady);
  // A verdict is bookkeeping: the same digest at a new version is no change.
  lc.begin(facts(3, "d2", CompileMode::optimized), 32, c, kT0);
  CHECK(lc.phase() == Phase::steady);
  lc.planned(GuardPlanKind::serving, 32, "v2 profiled O2", kT0);
  CHECK(lc.phase() == Phase::steady);
  CHECK(causes(lc) == std::vector<Cause>{Cause::new_program, Cause::counts_ready,
                                         Cause::cs_counts_ready, Cause::trial_started,
                                         Cause::trial_accepted});
  CHECK(lc.history().back().version == 3);
  CHECK(lc.history().back().stage == 31);
}

TEST_CASE(
    "lifecycle: drift re-profiles and a re-profile ends as a new profile or the old one again",
    "[service][lifecycle]") {
  ProgramLifecycle lc;
  LifecycleConfig c = config();
  c.guard = false;
  lc.begin(facts(2, "d2", CompileMode::optimized), 10, c, kT0);
  CHECK(lc.phase() == Phase::steady); // no guard: nothing to judge
  CHECK(causes(lc) == std::vector<Cause>{Cause::restored});
  REQUIRE(lc.approve(RewriteKind::drift, c, kT0));
  ProfileFacts re = facts(3, "d3", CompileMode::instrumented);
  re.reprofile_of = 2;
  lc.rewritten(RewriteKind::drift, re, 11, "time-share drift", c, kT0);
  CHECK(lc.phase() == Phase::reprofiling);
  CHECK_FALSE(lc.approve(RewriteKind::drift, c, kT0));
  REQUIRE(lc.approve(RewriteKind::reprofile_unchanged, c, kT0));

  SECTION("the same counts: the earlier profile serves again") {
    lc.rewritten(RewriteKind::reprofile_unchanged, facts(4, "d2", CompileMode::optimized), 14,
                 "same", c, kT0);
    CHECK(lc.phase() == Phase::steady);
    CHECK(lc.history().back().cause == Cause::reprofile_unchanged);
  }
  SECTION("new counts: a new round") {
    lc.rewritten(RewriteKind::counts, facts(4, "d4", CompileMode::cs_instrumented, true), 14, "new",
                 c, kT0);
    CHECK(lc.phase() == Phase::cs_profiling);
  }
  SECTION("a restart in the middle finds the re-profile again") {
    ProgramLifecycle restarted;
    restarted.begin(re, 12, c, kT0);
    CHECK(restarted.phase() == Phase::reprofiling);
    CHECK(restarted.history().back().cause == Cause::restored);
  }
}

TEST_CASE("lifecycle: a pinned profile is never rewritten", "[service][lifecycle]") {
  ProgramLifecycle lc;
  const LifecycleConfig c = config();
  lc.begin(facts(2, "d2", CompileMode::optimized), 0, c, kT0);
  ProfileFacts pinned = facts(2, "d2", CompileMode::optimized);
  pinned.pinned = true;
  StageDirective d = lc.begin(pinned, 1, c, kT0);
  CHECK(lc.phase() == Phase::pinned);
  CHECK(lc.history().back().cause == Cause::pinned);
  CHECK_FALSE(d.guard);
  for (RewriteKind k : {RewriteKind::counts, RewriteKind::cs_counts, RewriteKind::drift,
                        RewriteKind::hardware, RewriteKind::reprofile_unchanged}) {
    Approval a = lc.approve(k, c, kT0);
    CHECK_FALSE(a);
    CHECK_THAT(a.why_not, Catch::Contains("pinned"));
  }
  // Pinned while counting: still never rewritten, and it stays served as is.
  ProgramLifecycle counting;
  ProfileFacts instr = facts(1, "d1", CompileMode::instrumented);
  instr.pinned = true;
  counting.begin(instr, 0, c, kT0);
  CHECK(counting.phase() == Phase::pinned);
  CHECK_FALSE(counting.approve(RewriteKind::counts, c, kT0));
  lc.begin(facts(2, "d2", CompileMode::optimized), 2, c, kT0);
  CHECK(lc.phase() == Phase::optimized);
  CHECK(lc.history().back().cause == Cause::unpinned);
}

TEST_CASE("lifecycle: the rate cap leaves room for a round and never stops one under way",
          "[service][lifecycle]") {
  ProgramLifecycle lc;
  LifecycleConfig c = config();
  c.guard = false;
  c.max_rewrites_per_hour = 5;
  lc.begin(none(), 0, c, kT0);
  auto at = [](int minutes) { return kT0 + std::chrono::minutes(minutes); };
  lc.rewritten(RewriteKind::counts, facts(1, "d1", CompileMode::cs_instrumented, true), 1, "", c,
               at(0));
  lc.rewritten(RewriteKind::cs_counts, facts(2, "d2", CompileMode::optimized), 2, "", c, at(1));
  CHECK(lc.rewrites_within_hour(at(2)) == 2);
  // 2 written + 3 for a re-profile's round = 5: room.
  REQUIRE(lc.approve(RewriteKind::drift, c, at(2)));
  ProfileFacts re = facts(3, "d3", CompileMode::instrumented);
  re.reprofile_of = 2;
  lc.rewritten(RewriteKind::drift, re, 3, "", c, at(2));
  // The round completes past the cap's count of discretionary rewrites.
  REQUIRE(lc.approve(RewriteKind::counts, c, at(3)));
  lc.rewritten(RewriteKind::counts, facts(4, "d4", CompileMode::cs_instrumented, true), 4, "", c,
               at(3));
  REQUIRE(lc.approve(RewriteKind::cs_counts, c, at(4)));
  lc.rewritten(RewriteKind::cs_counts, facts(5, "d5", CompileMode::optimized), 5, "", c, at(4));
  CHECK(lc.rewrites_within_hour(at(5)) == 5);
  Approval a = lc.approve(RewriteKind::drift, c, at(5));
  CHECK_FALSE(a);
  CHECK_THAT(a.why_not, Catch::Contains("rate cap"));
  CHECK_FALSE(lc.approve(RewriteKind::hardware, c, at(5)));
  // Without the context-sensitive round a re-profile's round is 2 rewrites.
  c.cs_round = false;
  c.max_rewrites_per_hour = 7;
  CHECK(lc.approve(RewriteKind::drift, c, at(5)));
  c.max_rewrites_per_hour = 6;
  CHECK_FALSE(lc.approve(RewriteKind::drift, c, at(5)));
  CHECK(lc.approve(RewriteKind::hardware, c, at(5)));
  // An hour on, the first rewrites age out.
  c.max_rewrites_per_hour = 5;
  c.cs_round = true;
  CHECK(lc.rewrites_within_hour(at(61)) == 3);
  CHECK_FALSE(lc.approve(RewriteKind::drift, c, at(61)));
  CHECK(lc.rewrites_within_hour(at(63)) == 1);
  CHECK(lc.approve(RewriteKind::drift, c, at(63)));
}

TEST_CASE("lifecycle: a stale stage is counted for what it ran and never waits forever",
          "[service][lifecycle]") {
  ProgramLifecycle lc;
  LifecycleConfig c = config();
  c.sync_tier_up = false;
  lc.begin(facts(3, "d3", CompileMode::instrumented), 0, c, kT0);
  REQUIRE(lc.phase() == Phase::profiling);
  // v3's instrumented build compiles in the background; v1's instrumented
  // build serves: its counts are the program's counts.
  StageRun r = ran_as_planned(1, "d3", CompileMode::instrumented);
  r.served_digest = "d1";
  r.compile = CompileState::under_way;
  StageUse u = lc.ran(r, kT0);
  CHECK(u.stale);
  CHECK(u.counts);
  CHECK(u.current);
  CHECK_FALSE(u.samples);
  // While the compile is under way async stages keep serving the old build.
  CHECK_FALSE(lc.begin(facts(3, "d3", CompileMode::instrumented), 2, c, kT0).sync);
  // Stale with no compile under way (it failed): the next stage waits.
  r.compile = CompileState::held_off;
  lc.ran(r, kT0);
  CHECK(lc.stale_run() == 2);
  CHECK(lc.begin(facts(3, "d3", CompileMode::instrumented), 3, c, kT0).sync);
  lc.ran(ran_as_planned(3, "d3", CompileMode::instrumented), kT0);
  CHECK(lc.stale_run() == 0);
  CHECK_FALSE(lc.begin(facts(3, "d3", CompileMode::instrumented), 4, c, kT0).sync);

  // Optimized and stale: its measurements belong to nothing now.
  ProgramLifecycle opt;
  opt.begin(facts(2, "d2", CompileMode::optimized), 0, c, kT0);
  StageRun old = ran_as_planned(1, "d2", CompileMode::cs_instrumented);
  old.served_digest = "d1";
  old.compile = CompileState::under_way;
  StageUse ou = opt.ran(old, kT0);
  CHECK_FALSE(ou.current);
  CHECK_FALSE(ou.counts);
  CHECK_FALSE(ou.samples);
}

TEST_CASE("lifecycle: a build that does not compile fails over to the plain build and is retried",
          "[service][lifecycle]") {
  ProgramLifecycle lc;
  const LifecycleConfig c = config();
  const ProfileFacts f = facts(2, "d2", CompileMode::optimized);
  lc.begin(f, 0, c, kT0);
  lc.compile_failed(0, "compile failed: LLVM ERROR", kT0);
  CHECK(lc.phase() == Phase::failed);
  CHECK(lc.history().back().cause == Cause::compile_failed);
  CHECK_FALSE(lc.approve(RewriteKind::drift, c, kT0));
  lc.ran(ran_as_planned(0, "plain", CompileMode::plain), kT0);
  int fallback = 0;
  StageDirective d;
  for (int stage = 1; stage < 100; ++stage) {
    d = lc.begin(f, stage, c, kT0);
    if (!d.fallback) break;
    ++fallback;
    lc.ran(ran_as_planned(stage, "plain", CompileMode::plain), kT0);
  }
  CHECK(fallback == ProgramLifecycle::kFirstRetryStages);
  CHECK(d.sync); // the retry waits for its compile
  CHECK(d.guard);
  // It fails again: the next retry comes after twice as many stages.
  lc.compile_failed(9, "again", kT0);
  fallback = 0;
  for (int stage = 10; stage < 100; ++stage) {
    d = lc.begin(f, stage, c, kT0);
    if (!d.fallback) break;
    ++fallback;
  }
  CHECK(fallback == 2 * ProgramLifecycle::kFirstRetryStages);
  // Then it compiles: the phase the profile gives.
  lc.ran(ran_as_planned(30, "d2", CompileMode::optimized), kT0);
  CHECK(lc.phase() == Phase::optimized);
  CHECK(lc.history().back().cause == Cause::compile_recovered);
}

TEST_CASE("lifecycle: changes made by others are taken in as typed transitions",
          "[service][lifecycle]") {
  ProgramLifecycle lc;
  const LifecycleConfig c = config();
  lc.begin(facts(5, "d5", CompileMode::optimized), 0, c, kT0);
  lc.planned(GuardPlanKind::trial, 0, "trial", kT0);
  REQUIRE(lc.phase() == Phase::trial);
  // An operator's reset (no profile): counting from scratch.
  lc.begin(none(), 1, c, kT0);
  CHECK(lc.phase() == Phase::profiling);
  CHECK(lc.history().back().cause == Cause::replaced);
  // An import of a finished profile.
  lc.begin(facts(1, "imported", CompileMode::optimized), 2, c, kT0);
  CHECK(lc.phase() == Phase::optimized);
  CHECK(lc.history().back().cause == Cause::replaced);
  // The guard switched off by a reload.
  LifecycleConfig off = c;
  off.guard = false;
  lc.begin(facts(1, "imported", CompileMode::optimized), 3, off, kT0);
  CHECK(lc.phase() == Phase::steady);
  CHECK(lc.history().back().cause == Cause::settled);
  // An operator's mode is served as it is.
  ProgramLifecycle op;
  op.begin(facts(4, "d4", CompileMode::optimized, true), 0, c, kT0);
  CHECK(op.phase() == Phase::steady);
  ProgramLifecycle plain;
  plain.begin(facts(4, "d4", CompileMode::plain, true), 0, c, kT0);
  CHECK(plain.phase() == Phase::steady);
}

TEST_CASE("lifecycle: the history is bounded and a stage finds its own transitions",
          "[service][lifecycle]") {
  ProgramLifecycle lc;
  const LifecycleConfig c = config();
  lc.begin(facts(2, "d2", CompileMode::optimized), 0, c, kT0);
  const std::uint64_t before = lc.transitions();
  lc.planned(GuardPlanKind::trial, 1, "t", kT0);
  lc.trial_ended(TrialEnd::rejected, 3, 1, "rejected", kT0);
  auto mine = lc.transitions_since(before);
  REQUIRE(mine.size() == 2);
  CHECK(mine[0].cause == Cause::trial_started);
  CHECK(mine[1].cause == Cause::trial_rejected);
  for (int i = 0; i < 200; ++i) {
    lc.planned(GuardPlanKind::trial, i, "t", kT0);
    lc.trial_ended(TrialEnd::no_difference, 3, i, "nd", kT0);
  }
  CHECK(lc.history().size() == ProgramLifecycle::kHistoryKept);
  CHECK(lc.transitions() == 403);
  CHECK(lc.transitions_since(0).size() == ProgramLifecycle::kHistoryKept);
  CHECK(lc.transitions_since(lc.transitions()).empty());
  const nlohmann::json j = lc.to_json(kT0);
  CHECK(j["phase"] == "steady");
  CHECK(j["history"].size() == ProgramLifecycle::kHistoryKept);
  CHECK(j["history"].back()["cause"] == "trial_no_difference");
}
