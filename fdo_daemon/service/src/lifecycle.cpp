#include "fdo/daemon/lifecycle.h"

#include "fdo/util/enum_names.h"
#include "fdo/util/time.h"

#include <algorithm>

namespace fdo::daemon {

using nlohmann::json;

namespace {

constexpr EnumNames<Phase, 8> kPhaseNames{{{{Phase::profiling, "profiling"},
                                            {Phase::cs_profiling, "cs_profiling"},
                                            {Phase::optimized, "optimized"},
                                            {Phase::trial, "trial"},
                                            {Phase::steady, "steady"},
                                            {Phase::reprofiling, "reprofiling"},
                                            {Phase::pinned, "pinned"},
                                            {Phase::failed, "failed"}}}};

constexpr EnumNames<Cause, 18> kCauseNames{{{{Cause::new_program, "new_program"},
                                             {Cause::restored, "restored"},
                                             {Cause::replaced, "replaced"},
                                             {Cause::counts_ready, "counts_ready"},
                                             {Cause::cs_counts_ready, "cs_counts_ready"},
                                             {Cause::trial_started, "trial_started"},
                                             {Cause::trial_accepted, "trial_accepted"},
                                             {Cause::trial_rejected, "trial_rejected"},
                                             {Cause::trial_no_difference, "trial_no_difference"},
                                             {Cause::trial_abandoned, "trial_abandoned"},
                                             {Cause::settled, "settled"},
                                             {Cause::drift, "drift"},
                                             {Cause::reprofile_unchanged, "reprofile_unchanged"},
                                             {Cause::hardware_findings, "hardware_findings"},
                                             {Cause::pinned, "pinned"},
                                             {Cause::unpinned, "unpinned"},
                                             {Cause::compile_failed, "compile_failed"},
                                             {Cause::compile_recovered, "compile_recovered"}}}};

constexpr EnumNames<RewriteKind, 5> kRewriteNames{
    {{{RewriteKind::counts, "counts"},
      {RewriteKind::cs_counts, "cs_counts"},
      {RewriteKind::reprofile_unchanged, "reprofile_unchanged"},
      {RewriteKind::hardware, "hardware"},
      {RewriteKind::drift, "drift"}}}};

// Rewrite times kept: enough for any sensible hourly cap.
constexpr std::size_t kRewriteTimesKept = 256;

bool gathers_counts(Phase p) {
  return p == Phase::profiling || p == Phase::reprofiling;
}

std::int64_t unix_ms_of(std::chrono::system_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

} // namespace

std::string_view to_string(Phase p) {
  return kPhaseNames.name(p);
}
std::string_view to_string(Cause c) {
  return kCauseNames.name(c);
}
std::string_view to_string(RewriteKind k) {
  return kRewriteNames.name(k);
}

ProfileFacts facts_of(const ProfileDoc* doc, std::int64_t version, bool pinned,
                      const std::string& digest) {
  ProfileFacts f;
  f.pinned = pinned;
  if (doc == nullptr) {
    f.digest = std::string(no_profile_digest());
    return f;
  }
  f.version = version;
  f.digest = digest.empty() ? profile_digest(*doc) : digest;
  f.mode = choose_mode(doc);
  f.mode_set = doc->knobs.mode.has_value();
  f.reprofile_of = doc->reprofile_of;
  return f;
}

json to_json(const Transition& t) {
  return {{"from", std::string(to_string(t.from))},
          {"to", std::string(to_string(t.to))},
          {"cause", std::string(to_string(t.cause))},
          {"stage", t.stage >= 0 ? json(t.stage) : json(nullptr)},
          {"version", t.version},
          {"time", rfc3339_ms(t.unix_ms)},
          {"detail", t.detail}};
}

Phase ProgramLifecycle::derive(const ProfileFacts& f) const {
  if (f.pinned) return Phase::pinned;
  switch (f.mode) {
  case CompileMode::cs_instrumented:
    return Phase::cs_profiling;
  case CompileMode::instrumented:
    return f.reprofile_of > 0 ? Phase::reprofiling : Phase::profiling;
  case CompileMode::optimized:
    // An operator's mode is served as it is: nothing for the guard to judge.
    return guard_ && !f.mode_set ? Phase::optimized : Phase::steady;
  case CompileMode::plain:
    break;
  }
  return Phase::steady;
}

void ProgramLifecycle::move_to(Phase to, Cause cause, std::int64_t stage, std::string detail,
                               Clock::time_point at) {
  Transition t;
  t.from = phase_;
  t.to = to;
  t.cause = cause;
  t.stage = stage;
  t.version = facts_.version;
  t.unix_ms = unix_ms_of(at);
  t.detail = std::move(detail);
  history_.push_back(std::move(t));
  ++transitions_;
  while (history_.size() > kHistoryKept)
    history_.pop_front();
  phase_ = to;
}

std::vector<Transition> ProgramLifecycle::transitions_since(std::uint64_t count) const {
  const std::uint64_t n =
      std::min<std::uint64_t>(transitions_ - std::min(count, transitions_), history_.size());
  return {history_.end() - static_cast<std::ptrdiff_t>(n), history_.end()};
}

StageDirective ProgramLifecycle::begin(const ProfileFacts& now, std::int64_t stage,
                                       const LifecycleConfig& config, Clock::time_point at) {
  sync(now, stage, config, at);
  StageDirective d;
  d.phase = phase_;
  d.sync = config.sync_tier_up || must_wait_;
  if (phase_ == Phase::failed) {
    if (retry_in_ <= 0) {
      // Try the profile's build again, waiting for it: it compiles or fails now.
      retrying_ = true;
      d.sync = true;
      const Phase p = derive(facts_);
      d.guard = p == Phase::optimized || p == Phase::steady;
    } else {
      --retry_in_;
      d.fallback = true;
    }
    return d;
  }
  d.guard = phase_ == Phase::optimized || phase_ == Phase::trial || phase_ == Phase::steady;
  if (guard_pause_ > 0) {
    --guard_pause_;
    d.guard = false;
  }
  return d;
}

void ProgramLifecycle::sync(const ProfileFacts& now, std::int64_t stage,
                            const LifecycleConfig& config, Clock::time_point at) {
  guard_ = config.guard;
  drift_window_ = config.drift_window_stages;
  if (!started_) {
    started_ = true;
    facts_ = now;
    const Phase p = derive(now);
    phase_ = p;
    move_to(p, now.version == 0 ? Cause::new_program : Cause::restored, stage,
            now.version == 0 ? "no profile yet"
                             : "the stored profile v" + std::to_string(now.version) + " gives it",
            at);
  } else if (now.digest != facts_.digest || now.pinned != facts_.pinned ||
             now.mode != facts_.mode || now.reprofile_of != facts_.reprofile_of) {
    // Written by someone else: an operator (pin, reset, import), another
    // host, a restore. Whatever was under way is over; the profile says where
    // the program is now.
    const Cause cause = now.pinned && !facts_.pinned   ? Cause::pinned
                        : !now.pinned && facts_.pinned ? Cause::unpinned
                                                       : Cause::replaced;
    facts_ = now;
    retrying_ = false;
    retry_in_ = 0;
    retry_interval_ = kFirstRetryStages;
    move_to(derive(now), cause, stage,
            "profile v" + std::to_string(now.version) + " written outside this program's stages",
            at);
  } else {
    facts_.version = now.version; // a verdict or a checkpoint: bookkeeping only
  }
  // The guard switched off (a reload): nothing is judged any more.
  if (!guard_ && (phase_ == Phase::optimized || phase_ == Phase::trial))
    move_to(Phase::steady, Cause::settled, stage, "guard off", at);
}

void ProgramLifecycle::planned(GuardPlanKind kind, std::int64_t stage, const std::string& detail,
                               Clock::time_point at) {
  if (phase_ == Phase::failed) return; // a retry: the phase follows its compile (ran)
  if (kind != GuardPlanKind::other_shape) off_shape_ = 0;
  switch (kind) {
  case GuardPlanKind::trial:
    if (phase_ == Phase::optimized || phase_ == Phase::steady)
      move_to(Phase::trial, Cause::trial_started, stage, detail, at);
    break;
  case GuardPlanKind::other_shape:
    // The stages keep coming with another shape than the trial's: the
    // workload may have moved, and a trial keeps drift from being judged.
    if (phase_ == Phase::trial && ++off_shape_ >= kOffShapeStages) {
      off_shape_ = 0;
      guard_pause_ = 2 * std::max(1, drift_window_);
      move_to(Phase::steady, Cause::trial_abandoned, stage,
              std::to_string(kOffShapeStages) +
                  " stages in a row of another argument shape than the trial's: the profile's "
                  "build serves the next " +
                  std::to_string(guard_pause_) + " so that drift is judged",
              at);
    }
    break;
  case GuardPlanKind::serving:
    if (phase_ == Phase::optimized || phase_ == Phase::trial)
      move_to(Phase::steady, Cause::settled, stage, detail, at);
    break;
  case GuardPlanKind::waiting:
  case GuardPlanKind::not_guarded:
    break;
  }
}

void ProgramLifecycle::compile_failed(std::int64_t stage, const std::string& error,
                                      Clock::time_point at) {
  if (phase_ != Phase::failed) move_to(Phase::failed, Cause::compile_failed, stage, error, at);
  // Each failure waits twice as long as the last before the next try, also
  // across a recovery (another build of the same profile may compile while
  // this one does not): only a new profile starts over.
  retry_in_ = retry_interval_;
  retry_interval_ = std::min(2 * retry_interval_, kMaxRetryStages);
  retrying_ = false;
}

StageUse ProgramLifecycle::use_of(const StageRun& run) const {
  StageUse u;
  u.stale = run.served_digest != run.planned_digest;
  // Counts are counted for what ran: an instrumented build's counts are the
  // program's counts whichever version compiled it.
  u.counts = (gathers_counts(phase_) && run.served_mode == CompileMode::instrumented) ||
             (phase_ == Phase::cs_profiling && run.served_mode == CompileMode::cs_instrumented);
  u.current = !u.stale || u.counts;
  // Samples of the served build, outside a trial, in a phase whose samples
  // mean something: the stages a profile is made from, or those drift is
  // judged on. A pinned or failed program's are neither (after an unpin or
  // a recovery the window starts afresh: its rows would otherwise bring
  // them back after a restart).
  u.samples = !u.stale && !run.trial && phase_ != Phase::pinned && phase_ != Phase::failed;
  return u;
}

StageUse ProgramLifecycle::ran(const StageRun& run, Clock::time_point at) {
  StageUse u;
  u.stale = run.served_digest != run.planned_digest;
  if (phase_ == Phase::failed && retrying_) {
    retrying_ = false;
    if (!u.stale)
      move_to(derive(facts_), Cause::compile_recovered, run.stage, "the profile's build compiled",
              at);
  }
  if (u.stale) {
    ++stale_run_;
    // An earlier build served with no compile of the planned one under way
    // (it failed, or could not be queued): nothing would ever end this, so
    // the next stage waits for its compile.
    if (run.compile != CompileState::under_way) must_wait_ = true;
  } else {
    stale_run_ = 0;
    must_wait_ = false;
  }
  return use_of(run);
}

void ProgramLifecycle::restore_rewrites(const std::vector<Clock::time_point>& times) {
  rewrites_.insert(rewrites_.end(), times.begin(), times.end());
  std::sort(rewrites_.begin(), rewrites_.end());
  while (rewrites_.size() > kRewriteTimesKept)
    rewrites_.pop_front();
}

int ProgramLifecycle::rewrites_within_hour(Clock::time_point at) const {
  const auto hour_ago = at - std::chrono::hours(1);
  return static_cast<int>(
      std::count_if(rewrites_.begin(), rewrites_.end(), [&](auto t) { return t > hour_ago; }));
}

Approval ProgramLifecycle::approve(RewriteKind kind, const LifecycleConfig& config,
                                   Clock::time_point at) const {
  auto refuse = [&](std::string why) { return Approval{false, std::move(why)}; };
  if (phase_ == Phase::pinned || facts_.pinned) return refuse("the profile is pinned");
  auto in_phase = [&](bool ok) {
    return ok ? Approval{true, {}}
              : refuse(std::string(to_string(kind)) + " rewrite not taken in phase " +
                       std::string(to_string(phase_)));
  };
  switch (kind) {
  // A round under way always completes: each of these moves the program on
  // to code that runs faster than what gathers the counts.
  case RewriteKind::counts:
    return in_phase(gathers_counts(phase_));
  case RewriteKind::reprofile_unchanged:
    return in_phase(phase_ == Phase::reprofiling);
  case RewriteKind::cs_counts:
    return in_phase(phase_ == Phase::cs_profiling);
  case RewriteKind::hardware:
  case RewriteKind::drift: {
    if (!watches_drift()) return in_phase(false);
    // A rewrite that starts a round needs room in the hour for all of it: a
    // re-profile, the counts it gathers, and the context-sensitive round's.
    const int cost = kind == RewriteKind::hardware ? 1 : (config.cs_round ? 3 : 2);
    const int recent = rewrites_within_hour(at);
    if (recent + cost > config.max_rewrites_per_hour)
      return refuse("recompile rate cap reached (" + std::to_string(recent) +
                    " rewrites in the last hour, policy.max_recompiles_per_hour " +
                    std::to_string(config.max_rewrites_per_hour) + ", this round needs " +
                    std::to_string(cost) + ")");
    return Approval{true, {}};
  }
  }
  return refuse("unknown rewrite");
}

void ProgramLifecycle::rewritten(RewriteKind kind, const ProfileFacts& after, std::int64_t stage,
                                 const std::string& detail, const LifecycleConfig& config,
                                 Clock::time_point at) {
  guard_ = config.guard;
  retry_interval_ = kFirstRetryStages; // a new profile: its builds start over
  rewrites_.push_back(at);
  while (rewrites_.size() > kRewriteTimesKept)
    rewrites_.pop_front();
  facts_ = after;
  Cause cause = Cause::counts_ready;
  switch (kind) {
  case RewriteKind::counts:
    cause = Cause::counts_ready;
    break;
  case RewriteKind::cs_counts:
    cause = Cause::cs_counts_ready;
    break;
  case RewriteKind::reprofile_unchanged:
    cause = Cause::reprofile_unchanged;
    break;
  case RewriteKind::hardware:
    cause = Cause::hardware_findings;
    break;
  case RewriteKind::drift:
    cause = Cause::drift;
    break;
  }
  move_to(derive(after), cause, stage, detail, at);
}

void ProgramLifecycle::trial_ended(TrialEnd end, std::int64_t version, std::int64_t stage,
                                   const std::string& detail, Clock::time_point at) {
  const Cause cause = end == TrialEnd::accepted    ? Cause::trial_accepted
                      : end == TrialEnd::rejected  ? Cause::trial_rejected
                      : end == TrialEnd::abandoned ? Cause::trial_abandoned
                                                   : Cause::trial_no_difference;
  if (end != TrialEnd::abandoned) facts_.version = version; // a verdict: bookkeeping only
  if (phase_ == Phase::trial || phase_ == Phase::optimized || phase_ == Phase::steady)
    move_to(Phase::steady, cause, stage, detail, at);
}

json ProgramLifecycle::to_json(Clock::time_point at) const {
  json history = json::array();
  for (const Transition& t : history_)
    history.push_back(daemon::to_json(t));
  json out = {{"phase", std::string(to_string(phase_))},
              {"since_stage", history_.empty() || history_.back().stage < 0
                                  ? json(nullptr)
                                  : json(history_.back().stage)},
              {"stale_stages", stale_run_},
              {"rewrites_last_hour", rewrites_within_hour(at)},
              {"history", std::move(history)}};
  if (phase_ == Phase::failed) out["retry_in_stages"] = retry_in_;
  return out;
}

std::shared_ptr<LifecycleTable::Entry> LifecycleTable::of(const std::string& pk) {
  std::lock_guard lk(mu_);
  auto& slot = entries_[pk];
  if (!slot) slot = std::make_shared<Entry>();
  return slot;
}

std::shared_ptr<LifecycleTable::Entry> LifecycleTable::find(const std::string& pk) const {
  std::lock_guard lk(mu_);
  auto it = entries_.find(pk);
  return it == entries_.end() ? nullptr : it->second;
}

void LifecycleTable::forget(const std::string& pk) {
  std::lock_guard lk(mu_);
  entries_.erase(pk);
}

void LifecycleTable::forget_all() {
  std::lock_guard lk(mu_);
  entries_.clear();
}

json LifecycleTable::describe(const std::string& pk) const {
  std::shared_ptr<Entry> e = find(pk);
  if (!e) return nullptr;
  std::lock_guard lk(e->mu);
  if (!e->lc.started()) return nullptr;
  return e->lc.to_json(ProgramLifecycle::Clock::now());
}

std::map<Phase, std::size_t> LifecycleTable::phases() const {
  std::vector<std::shared_ptr<Entry>> all;
  {
    std::lock_guard lk(mu_);
    for (const auto& [pk, e] : entries_)
      all.push_back(e);
  }
  std::map<Phase, std::size_t> out;
  for (const auto& e : all) {
    std::lock_guard lk(e->mu);
    if (e->lc.started()) ++out[e->lc.phase()];
  }
  return out;
}

} // namespace fdo::daemon
