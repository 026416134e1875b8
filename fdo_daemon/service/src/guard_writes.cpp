// What the guard writes into the profile document (docs/guard.md): a
// running trial's samples (a checkpoint, and at a clean shutdown), and a
// finished trial's verdict with the incumbent it leaves. Each is a versioned
// store write over the version the trial ran under; a refused one is retried
// at a later stage. No lock is held while the store reads or writes: what to
// write is taken under the key's lock, written after it is released, and the
// outcome applied under it again (guard.h, "The guard's writes").
#include "fdo/daemon/guard.h"
#include "fdo/util/log.h"
#include "guard_detail.h"

#include <algorithm>
#include <cmath>

namespace fdo::daemon {

namespace ps = fdo::profile_store;
using namespace guard_detail;

profile_store::WriteInfo Guard::write_info(std::string reason, std::int64_t stage,
                                           const std::string& program, std::int64_t owner) const {
  ps::WriteInfo info;
  info.source = ps::WriteSource::feedback;
  info.reason = std::move(reason);
  info.owner = owner;
  info.host = host_;
  info.stage = stage;
  info.program = program;
  return info;
}

int Guard::save_running(const GuardConfig& config) {
  if (config.checkpoint_pairs <= 0) return 0;
  std::vector<std::pair<std::string, std::shared_ptr<KeyState>>> all;
  {
    std::lock_guard lk(states_mu_);
    all.assign(states_.begin(), states_.end());
  }
  int saved = 0;
  for (auto& [pk, state] : all) {
    std::unique_lock lk(state->mu);
    KeyState& st = *state;
    auto w = prepare_checkpoint(pk, st, st.last_stage, st.last_program, st.last_owner);
    if (!w) continue;
    std::string note;
    if (save_checkpoint(lk, st, *w, note)) {
      ++saved;
      log::info("guard " + pk.substr(0, 12) + ": running trial saved at shutdown (" +
                std::to_string(w->pairs) + " pairs" + note + ")");
    }
  }
  return saved;
}

std::optional<Guard::CheckpointWrite> Guard::prepare_checkpoint(const std::string& pk, KeyState& st,
                                                                std::int64_t stage,
                                                                const std::string& program,
                                                                std::int64_t owner) {
  const std::size_t pairs =
      std::min(st.trial.samples(Arm::incumbent), st.trial.samples(Arm::candidate));
  if (st.trial_id.empty() || !st.arms || pairs <= st.saved_pairs || st.write_in_flight)
    return std::nullopt;
  CheckpointWrite w;
  w.pk = pk;
  w.trial_id = st.trial_id;
  w.trial_digest = st.trial_digest;
  w.pairs = pairs;
  w.saved.id = st.trial_id;
  w.saved.shape = st.shape;
  w.saved.version = st.trial_version;
  for (Arm arm : {Arm::incumbent, Arm::candidate}) {
    std::vector<std::uint64_t>& to =
        arm == Arm::incumbent ? w.saved.incumbent_ns : w.saved.candidate_ns;
    for (double t : st.trial.times(arm)) {
      if (to.size() == TrialCheckpoint::kMaxSamples) break;
      to.push_back(std::max<std::uint64_t>(1, static_cast<std::uint64_t>(std::llround(t))));
    }
  }
  w.info = write_info("guard: trial saved (" + progress(st.trial, TrialConfig{}) + ")", stage,
                      program, owner);
  st.write_in_flight = true;
  return w;
}

bool Guard::write_checkpoint(const CheckpointWrite& w, std::string& note) {
  auto current = store_.current(w.pk);
  if (!current || !*current || digest_of(**current) != w.trial_digest) return false;
  const ps::StoredProfile& sp = **current;
  ProfileDoc doc = sp.doc;
  doc.guard.running = w.saved;
  // A refused save (another writer was first) costs nothing now: the trial
  // goes on in memory and the next save carries these samples too.
  auto written = store_.write(w.pk, sp.version, doc, w.info);
  if (!written) return false;
  note += "; saved in profile v" + std::to_string(*written);
  return true;
}

void Guard::apply_checkpoint(KeyState& st, const CheckpointWrite& w, bool written) {
  st.write_in_flight = false;
  if (!written) return;
  if (st.trial_id == w.trial_id) st.saved_pairs = std::max(st.saved_pairs, w.pairs);
  std::lock_guard c(counters_mu_);
  ++counters_.checkpoints;
}

bool Guard::save_checkpoint(std::unique_lock<std::mutex>& lk, KeyState& st,
                            const CheckpointWrite& w, std::string& note) {
  lk.unlock();
  const bool written = write_checkpoint(w, note);
  lk.lock();
  apply_checkpoint(st, w, written);
  return written;
}

Guard::VerdictPrep Guard::prepare_verdict(const StagePlan& plan, KeyState& st,
                                          const TrialResult& result, Arm kept, std::int64_t stage,
                                          const std::string& program, std::int64_t owner) {
  const Arms& arms = *st.arms;
  VerdictPrep p;
  p.pk = plan.pk;
  p.trial_id = st.trial_id;
  p.current_digest = plan.current_digest;
  p.kept = kept;
  p.kind = arms.kind;
  TrialRecord& t = p.record;
  t.candidate = named(*arms.candidate, st.trial_version);
  t.incumbent = named(arms.incumbent, st.trial_version);
  t.verdict = result.verdict == Verdict::accepted   ? TrialVerdict::accepted
              : result.verdict == Verdict::rejected ? TrialVerdict::rejected
                                                    : TrialVerdict::no_difference;
  t.ratio = result.ratio;
  t.candidate_stages = result.pairs;
  t.incumbent_stages = result.pairs;
  t.early_stop = false; // the sequential test has no early stop (records before it may)
  t.profile_version = st.trial_version;
  t.summary = t.candidate + " " +
              (t.verdict == TrialVerdict::accepted   ? "accepted"
               : t.verdict == TrialVerdict::rejected ? "rejected"
                                                     : "not taken (no difference)") +
              ": " + describe_ratio(t.ratio) + " than " + t.incumbent + " over " +
              std::to_string(t.candidate_stages) + "+" + std::to_string(t.incumbent_stages) +
              " stages";

  const bool kept_candidate = kept == Arm::candidate;
  const Variant& winner = kept_candidate ? *arms.candidate : arms.incumbent;
  p.base = winner.base;
  p.knobs = variant_knobs_json(winner);
  // A profiled incumbent keeps the version of its counts, so that the next
  // profile is tried against it (and it stays servable) after rewrites.
  p.incumbent_version = winner.base == VariantBase::profiled
                            ? (winner.version ? winner.version : st.trial_version)
                            : 0;
  p.incumbent_digest = kept_candidate ? st.candidate_digest : st.incumbent_digest;
  // Past the candidate's step (steps that did not apply were passed over).
  p.next_tuning_step = arms.step + 1;

  p.info = write_info("guard: " + t.summary, stage, program, owner);
  st.write_in_flight = true;
  return p;
}

Guard::VerdictWrite Guard::write_verdict(const VerdictPrep& p, std::string& note) {
  VerdictWrite out;
  auto current = store_.current(p.pk);
  if (!current || !*current) {
    note = "verdict not recorded (profile read failed): the next stage retries";
    std::lock_guard c(counters_mu_);
    ++counters_.verdict_write_failures;
    return out;
  }
  const ps::StoredProfile& sp = **current;
  if (digest_of(sp) != p.current_digest) {
    note = "the profile changed during the trial: its figures are dropped";
    out.ended = TrialEnd::abandoned;
    out.version = sp.version;
    return out;
  }
  const TrialRecord& t = p.record;
  ProfileDoc doc = sp.doc;
  GuardRecord& g = doc.guard;
  g.incumbent_base = p.base;
  g.incumbent_knobs = p.knobs;
  g.incumbent_version = p.incumbent_version;
  g.incumbent_digest = p.incumbent_digest;
  g.running.reset();
  if (p.kind == TrialKind::profile) {
    g.trialled_digest = p.current_digest;
    g.tuning_step = 0;
  } else {
    g.tuning_step = p.next_tuning_step;
  }
  g.trials.push_back(t);
  while (g.trials.size() > GuardRecord::kTrialsKept)
    g.trials.erase(g.trials.begin());

  auto written = store_.write(p.pk, sp.version, doc, p.info);
  if (!written) {
    note = "verdict not recorded (" + written.error().describe() + "): the next stage retries";
    std::lock_guard c(counters_mu_);
    ++counters_.verdict_write_failures;
    return out;
  }
  note = t.summary + " (profile v" + std::to_string(*written) + ")";
  log::info("guard " + p.pk.substr(0, 12) + ": " + t.summary);
  out.ended = t.verdict == TrialVerdict::accepted   ? TrialEnd::accepted
              : t.verdict == TrialVerdict::rejected ? TrialEnd::rejected
                                                    : TrialEnd::no_difference;
  out.version = *written;
  out.record = t;
  return out;
}

} // namespace fdo::daemon
