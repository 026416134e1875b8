// What the guard writes into the profile document (docs/guard.md): a
// running trial's samples (a checkpoint, and at a clean shutdown), and a
// finished trial's verdict with the incumbent it leaves. Each is a versioned
// store write over the version the trial ran under; a refused one is retried
// at a later stage.
#include "fdo/daemon/guard.h"
#include "fdo/util/log.h"
#include "guard_detail.h"

#include <algorithm>
#include <cmath>

namespace fdo::daemon {

namespace ps = fdo::profile_store;
using namespace guard_detail;

int Guard::save_running(const GuardConfig& config) {
  if (config.checkpoint_pairs <= 0) return 0;
  std::vector<std::pair<std::string, std::shared_ptr<KeyState>>> all;
  {
    std::lock_guard lk(states_mu_);
    all.assign(states_.begin(), states_.end());
  }
  int saved = 0;
  for (auto& [pk, state] : all) {
    std::lock_guard lk(state->mu);
    KeyState& st = *state;
    const std::size_t pairs =
        std::min(st.trial.samples(Arm::incumbent), st.trial.samples(Arm::candidate));
    if (st.trial_id.empty() || !st.arms || pairs <= st.saved_pairs) continue;
    std::string note;
    if (save_checkpoint(pk, st, st.last_stage, st.last_program, st.last_owner, note)) {
      ++saved;
      log::info("guard " + pk.substr(0, 12) + ": running trial saved at shutdown (" +
                std::to_string(pairs) + " pairs" + note + ")");
    }
  }
  return saved;
}

bool Guard::save_checkpoint(const std::string& pk, KeyState& st, std::int64_t stage,
                            const std::string& program, std::int64_t owner, std::string& note) {
  auto current = store_.current(pk);
  if (!current || !*current || digest_of(**current) != st.trial_digest) return false;
  const ps::StoredProfile& sp = **current;
  ProfileDoc doc = sp.doc;
  TrialCheckpoint saved;
  saved.id = st.trial_id;
  saved.shape = st.shape;
  saved.version = st.trial_version;
  for (Arm arm : {Arm::incumbent, Arm::candidate}) {
    std::vector<std::uint64_t>& to =
        arm == Arm::incumbent ? saved.incumbent_ns : saved.candidate_ns;
    for (double t : st.trial.times(arm)) {
      if (to.size() == TrialCheckpoint::kMaxSamples) break;
      to.push_back(std::max<std::uint64_t>(1, static_cast<std::uint64_t>(std::llround(t))));
    }
  }
  doc.guard.running = std::move(saved);
  ps::WriteInfo info;
  info.source = ps::WriteSource::feedback;
  info.reason = "guard: trial saved (" + progress(st.trial, TrialConfig{}) + ")";
  info.owner = owner;
  info.host = host_;
  info.stage = stage;
  info.program = program;
  // A refused save (another writer was first) costs nothing now: the trial
  // goes on in memory and the next save carries these samples too.
  auto written = store_.write(pk, sp.version, doc, info);
  if (!written) return false;
  note += "; saved in profile v" + std::to_string(*written);
  st.saved_pairs = std::min(st.trial.samples(Arm::incumbent), st.trial.samples(Arm::candidate));
  std::lock_guard c(counters_mu_);
  ++counters_.checkpoints;
  return true;
}

Guard::VerdictWrite Guard::write_verdict(const StagePlan& plan, const KeyState& st,
                                         const TrialResult& result, Arm kept, std::int64_t stage,
                                         const std::string& program, std::int64_t owner,
                                         std::string& note) {
  const Arms& arms = *st.arms;
  VerdictWrite out;
  auto current = store_.current(plan.pk);
  if (!current || !*current) {
    note = "verdict not recorded (profile read failed): the next stage retries";
    std::lock_guard c(counters_mu_);
    ++counters_.verdict_write_failures;
    return out;
  }
  const ps::StoredProfile& sp = **current;
  if (digest_of(sp) != plan.current_digest) {
    note = "the profile changed during the trial: its figures are dropped";
    out.ended = TrialEnd::abandoned;
    out.version = sp.version;
    return out;
  }
  TrialRecord t;
  t.candidate = named(*arms.candidate, st.trial_version);
  t.incumbent = named(arms.incumbent, st.trial_version);
  t.verdict = result.verdict == Verdict::accepted   ? TrialVerdict::accepted
              : result.verdict == Verdict::rejected ? TrialVerdict::rejected
                                                    : TrialVerdict::no_difference;
  t.ratio = result.ratio;
  t.candidate_stages = result.pairs;
  t.incumbent_stages = result.pairs;
  t.early_stop = result.early_stop;
  t.profile_version = st.trial_version;
  t.summary = t.candidate + " " +
              (t.verdict == TrialVerdict::accepted   ? "accepted"
               : t.verdict == TrialVerdict::rejected ? "rejected"
               : kept == Arm::candidate              ? "kept (no difference, faster median)"
                                                     : "not taken (no difference)") +
              ": " + describe_ratio(t.ratio) + " than " + t.incumbent + " over " +
              std::to_string(t.candidate_stages) + "+" + std::to_string(t.incumbent_stages) +
              " stages" + (t.early_stop ? " (early stop)" : "");

  ProfileDoc doc = sp.doc;
  GuardRecord& g = doc.guard;
  const bool kept_candidate = kept == Arm::candidate;
  const Variant& winner = kept_candidate ? *arms.candidate : arms.incumbent;
  g.incumbent_base = winner.base;
  g.incumbent_knobs = variant_knobs_json(winner);
  // A profiled incumbent keeps the version of its counts, so that the next
  // profile is tried against it (and it stays servable) after rewrites.
  g.incumbent_version = winner.base == VariantBase::profiled
                            ? (winner.version ? winner.version : st.trial_version)
                            : 0;
  g.incumbent_digest = kept_candidate ? st.candidate_digest : st.incumbent_digest;
  g.running.reset();
  if (arms.kind == TrialKind::profile) {
    g.trialled_digest = plan.current_digest;
    g.tuning_step = 0;
  } else {
    // Past the candidate's step (steps that did not apply were passed over).
    g.tuning_step = arms.step + 1;
  }
  g.trials.push_back(t);
  while (g.trials.size() > GuardRecord::kTrialsKept)
    g.trials.erase(g.trials.begin());

  ps::WriteInfo info;
  info.source = ps::WriteSource::feedback;
  info.reason = "guard: " + t.summary;
  info.owner = owner;
  info.host = host_;
  info.stage = stage;
  info.program = program;
  auto written = store_.write(plan.pk, sp.version, doc, info);
  if (!written) {
    note = "verdict not recorded (" + written.error().describe() + "): the next stage retries";
    std::lock_guard c(counters_mu_);
    ++counters_.verdict_write_failures;
    return out;
  }
  note = t.summary + " (profile v" + std::to_string(*written) + ")";
  log::info("guard " + plan.pk.substr(0, 12) + ": " + t.summary);
  out.ended = t.verdict == TrialVerdict::accepted   ? TrialEnd::accepted
              : t.verdict == TrialVerdict::rejected ? TrialEnd::rejected
                                                    : TrialEnd::no_difference;
  out.version = *written;
  out.record = std::move(t);
  return out;
}

} // namespace fdo::daemon
