// A program's lifecycle (docs/lifecycle.md): the one owner of "where is this
// program in its life, and why". Per profile key, an explicit state machine
//
//   profiling -> cs_profiling -> optimized -> trial <-> steady -> reprofiling -> ...
//   pinned (an operator's), failed (its build did not compile: the plain build serves)
//
// that every stage asks what to run (begin, planned) and tells what it ran
// (ran) and what the mechanisms found: the feedback policy's and the drift
// rule's rewrites are approved here (approve) and reported back (rewritten),
// the guard's verdicts likewise (verdict). Every transition has one typed
// Cause and is kept in a bounded history, which cache.explain, `fdoctl
// explain` and `fdoctl web` show.
//
// What it decides, in one place:
//   - which stages' measurements count, and for what (StageUse): a stage that
//     ran another build than planned (an earlier version's code while a
//     tier-up compiles, or another variant) is counted for what it ran; trial
//     stages and stale stages never feed the drift window;
//   - when a stage must wait for its compile (StageDirective::tier_up): a
//     stage that keeps running an earlier build without a compile under way
//     makes the next one wait, so no state waits forever;
//   - the recompile rate cap (approve): a rewrite that starts a round (a drift
//     re-profile, hardware findings) is allowed only while the hour's rewrites
//     leave room for the whole round; a round under way always completes;
//   - that a pinned profile is never rewritten.
//
// Pure logic: no I/O, no clock of its own, no locks (LifecycleTable gives each
// profile key one, held only around these calls). Tested alone
// (lifecycle_test.cpp, including a model-based test of random event sequences).
#pragma once

#include "fdo/util/profile.h"

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fdo::daemon {

enum class Phase : std::uint8_t {
  profiling,    // no counts yet: instrumented stages gather them
  cs_profiling, // the context-sensitive round: cs_instrumented stages
  optimized,    // its profile's optimized build serves; the guard has not judged it yet
  trial,        // the guard runs a candidate build against the incumbent
  steady,       // settled: one build serves every stage; drift is watched
  reprofiling,  // the workload drifted: instrumented stages count it again
  pinned,       // an operator pinned the profile: served as it is, never rewritten
  failed,       // the build the profile asks for did not compile: the plain build serves
};
std::string_view to_string(Phase p);

// Why a transition happened (one per transition).
enum class Cause : std::uint8_t {
  new_program,         // the first stage of a profile key with no profile
  restored,            // first stage under this daemon: the phase its stored profile gives
  replaced,            // another writer changed the profile (reset, import, another host)
  counts_ready,        // a profile was made from instrumentation counts
  cs_counts_ready,     // the context-sensitive round's counts joined the profile
  trial_started,       // the guard put a candidate on trial
  trial_accepted,      // the candidate won and serves from now on
  trial_rejected,      // the candidate lost: the incumbent serves on
  trial_no_difference, // the trial's budget ran out
  trial_abandoned,     // the profile changed during the trial: its figures were dropped
  settled,             // nothing (more) on trial: the incumbent serves
  drift,               // sampled time shares moved past the threshold: re-profiling
  reprofile_unchanged, // the re-profile counted what the profile already held: it serves again
  hardware_findings,   // rewritten from hardware findings (branch marks, i-cache layout)
  pinned,              // an operator pinned the profile
  unpinned,            // and unpinned it
  compile_failed,      // the planned build did not compile
  compile_recovered,   // it compiled on a later try
};
std::string_view to_string(Cause c);

// What a rewrite is for; the policy (policy.h) and the drift rule
// (time_share.h) propose them, the lifecycle approves them.
enum class RewriteKind : std::uint8_t {
  counts,              // a profile from instrumentation counts
  cs_counts,           // the end of the context-sensitive round
  reprofile_unchanged, // a re-profile that found the counts it checked: that profile again
  hardware,            // hardware findings on an optimized build
  drift,               // a re-profile: counts dropped, instrumented again
};
std::string_view to_string(RewriteKind k);

// The stored profile as the lifecycle sees it.
struct ProfileFacts {
  std::int64_t version = 0; // 0: no profile
  std::string digest;       // profile_digest, or no_profile_digest() without a profile
  CompileMode mode = CompileMode::instrumented; // choose_mode
  bool mode_set = false;                        // knobs.mode chosen (an operator, or the CS round)
  bool pinned = false;
  std::int64_t reprofile_of = 0; // ProfileDoc::reprofile_of
};
// nullptr: no profile. `digest`: the stored one (computed when empty).
ProfileFacts facts_of(const ProfileDoc* doc, std::int64_t version, bool pinned,
                      const std::string& digest = {});

struct LifecycleConfig {
  bool guard = true;         // guard.mode on: optimized waits for the guard's trials
  bool sync_tier_up = false; // tier_up = sync: every stage waits for its compile
  int max_rewrites_per_hour = 12;
  bool cs_round = true;        // policy.cs_pgo_stages > 0: a re-profile's round has 3 rewrites
  int drift_window_stages = 3; // policy.time_share_window_stages
};

// What a stage does, asked at its start.
struct StageDirective {
  Phase phase = Phase::profiling;
  // The guard may plan this stage (a trial, or its incumbent). Not while
  // counts are gathered, pinned, or failed.
  bool guard = false;
  // Wait for the compile (tier_up = sync, or a run of stale stages to end).
  bool sync = false;
  // failed: serve the plain build (false on the stages that retry the profile's).
  bool fallback = false;
};

// What the guard planned for a stage that the directive let it plan.
enum class GuardPlanKind : std::uint8_t {
  not_guarded, // served as it is (no counts, pinned, a mode set, guard off)
  waiting,     // too few stages under the profile for a first trial
  serving,     // nothing on trial: the incumbent
  trial,       // an arm of a trial
  other_shape, // a trial is on, for another argument shape: this stage runs the incumbent
};

// Where a stage's compile stood when it was served something else.
enum class CompileState : std::uint8_t {
  none,      // the stage ran what it asked for
  under_way, // the planned build compiles in the background
  held_off,  // its background compile failed recently, or could not be queued
};

// What a stage ran.
struct StageRun {
  std::int64_t stage = 0;
  std::string planned_digest; // the build the stage asked for (the profile's, or a variant's)
  std::string served_digest;  // what the output it ran was compiled for
  CompileMode served_mode = CompileMode::plain;
  bool trial = false; // a stage of a trial (either arm, or another shape during one)
  CompileState compile = CompileState::none;
};

// How a stage's measurements may be used.
struct StageUse {
  bool stale = false;   // it ran another build than it asked for
  bool current = false; // its measurements belong to the current profile version
  bool counts = false;  // its instrumentation counts join the profile being gathered
  // Its samples, counters and time represent the served build (no trial, not
  // stale, not pinned or failed): they go into the drift window (and the
  // version's rows that restore it after a restart) and the hardware findings.
  bool samples = false;
};

struct Approval {
  bool approved = false;
  std::string why_not; // for the stage's policy text when refused
  explicit operator bool() const { return approved; }
};

enum class TrialEnd : std::uint8_t { accepted, rejected, no_difference, abandoned };

struct Transition {
  Phase from = Phase::profiling;
  Phase to = Phase::profiling;
  Cause cause = Cause::restored;
  std::int64_t stage = -1;  // the stage number that caused it (-1: none)
  std::int64_t version = 0; // the profile version after it
  std::int64_t unix_ms = 0;
  std::string detail; // for people
};
nlohmann::json to_json(const Transition& t);

class ProgramLifecycle {
public:
  static constexpr std::size_t kHistoryKept = 64;
  // A trial whose stages moved off its argument shape this many stages in a
  // row is given up: the workload may have moved, and drift is judged only
  // outside trials. The guard then plans nothing for twice the drift window
  // (the profile's own build serves, and its drift is judged), and may start
  // its trial again after.
  static constexpr int kOffShapeStages = 8;
  // failed: stages served the plain build before the profile's build is tried
  // again (doubled after each failed try, up to kMaxRetryStages).
  static constexpr int kFirstRetryStages = 8;
  static constexpr int kMaxRetryStages = 512;

  using Clock = std::chrono::system_clock;

  // At a stage's start, with the stored profile: a change the lifecycle did
  // not approve (first sight, a reset, an import, another host, a pin) is
  // taken in here; then what the stage does.
  StageDirective begin(const ProfileFacts& now, std::int64_t stage, const LifecycleConfig& config,
                       Clock::time_point at);
  // Before the first begin (a daemon meets the key again): the times of the
  // rewrites the store's history shows (versions whose digest changed), so
  // the rate cap counts across restarts.
  void restore_rewrites(const std::vector<Clock::time_point>& times);
  // The first half of begin, for a stage whose feedback arrives without a
  // begin (in-process feedback): takes in changes made by others.
  void sync(const ProfileFacts& now, std::int64_t stage, const LifecycleConfig& config,
            Clock::time_point at);
  // What the guard planned (only for stages whose directive let it): trials
  // start and settle here. `detail` names the variant(s), for people.
  void planned(GuardPlanKind kind, std::int64_t stage, const std::string& detail,
               Clock::time_point at);
  // The planned build did not compile (the stage then runs the plain build).
  void compile_failed(std::int64_t stage, const std::string& error, Clock::time_point at);
  // What the stage ran, and how its measurements may be used.
  StageUse ran(const StageRun& run, Clock::time_point at);
  // How they would be used in the phase the lifecycle is in now (changes nothing).
  StageUse use_of(const StageRun& run) const;
  // Whether a proposed rewrite may be written now; the reason when not.
  Approval approve(RewriteKind kind, const LifecycleConfig& config, Clock::time_point at) const;
  // An approved rewrite was written: `after` is the profile it wrote.
  void rewritten(RewriteKind kind, const ProfileFacts& after, std::int64_t stage,
                 const std::string& detail, const LifecycleConfig& config, Clock::time_point at);
  // The guard's trial ended: its verdict was written as `version`, or it was
  // abandoned (the profile changed under it: the next stage takes the change in).
  void trial_ended(TrialEnd end, std::int64_t version, std::int64_t stage,
                   const std::string& detail, Clock::time_point at);

  Phase phase() const { return phase_; }
  bool watches_drift() const { return phase_ == Phase::optimized || phase_ == Phase::steady; }
  const std::deque<Transition>& history() const { return history_; }
  // Transitions made since this lifecycle started (the history keeps the
  // last kHistoryKept): a stage that noted the count before it ran finds its
  // own with transitions_since.
  std::uint64_t transitions() const { return transitions_; }
  std::vector<Transition> transitions_since(std::uint64_t count) const;
  int stale_run() const { return stale_run_; }
  // Rewrites approved and written in the hour before `at`.
  int rewrites_within_hour(Clock::time_point at) const;
  std::int64_t version() const { return facts_.version; }
  bool started() const { return started_; }
  nlohmann::json to_json(Clock::time_point at) const;

private:
  Phase derive(const ProfileFacts& f) const;
  void move_to(Phase to, Cause cause, std::int64_t stage, std::string detail, Clock::time_point at);

  bool started_ = false;
  bool guard_ = true;
  Phase phase_ = Phase::profiling;
  ProfileFacts facts_;
  std::deque<Transition> history_;
  std::uint64_t transitions_ = 0;
  std::deque<Clock::time_point> rewrites_; // approved rewrites written (bounded)
  int stale_run_ = 0;
  bool must_wait_ = false; // the next stage waits for its compile
  int off_shape_ = 0;      // trial stages in a row of another argument shape
  int guard_pause_ = 0;    // stages the guard plans nothing (after a trial was given up)
  int drift_window_ = 3;   // LifecycleConfig::drift_window_stages, as last told
  // failed: stages left before the profile's build is tried again, and the
  // interval after the next failure.
  int retry_in_ = 0;
  int retry_interval_ = kFirstRetryStages;
  bool retrying_ = false; // this stage tries the profile's build again
};

// One ProgramLifecycle per profile key, each under its own lock (a leaf: held
// only around the pure calls above, never across I/O).
class LifecycleTable {
public:
  struct Entry {
    std::mutex mu;
    ProgramLifecycle lc;
  };
  std::shared_ptr<Entry> of(const std::string& pk);
  // Null when the key has not been seen.
  std::shared_ptr<Entry> find(const std::string& pk) const;
  void forget(const std::string& pk);
  void forget_all();
  // {"phase", "since", "history": [...]} of `pk`; null when unseen.
  nlohmann::json describe(const std::string& pk) const;
  // Profile keys per phase (metrics).
  std::map<Phase, std::size_t> phases() const;

private:
  mutable std::mutex mu_; // guards the map only
  std::map<std::string, std::shared_ptr<Entry>> entries_;
};

} // namespace fdo::daemon
