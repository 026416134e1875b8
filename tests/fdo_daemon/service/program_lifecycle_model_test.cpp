// A model-based test of the program lifecycle (lifecycle.h): a simulated
// daemon around it (store, guard, compiles with async tier-up, a policy that
// rewrites after enough counted stages, drift from a workload that changes
// phase) under random events: guard trials with noisy verdicts, stages of
// another shape during a trial, phase changes, restarts, pins, exit(n)
// stages, compile failures, re-profiles that count what a profile already
// holds. After every stage the invariants are checked.
#include "lifecycle_test_support.h"

#include <catch2/catch.hpp>
#include <map>
#include <random>
#include <set>
#include <sstream>

using namespace fdo;
using namespace fdo::daemon;
using namespace fdo::daemon::testing;

namespace {

struct Model {
  std::mt19937_64 rng;
  LifecycleConfig cfg;
  std::unique_ptr<ProgramLifecycle> lc = std::make_unique<ProgramLifecycle>();
  Clock::time_point now = kT0;
  std::int64_t stage = 0;

  // The store.
  ProfileFacts profile = none();
  int profile_phase = -1; // the workload phase a profile's counts are of (-1: none)
  std::map<std::string, int> phase_of_digest;
  int next_digest = 1;
  // The workload.
  int workload = 0;
  // Compiles: digests compiled, digests whose compile fails, background compiles.
  std::set<std::string> compiled{"none"};
  std::set<std::string> broken;
  std::map<std::string, int> compiling; // digest -> stages left
  std::string last_served = "none";
  // The policy: counted stages and the drift window of the served build.
  int counted = 0;
  std::string window_digest;
  int window = 0;
  int window_phase = -1;
  // The guard.
  int guard_wait = 0;
  int trial_left = 0;
  int off_shape = 0; // stages of another shape than the trial's, in a row
  // Bookkeeping for the invariants.
  std::vector<Clock::time_point> rewrite_times;
  int instrumented_run = 0, worst_instrumented_run = 0;
  int stale_without_compile = 0;
  std::vector<std::string> log;

  explicit Model(std::uint64_t seed) : rng(seed) {
    cfg.guard = true;
    cfg.sync_tier_up = (seed % 2) == 0;
    cfg.max_rewrites_per_hour = 12;
    cfg.cs_round = true;
  }
  bool chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; }
  std::string digest() {
    std::string d = std::to_string(next_digest++);
    return d.insert(0, 1, 'd'); // (GCC 12 warns wrongly about "d" + std::to_string)
  }

  void write(RewriteKind kind, ProfileFacts after, const std::string& what) {
    after.version = profile.version + 1;
    profile = after;
    lc->rewritten(kind, profile, stage, what, cfg, now);
    rewrite_times.push_back(now);
    counted = 0;
    window = 0;
    window_digest.clear();
  }

  // One stage; returns false when an invariant broke (log says which).
  bool step() {
    ++stage;
    now += std::chrono::seconds(10);
    // Random events first.
    if (chance(0.01)) workload = 1 - workload; // a phase change
    if (chance(0.004)) {
      // A restart: the new daemon's lifecycle knows the recent rewrites from
      // the profile's history (versions whose digest changed).
      lc = std::make_unique<ProgramLifecycle>();
      lc->restore_rewrites(rewrite_times);
      // The new daemon's tier-up queue holds nothing off: it tries afresh.
      stale_without_compile = 0;
    }
    if (chance(0.004)) profile.pinned = !profile.pinned; // an operator
    if (chance(0.005) && profile.version > 0) broken.insert(profile.digest);
    if (chance(0.05)) broken.clear(); // the compiler was fixed (or the bug was transient)
    const bool exits = chance(0.1);   // the program ends with exit(n): counted all the same
    (void)exits;

    const StageDirective d = lc->begin(profile, stage, cfg, now);
    const Phase at_start = lc->phase();
    // The guard plans (trials start after a few stages and last a while).
    std::string planned = d.fallback ? "plain" : profile.digest;
    CompileMode mode = d.fallback ? CompileMode::plain : profile.mode;
    bool trial = false;
    if (d.guard && !d.fallback && profile.mode == CompileMode::optimized && !profile.mode_set) {
      if (trial_left > 0 && (off_shape > 0 ? chance(0.9) : chance(0.05))) {
        // The stages moved to another argument shape than the trial's (for
        // a while): they run the incumbent, not an arm of the trial.
        ++off_shape;
        lc->planned(GuardPlanKind::other_shape, stage, "other shape", now);
        if (off_shape > ProgramLifecycle::kOffShapeStages && lc->phase() == Phase::trial)
          return fail("a trial kept its phase through stages of another shape");
      } else if (trial_left > 0) {
        off_shape = 0;
        trial = true;
        if (chance(0.5)) {
          planned = "plain";
          mode = CompileMode::plain;
        }
        lc->planned(GuardPlanKind::trial, stage, "trial", now);
      } else if (guard_wait > 0) {
        --guard_wait;
        lc->planned(GuardPlanKind::waiting, stage, "waiting", now);
      } else if (chance(0.2)) {
        trial_left = 4 + static_cast<int>(rng() % 10);
        trial = true;
        lc->planned(GuardPlanKind::trial, stage, "trial", now);
      } else {
        lc->planned(GuardPlanKind::serving, stage, "incumbent", now);
      }
    }
    // The compile.
    if (broken.contains(planned) && planned != "plain") {
      lc->compile_failed(stage, "broken", now);
      planned = "plain";
      mode = CompileMode::plain;
      trial = false;
    }
    std::string served = planned;
    CompileMode served_mode = mode;
    CompileState compile = CompileState::none;
    if (!compiled.contains(planned)) {
      if (d.sync || last_served.empty()) {
        compiled.insert(planned);
      } else {
        auto [it, fresh] = compiling.try_emplace(planned, 1 + static_cast<int>(rng() % 3));
        (void)fresh;
        served = last_served;
        served_mode = CompileMode::instrumented; // what an earlier build was, roughly
        compile = chance(0.1) ? CompileState::held_off : CompileState::under_way;
        if (compile == CompileState::under_way && --it->second <= 0) compiled.insert(planned);
      }
    }
    last_served = served;
    StageRun run;
    run.stage = stage;
    run.planned_digest = planned;
    run.served_digest = served;
    run.served_mode = served_mode;
    run.trial = trial;
    run.compile = compile;
    const StageUse u = lc->ran(run, now);

    // Invariant: trial stages never feed drift; stale stages neither.
    if (trial && u.samples) return fail("a trial stage fed samples");
    if (u.stale && u.samples) return fail("a stale stage fed samples");
    // Invariant: counts are counted for what ran in a counting phase.
    const Phase ph = lc->phase();
    if ((ph == Phase::profiling || ph == Phase::reprofiling) &&
        served_mode == CompileMode::instrumented && !u.counts)
      return fail("instrumented counts were not counted while profiling");
    // Invariant: stale stages with no compile under way end at the next stage.
    stale_without_compile =
        u.stale && compile != CompileState::under_way ? stale_without_compile + 1 : 0;
    if (stale_without_compile > 1 && !d.fallback)
      return fail("stale stages without a compile under way went on");
    if (cfg.sync_tier_up && u.stale) return fail("a stale stage under sync tier-up");

    // The policy and the drift rule.
    if (u.counts) ++counted;
    if (u.samples && watches(ph)) {
      if (window_digest != served) window = 0;
      window_digest = served;
      ++window;
      window_phase = workload;
    }
    propose(ph);

    // The guard's verdict.
    if (trial && trial_left > 0 && --trial_left == 0) {
      const int r = static_cast<int>(rng() % 3);
      profile.version += 1; // the verdict is a version (bookkeeping)
      lc->trial_ended(r == 0   ? TrialEnd::accepted
                      : r == 1 ? TrialEnd::rejected
                               : TrialEnd::no_difference,
                      profile.version, stage, "verdict", now);
    }

    // Invariant: the pinned profile is never rewritten (checked in propose);
    // progress: instrumented code never runs for long unless pinned so.
    if (profile.pinned ||
        (served_mode != CompileMode::instrumented && served_mode != CompileMode::cs_instrumented))
      instrumented_run = 0;
    else
      ++instrumented_run;
    if (!profile.pinned)
      worst_instrumented_run = std::max(worst_instrumented_run, instrumented_run);
    if (instrumented_run > 40 && !profile.pinned)
      return fail("instrumented code for 40 stages in a row (phase " + std::string(to_string(ph)) +
                  ", started " + std::string(to_string(at_start)) + ")");
    // Invariant: rewrites per sliding hour stay within the cap and one
    // round under way (the initial round, or one an operator started).
    int in_hour = 0;
    for (auto t : rewrite_times)
      if (t > now - std::chrono::hours(1)) ++in_hour;
    if (in_hour > cfg.max_rewrites_per_hour + 3)
      return fail("rewrites in an hour: " + std::to_string(in_hour));
    return true;
  }

  static bool watches(Phase p) { return p == Phase::optimized || p == Phase::steady; }

  void propose(Phase ph) {
    const bool pinned = profile.pinned;
    auto ask = [&](RewriteKind k) {
      Approval a = lc->approve(k, cfg, now);
      if (a && pinned) {
        log.push_back("approved a rewrite of a pinned profile");
        pinned_violation = true;
      }
      if (a && k == RewriteKind::drift && ph == Phase::trial) {
        log.push_back("a drift rewrite during a trial");
        trial_drift_violation = true;
      }
      return a.approved;
    };
    if ((ph == Phase::profiling || ph == Phase::reprofiling) && counted >= 3) {
      // A re-profile that counted the phase the earlier profile was of.
      if (ph == Phase::reprofiling && profile_phase == workload &&
          ask(RewriteKind::reprofile_unchanged)) {
        ProfileFacts back = facts(0, earlier_digest, CompileMode::optimized);
        write(RewriteKind::reprofile_unchanged, back, "same");
        return;
      }
      if (ask(RewriteKind::counts)) {
        ProfileFacts next = facts(0, digest(), CompileMode::cs_instrumented, true);
        profile_phase = workload;
        write(RewriteKind::counts, next, "counts");
      }
      return;
    }
    if (ph == Phase::cs_profiling && counted >= 2 && ask(RewriteKind::cs_counts)) {
      earlier_digest = digest();
      write(RewriteKind::cs_counts, facts(0, earlier_digest, CompileMode::optimized), "cs");
      guard_wait = 5;
      return;
    }
    if (watches(ph) && window >= 3 && window_phase != profile_phase && profile_phase >= 0 &&
        ask(RewriteKind::drift)) {
      ProfileFacts re = facts(0, digest(), CompileMode::instrumented);
      re.reprofile_of = profile.version;
      write(RewriteKind::drift, re, "drift");
      return;
    }
    if (watches(ph) && chance(0.002) && ask(RewriteKind::hardware)) {
      earlier_digest = digest();
      write(RewriteKind::hardware, facts(0, earlier_digest, CompileMode::optimized), "hw");
    }
  }

  bool fail(const std::string& what) {
    std::ostringstream o;
    o << what << " at stage " << stage << "; history:";
    for (const Transition& t : lc->history())
      o << " " << to_string(t.from) << "->" << to_string(t.to) << "(" << to_string(t.cause) << "@"
        << t.stage << ")";
    log.push_back(o.str());
    return false;
  }

  std::string earlier_digest;
  bool pinned_violation = false;
  bool trial_drift_violation = false;
};

} // namespace

TEST_CASE("lifecycle: random event sequences keep the invariants (model-based)",
          "[service][lifecycle][model]") {
  int sequences = 0, reprofiles = 0, failures = 0, trials = 0;
  std::map<Phase, int> final_phases;
  for (std::uint64_t seed = 1; seed <= 300; ++seed) {
    Model m(seed);
    bool ok = true;
    for (int i = 0; i < 600 && ok; ++i)
      ok = m.step();
    std::string log;
    for (const auto& line : m.log)
      log += line + "\n";
    INFO("seed " << seed << (m.cfg.sync_tier_up ? " (sync)" : " (async)") << "\n" << log);
    REQUIRE(ok);
    CHECK_FALSE(m.pinned_violation);
    CHECK_FALSE(m.trial_drift_violation);
    ++sequences;
    for (const Transition& t : m.lc->history()) {
      reprofiles += t.cause == Cause::drift;
      failures += t.cause == Cause::compile_failed;
      trials += t.cause == Cause::trial_started;
    }
    ++final_phases[m.lc->phase()];
  }
  CHECK(sequences == 300);
  // The sequences did exercise what they are for.
  CHECK(reprofiles > 0);
  CHECK(failures > 0);
  CHECK(trials > 0);
  CHECK(final_phases.size() >= 3);
}
