#include "fdo/daemon/guard.h"

#include "adapters.h"
#include "fdo/util/enum_names.h"
#include "fdo/util/log.h"
#include "guard_detail.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace fdo::daemon {

namespace ps = fdo::profile_store;
using namespace guard_detail;

namespace {

constexpr EnumNames<VariantRole, 3> kRoleNames{{{{VariantRole::current, "current"},
                                                 {VariantRole::incumbent, "incumbent"},
                                                 {VariantRole::candidate, "candidate"}}}};

// Builds asked for ahead of need that a key remembers (a handful per profile version).
constexpr std::size_t kAheadKept = 32;

std::string short_digest(const std::string& d) {
  return d.substr(0, 16);
}

// A variant as the trial id names it: with the version of an earlier
// profile's counts when it has one.
std::string id_name(const Variant& v) {
  return (v.version ? "v" + std::to_string(v.version) + " " : std::string()) + describe(v);
}

// Samples on one clock are never compared with the other's: the id names a
// CPU-time trial's clock. " blocks": the trial runs randomized blocks
// (trial.h); a checkpoint saved before them, in the fixed I C C I order,
// does not match and its trial starts over.
std::string trial_id_of(const Arms& a, const std::string& digest, GuardClock clock) {
  return id_name(a.incumbent) + " vs " + id_name(*a.candidate) + " @" + short_digest(digest) +
         " blocks" + (clock == GuardClock::cpu ? " cpu" : "");
}

// Why the guard leaves this profile alone (it is served as it is); empty: guarded.
std::string not_guarded(const ps::StoredProfile& sp) {
  if (sp.pinned) return "profile pinned: served as it is";
  if (sp.doc.knobs.mode)
    return "the profile sets mode " + std::string(to_string(*sp.doc.knobs.mode)) +
           ": served as it is";
  if (choose_mode(&sp.doc) != CompileMode::optimized) return "no counts in the profile yet";
  return {};
}

} // namespace

namespace guard_detail {

std::string digest_of(const ps::StoredProfile& sp) {
  return sp.digest.empty() ? profile_digest(sp.doc) : sp.digest;
}

std::string named(const Variant& v, std::int64_t version) {
  return v.base == VariantBase::profiled
             ? "v" + std::to_string(v.version ? v.version : version) + " " + describe(v)
             : describe(v);
}

std::string progress(const Trial& t, const TrialConfig& c) {
  TrialResult r = t.evaluate(c);
  std::string s = std::to_string(t.samples(Arm::candidate)) + "+" +
                  std::to_string(t.samples(Arm::incumbent)) + " stages";
  if (r.pairs > 0) s += ", candidate " + describe_ratio(r.ratio) + " so far";
  return s;
}

} // namespace guard_detail

std::string_view to_string(VariantRole r) {
  return kRoleNames.name(r);
}

cache::ProfileRef variant_ref(const std::string& pk, std::int64_t version, const Variant& v,
                              const ProfileDoc& current) {
  return profile_ref(pk, version, variant_doc(v, current));
}

Variant plain_variant(const ProfileDoc* current) {
  Variant v;
  v.base = VariantBase::plain;
  if (current != nullptr) {
    v.knobs = current->knobs;
    v.knobs.mode.reset();
  }
  return v;
}

std::optional<std::uint64_t> time_on(GuardClock clock, const StageTimes& times) {
  if (clock == GuardClock::wall) return times.wall_ns;
  return times.cpu_ns;
}

Guard::Guard(cache::KeyStore& keys, FeedbackStore& store, std::string host)
    : keys_(keys), store_(store), host_(std::move(host)) {}

std::shared_ptr<Guard::KeyState> Guard::state_of(const std::string& pk) {
  std::lock_guard lk(states_mu_);
  auto& slot = states_[pk];
  if (!slot) slot = std::make_shared<KeyState>();
  return slot;
}

void Guard::forget(const std::string& pk) {
  std::lock_guard lk(states_mu_);
  states_.erase(pk);
}

void Guard::forget_all() {
  std::lock_guard lk(states_mu_);
  states_.clear();
}

GuardCounters Guard::counters() const {
  std::lock_guard lk(counters_mu_);
  return counters_;
}

cache::ProfileRef Guard::built_ref(KeyState& st, const std::string& pk, std::int64_t version,
                                   const Variant& v, const ProfileDoc& from,
                                   const std::string& from_digest) {
  cache::ProfileRef ref;
  ref.pk = pk;
  ref.version = version;
  auto same = [&](const KeyState::Built& b) {
    return b.variant == v && b.from_digest == from_digest;
  };
  auto it = std::find_if(st.built.begin(), st.built.end(), same);
  if (it == st.built.end()) {
    if (st.built.size() >= kBuiltKept) st.built.erase(st.built.begin());
    ProfileDoc doc = variant_doc(v, from);
    std::string digest = profile_digest(doc);
    st.built.push_back(
        {from_digest, v, std::move(digest), std::make_shared<const ProfileDoc>(std::move(doc))});
    it = std::prev(st.built.end());
  }
  ref.digest = it->digest;
  ref.doc = it->doc;
  return ref;
}

bool Guard::needs_source_read(KeyState& st, const std::string& pk, const ProfileDoc& current,
                              const std::string& current_digest) {
  const GuardRecord& record = current.guard;
  if (record.incumbent_base != VariantBase::profiled || record.incumbent_version == 0) return false;
  const Variant v = recorded_incumbent(record, current);
  if (built_ref(st, pk, 0, v, current, current_digest).digest == record.incumbent_digest)
    return false;
  return !st.source || st.source_version != record.incumbent_version;
}

std::unique_lock<std::mutex> Guard::lock_with_source(KeyState& st, const std::string& pk,
                                                     const ProfileDoc& current,
                                                     const std::string& current_digest,
                                                     VersionRead& read) {
  std::unique_lock lk(st.mu);
  // Once per incumbent version (kept in st.source afterwards).
  while (!read && needs_source_read(st, pk, current, current_digest)) {
    lk.unlock();
    read = store_.version(pk, current.guard.incumbent_version);
    lk.lock();
  }
  return lk;
}

Guard::Source Guard::incumbent_source(KeyState& st, const std::string& pk, GuardRecord& record,
                                      const ProfileDoc& current, const std::string& current_digest,
                                      VersionRead& read) {
  Source out;
  if (record.incumbent_base != VariantBase::profiled || record.incumbent_version == 0) return out;
  const Variant v = recorded_incumbent(record, current);
  // After the verdict that made it the incumbent the profile kept its counts
  // (a verdict or a checkpoint rewrites bookkeeping only): no read needed.
  if (built_ref(st, pk, 0, v, current, current_digest).digest == record.incumbent_digest) {
    out.doc = &current;
    out.digest = current_digest;
    return out;
  }
  if (!st.source || st.source_version != record.incumbent_version) {
    st.source.reset();
    // lock_with_source read it, in this same hold of the key's lock, since
    // the check above is needs_source_read's. Read here only by a caller
    // that did not go through lock_with_source.
    if (!read) read = store_.version(pk, record.incumbent_version);
    auto& got = *read;
    const std::string which =
        "the incumbent's profile v" + std::to_string(record.incumbent_version);
    if (!got)
      out.fallback = which + " is unreadable (" + got.error().describe() + ")";
    else if (!*got)
      out.fallback = which + " is no longer in the history";
    else if (built_ref(st, pk, 0, v, (*got)->doc, digest_of(**got)).digest !=
             record.incumbent_digest)
      out.fallback = which + " does not give the recorded build";
    if (!out.fallback.empty()) {
      // That build cannot be made again: the plain build takes its place and
      // the current profile is tried against it afresh.
      record.incumbent_base = VariantBase::plain;
      record.incumbent_version = 0;
      record.trialled_digest.clear();
      return out;
    }
    st.source_digest = digest_of(**got);
    st.source = std::make_shared<const ProfileDoc>(std::move((*got)->doc));
    st.source_version = record.incumbent_version;
  }
  out.doc = st.source.get();
  out.digest = st.source_digest;
  return out;
}

std::optional<cache::ProfileRef> Guard::request_ahead(KeyState& st, const std::string& pk,
                                                      const ps::StoredProfile& sp,
                                                      const Source& source, const Arms& arms) {
  auto once = [&](cache::ProfileRef ref) -> std::optional<cache::ProfileRef> {
    if (st.ahead_digests.contains(ref.digest)) return std::nullopt;
    // A handful per profile version; bounded so a long-lived key cannot grow it.
    if (st.ahead_digests.size() >= kAheadKept) st.ahead_digests.clear();
    st.ahead_digests.insert(ref.digest);
    return ref;
  };
  // The plain build is an arm of the first trial and of every later profile
  // trial while it stays the incumbent.
  if (arms.waiting || arms.incumbent.base == VariantBase::plain) {
    Variant plain = arms.incumbent;
    plain.base = VariantBase::plain;
    plain.version = 0;
    if (auto ref = once(built_ref(st, pk, sp.version, plain, sp.doc, digest_of(sp)))) return ref;
  }
  // The next knob variant, so that its trial's first stages run it.
  if (arms.next) {
    const bool earlier = arms.next->version != 0 && source.doc;
    return once(built_ref(st, pk, sp.version, *arms.next, earlier ? *source.doc : sp.doc,
                          earlier ? source.digest : digest_of(sp)));
  }
  return std::nullopt;
}

std::optional<cache::ProfileRef> Guard::ahead(const std::string& ik, const GuardConfig& config) {
  if (config.mode == GuardMode::off) return std::nullopt;
  auto pk = keys_.lookup_profile_key(ik);
  if (!pk || !*pk) return std::nullopt;
  auto current = store_.current(**pk);
  if (!current || !*current || !not_guarded(**current).empty()) return std::nullopt;
  const ps::StoredProfile& sp = **current;
  std::shared_ptr<KeyState> state = state_of(**pk);
  const std::string digest = digest_of(sp);
  VersionRead read;
  std::unique_lock lk = lock_with_source(*state, **pk, sp.doc, digest, read);
  GuardRecord record = sp.doc.guard;
  const Source source = incumbent_source(*state, **pk, record, sp.doc, digest, read);
  Arms arms = arms_of(record, sp.doc, digest, state->stages_seen, config);
  return request_ahead(*state, **pk, sp, source, arms);
}

StagePlan Guard::plan(const std::string& ik, const std::string& shape, const GuardConfig& config) {
  StagePlan p;
  if (config.mode == GuardMode::off) {
    p.reason = "guard off";
    return p;
  }
  auto pk = keys_.lookup_profile_key(ik);
  if (!pk || !*pk) {
    p.reason = pk ? "first stage of the program" : "guard: " + pk.error().describe();
    return p;
  }
  auto current = store_.current(**pk);
  if (!current) {
    p.pk = **pk;
    p.reason = "guard: profile read failed (" + current.error().describe() + ")";
    return p;
  }
  return plan(**pk, *current ? &**current : nullptr, shape, config);
}

StagePlan Guard::plan(const std::string& pk, const ps::StoredProfile* current,
                      const std::string& shape, const GuardConfig& config) {
  StagePlan p;
  p.pk = pk;
  if (config.mode == GuardMode::off) {
    p.reason = "guard off";
    return p;
  }
  if (current == nullptr) {
    p.reason = "no profile yet";
    return p;
  }
  const ps::StoredProfile& sp = *current;
  if (std::string why = not_guarded(sp); !why.empty()) {
    p.reason = std::move(why);
    return p;
  }

  std::shared_ptr<KeyState> state = state_of(p.pk);
  const std::string digest = digest_of(sp);
  VersionRead read;
  std::unique_lock lk = lock_with_source(*state, p.pk, sp.doc, digest, read);
  KeyState& st = *state;
  ++st.stages_seen;
  // Variants of profiles this key no longer serves from go.
  std::erase_if(st.built, [&](const KeyState::Built& b) {
    return b.from_digest != digest && b.from_digest != st.source_digest;
  });
  GuardRecord record = sp.doc.guard;
  const Source source = incumbent_source(st, p.pk, record, sp.doc, digest, read);
  Arms arms = arms_of(record, sp.doc, digest, st.stages_seen, config);
  p.ahead = request_ahead(st, p.pk, sp, source, arms);
  const std::string fallback =
      source.fallback.empty() ? "" : " (" + source.fallback + ": the plain build stands in)";
  if (arms.waiting) {
    p.kind = GuardPlanKind::waiting;
    p.name = named(arms.incumbent, sp.version);
    p.reason = "guard: " + std::to_string(st.stages_seen) + " of " +
               std::to_string(config.min_stages) + " stages before the first trial";
    return p;
  }
  p.version = sp.version;
  p.current_digest = digest;
  auto ref = [&](const Variant& v) {
    const bool earlier = v.version != 0 && source.doc;
    return built_ref(st, p.pk, sp.version, v, earlier ? *source.doc : sp.doc,
                     earlier ? source.digest : digest);
  };
  auto serve = [&](VariantRole role, const Variant& v, std::int64_t version) {
    p.role = role;
    p.name = named(v, version);
    p.variant = ref(v);
  };
  if (!arms.candidate) {
    p.kind = GuardPlanKind::serving;
    serve(VariantRole::incumbent, arms.incumbent, sp.version);
    const auto& trials = sp.doc.guard.trials;
    p.reason =
        (trials.empty() ? "incumbent" : "incumbent since: " + trials.back().summary) + fallback;
    return p;
  }

  p.kind = GuardPlanKind::trial;
  std::string id = trial_id_of(arms, digest, config.clock);
  auto restart = [&] {
    st.trial = Trial(trial_seed(p.pk, id, sp.version));
    st.trial_id = id;
    st.shape = shape;
    st.since_sample = 0;
    st.arms = arms;
    st.trial_version = sp.version;
    st.trial_digest = digest;
    st.saved_pairs = 0;
    st.incumbent_digest = ref(arms.incumbent).digest;
    st.candidate_digest = ref(*arms.candidate).digest;
  };
  if (st.trial_id != id) {
    restart();
    // A trial this daemon (or an earlier one) saved: continue it.
    const std::optional<TrialCheckpoint>& saved = sp.doc.guard.running;
    std::lock_guard c(counters_mu_);
    if (saved && saved->id == id) {
      if (saved->version > 0) st.trial = Trial(trial_seed(p.pk, id, saved->version));
      for (std::uint64_t ns : saved->incumbent_ns)
        st.trial.add(Arm::incumbent, static_cast<double>(ns));
      for (std::uint64_t ns : saved->candidate_ns)
        st.trial.add(Arm::candidate, static_cast<double>(ns));
      st.shape = saved->shape;
      if (saved->version > 0) st.trial_version = saved->version;
      st.saved_pairs = std::min(st.trial.samples(Arm::incumbent), st.trial.samples(Arm::candidate));
      ++counters_.resumed;
    } else {
      ++counters_.trials_started;
    }
  }
  if (st.shape != shape) {
    // The trial counts one shape. If that shape stopped coming, rebind the
    // trial to the shape that comes now rather than stall it.
    if (++st.since_sample <= 2 * static_cast<std::int64_t>(config.trial.max_pairs)) {
      p.kind = GuardPlanKind::other_shape;
      serve(VariantRole::incumbent, arms.incumbent, st.trial_version);
      p.reason = "on trial for another argument shape (" + st.shape.substr(0, 80) +
                 "): this stage is not comparable and runs the incumbent";
      return p;
    }
    restart();
    std::lock_guard c(counters_mu_);
    ++counters_.trials_started;
  }
  ++st.since_sample;
  p.trial_id = id;
  p.clock = config.clock;
  p.trial_version = st.trial_version;
  const Arm arm = st.trial.next_arm();
  serve(arm == Arm::candidate ? VariantRole::candidate : VariantRole::incumbent,
        arm == Arm::candidate ? *arms.candidate : arms.incumbent, st.trial_version);
  p.reason = std::string(arms.kind == TrialKind::profile ? "profile trial: " : "knob trial: ") +
             named(*arms.candidate, st.trial_version) + " against " +
             named(arms.incumbent, st.trial_version) + ", " + progress(st.trial, config.trial) +
             fallback;
  return p;
}

GuardStage Guard::record(const StagePlan& plan, const std::string& served_digest,
                         const StageTimes& times, std::int64_t stage, const std::string& program,
                         std::int64_t owner, const GuardConfig& config) {
  GuardStage out;
  if (plan.trial_id.empty() || !plan.variant) return out;
  const std::optional<std::uint64_t> time = time_on(plan.clock, times);
  if (!time) {
    out.note = "the stage has no " + std::string(to_string(plan.clock)) +
               " time (guard.clock): not counted";
    return out;
  }
  std::shared_ptr<KeyState> state = state_of(plan.pk);
  std::unique_lock lk(state->mu);
  KeyState& st = *state;
  if (st.trial_id != plan.trial_id || !st.arms) {
    out.note = "the trial ended meanwhile: not counted";
    return out;
  }
  if (served_digest != plan.variant->digest) {
    out.note = "the planned variant is still compiling: this stage ran another and is not counted";
    return out;
  }
  const Arm arm = plan.role == VariantRole::candidate ? Arm::candidate : Arm::incumbent;
  const std::size_t before = st.trial.samples(arm);
  st.trial.add(arm, static_cast<double>(*time));
  out.counted = st.trial.samples(arm) > before;
  if (out.counted) {
    st.since_sample = 0;
    st.last_stage = stage;
    st.last_owner = owner;
    st.last_program = program;
    std::lock_guard c(counters_mu_);
    ++(arm == Arm::candidate ? counters_.candidate_stages : counters_.incumbent_stages);
  }
  TrialResult r = st.trial.evaluate(config.trial);
  if (r.verdict == Verdict::undecided) {
    out.note = "trial: " + progress(st.trial, config.trial);
    const std::size_t pairs = st.trial.samples(Arm::incumbent);
    if (out.counted && config.checkpoint_pairs > 0 && pairs == st.trial.samples(Arm::candidate) &&
        pairs % static_cast<std::size_t>(config.checkpoint_pairs) == 0)
      if (auto w = prepare_checkpoint(plan.pk, st, stage, program, owner))
        save_checkpoint(lk, st, *w, out.note);
    return out;
  }
  if (st.write_in_flight) {
    // Another stage of this key is writing (this verdict, or a checkpoint):
    // its outcome decides; this stage only counted.
    out.note = "trial decided: its verdict is being recorded";
    return out;
  }
  VerdictPrep prep = prepare_verdict(plan, st, r, kept_arm(r), stage, program, owner);
  lk.unlock();
  VerdictWrite written = write_verdict(prep, out.note);
  lk.lock();
  st.write_in_flight = false;
  out.verdict = std::move(written.record);
  out.ended = written.ended;
  out.version = written.version;
  if (out.verdict) {
    std::lock_guard c(counters_mu_);
    switch (out.verdict->verdict) {
    case TrialVerdict::accepted:
      ++counters_.accepted;
      counters_.losing_stages += st.trial.samples(Arm::incumbent);
      break;
    case TrialVerdict::rejected:
      ++counters_.rejected;
      counters_.losing_stages += st.trial.samples(Arm::candidate);
      break;
    case TrialVerdict::no_difference:
      ++counters_.no_difference;
      break;
    }
  }
  // Only the trial the verdict was written for ends (the state may have
  // moved on while the write was out).
  if (out.ended && st.trial_id == prep.trial_id) {
    st.trial_id.clear();
    st.arms.reset();
  }
  return out;
}

} // namespace fdo::daemon
