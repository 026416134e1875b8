#include "fdo/daemon/guard.h"

#include "fdo/util/enum_names.h"
#include "fdo/util/log.h"

#include <algorithm>
#include <cstdio>

namespace fdo::daemon {

namespace ps = fdo::profile_store;

namespace {

constexpr EnumNames<VariantRole, 3> kRoleNames{{{{VariantRole::current, "current"},
                                                 {VariantRole::incumbent, "incumbent"},
                                                 {VariantRole::candidate, "candidate"}}}};

std::string short_digest(const std::string& d) {
  return d.substr(0, 16);
}

cache::ProfileRef profile_ref(const std::string& pk, std::int64_t version, ProfileDoc doc) {
  cache::ProfileRef ref;
  ref.pk = pk;
  ref.version = version;
  ref.digest = profile_digest(doc);
  ref.doc = std::make_shared<const ProfileDoc>(std::move(doc));
  return ref;
}

std::string trial_id_of(const Arms& a, const std::string& digest) {
  return describe(a.incumbent) + " vs " + describe(*a.candidate) + " @" + short_digest(digest);
}

// "v3 profiled O2" for the profiled build of version 3; the plain build has no version.
std::string named(const Variant& v, std::int64_t version) {
  return v.base == VariantBase::profiled ? "v" + std::to_string(version) + " " + describe(v)
                                         : describe(v);
}

std::string progress(const Trial& t, const TrialConfig& c) {
  TrialResult r = t.evaluate(c);
  std::string s = std::to_string(t.samples(Arm::candidate)) + "+" +
                  std::to_string(t.samples(Arm::incumbent)) + " stages";
  if (r.pairs > 0) s += ", candidate " + describe_ratio(r.ratio) + " so far";
  return s;
}

} // namespace

std::string describe(const Variant& v) {
  const Knobs& k = v.knobs;
  std::string s(to_string(v.base));
  s += k.size_level == 1 ? " Os" : k.size_level == 2 ? " Oz" : " O" + std::to_string(k.opt_level);
  if (!k.unroll) s += " -unroll";
  if (!k.vectorize) s += " -vectorize";
  if (k.inline_threshold) s += " inline=" + std::to_string(*k.inline_threshold);
  return s;
}

ProfileDoc variant_doc(const Variant& v, const ProfileDoc& current) {
  ProfileDoc doc;
  doc.knobs = v.knobs;
  if (v.base == VariantBase::plain) {
    doc.knobs.mode = CompileMode::plain;
    return doc;
  }
  doc.knobs.mode.reset();
  doc.functions = current.functions;
  doc.cs_functions = current.cs_functions;
  return doc;
}

std::optional<Variant> knob_variant(const Variant& from, int step) {
  Variant v = from;
  Knobs& k = v.knobs;
  switch (step) {
  case 0: // more optimisation (or back to O2 when the incumbent is O3)
    k.opt_level = from.knobs.opt_level >= 3 ? 2 : 3;
    break;
  case 1: // unrolling grows hot loops: it can cost i-cache
    k.unroll = !from.knobs.unroll;
    break;
  case 2:
    k.vectorize = !from.knobs.vectorize;
    break;
  case 3: // aggressive inlining
    k.inline_threshold = from.knobs.inline_threshold == 500 ? std::optional<int>() : 500;
    break;
  case 4: // conservative inlining
    k.inline_threshold = from.knobs.inline_threshold == 75 ? std::optional<int>() : 75;
    break;
  default:
    return std::nullopt;
  }
  return v;
}

Arms arms_of(const GuardRecord& record, const ProfileDoc& current,
             const std::string& current_digest, std::int64_t stages_seen,
             const GuardConfig& config) {
  Arms a;
  a.incumbent.base = record.incumbent_base.value_or(VariantBase::plain);
  a.incumbent.knobs = current.knobs;
  if (record.incumbent_base && !record.incumbent_knobs.is_null())
    if (auto k = knobs_from_json(record.incumbent_knobs)) a.incumbent.knobs = *k;
  a.incumbent.knobs.mode.reset();
  if (record.trialled_digest != current_digest) {
    if (!record.incumbent_base && stages_seen < config.min_stages) {
      a.incumbent.base = VariantBase::profiled;
      a.waiting = true;
      return a;
    }
    // A new profile. The previous profile's output cannot be an arm (its
    // counts are no longer current), so the new one is tried against the
    // plain build with the incumbent's knobs.
    a.incumbent.base = VariantBase::plain;
    a.candidate = Variant{VariantBase::profiled, a.incumbent.knobs};
    a.kind = TrialKind::profile;
    return a;
  }
  const int budget = std::min(config.tune_max_variants, kKnobVariants);
  if (stages_seen >= config.tune_min_stages && record.tuning_step < budget) {
    a.candidate = knob_variant(a.incumbent, record.tuning_step);
    a.kind = TrialKind::tuning;
  }
  return a;
}

std::string stage_shape(const std::string& entry, const PreparedCall& call) {
  std::string s = entry + "(";
  for (std::size_t i = 0; i < call.slots.size(); ++i) {
    if (i) s += ",";
    int b = i < call.buffer_of_param.size() ? call.buffer_of_param[i] : -1;
    if (b >= 0 && static_cast<std::size_t>(b) < call.buffers.size()) {
      const Buffer& buf = call.buffers[static_cast<std::size_t>(b)];
      s += std::string(to_string(buf.elem)) + "[" + std::to_string(buf.bytes.size()) + "B]";
    } else {
      char hex[20];
      std::snprintf(hex, sizeof hex, "%llx", static_cast<unsigned long long>(call.slots[i]));
      s += hex;
    }
  }
  return s + ")";
}

std::string_view to_string(VariantRole r) {
  return kRoleNames.name(r);
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

GuardCounters Guard::counters() const {
  std::lock_guard lk(counters_mu_);
  return counters_;
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
  p.pk = **pk;
  auto current = store_.current(p.pk);
  if (!current) {
    p.reason = "guard: profile read failed (" + current.error().describe() + ")";
    return p;
  }
  if (!*current) {
    p.reason = "no profile yet";
    return p;
  }
  const ps::StoredProfile& sp = **current;
  if (sp.pinned) {
    p.reason = "profile pinned: served as it is";
    return p;
  }
  if (sp.doc.knobs.mode) {
    p.reason =
        "the profile sets mode " + std::string(to_string(*sp.doc.knobs.mode)) + ": served as it is";
    return p;
  }
  if (choose_mode(&sp.doc) != CompileMode::optimized) {
    p.reason = "no counts in the profile yet";
    return p;
  }

  std::shared_ptr<KeyState> state = state_of(p.pk);
  std::lock_guard lk(state->mu);
  KeyState& st = *state;
  ++st.stages_seen;
  const std::string digest = profile_digest(sp.doc);
  Arms arms = arms_of(sp.doc.guard, sp.doc, digest, st.stages_seen, config);
  if (arms.waiting) {
    p.name = named(arms.incumbent, sp.version);
    p.reason = "guard: " + std::to_string(st.stages_seen) + " of " +
               std::to_string(config.min_stages) + " stages before the first trial";
    return p;
  }
  p.version = sp.version;
  p.current_digest = digest;
  auto serve = [&](VariantRole role, const Variant& v) {
    p.role = role;
    p.name = named(v, sp.version);
    p.variant = profile_ref(p.pk, sp.version, variant_doc(v, sp.doc));
  };
  if (!arms.candidate) {
    serve(VariantRole::incumbent, arms.incumbent);
    const auto& trials = sp.doc.guard.trials;
    p.reason = trials.empty() ? "incumbent" : "incumbent since: " + trials.back().summary;
    return p;
  }

  std::string id = trial_id_of(arms, digest);
  auto restart = [&] {
    st.trial = Trial();
    st.trial_id = id;
    st.shape = shape;
    st.since_sample = 0;
    st.arms = arms;
    std::lock_guard c(counters_mu_);
    ++counters_.trials_started;
  };
  if (st.trial_id != id) restart();
  if (st.shape != shape) {
    // The trial counts one shape. If that shape stopped coming, rebind the
    // trial to the shape that comes now rather than stall it.
    if (++st.since_sample <= 2 * static_cast<std::int64_t>(config.trial.max_pairs)) {
      serve(VariantRole::incumbent, arms.incumbent);
      p.reason = "on trial for another argument shape (" + st.shape.substr(0, 80) +
                 "): this stage is not comparable and runs the incumbent";
      return p;
    }
    restart();
  }
  ++st.since_sample;
  p.trial_id = id;
  const Arm arm = st.trial.next_arm();
  serve(arm == Arm::candidate ? VariantRole::candidate : VariantRole::incumbent,
        arm == Arm::candidate ? *arms.candidate : arms.incumbent);
  p.reason = std::string(arms.kind == TrialKind::profile ? "profile trial: " : "knob trial: ") +
             named(*arms.candidate, sp.version) + " against " + named(arms.incumbent, sp.version) +
             ", " + progress(st.trial, config.trial);
  return p;
}

GuardStage Guard::record(const StagePlan& plan, const std::string& served_digest,
                         std::uint64_t exec_ns, std::int64_t stage, const std::string& program,
                         std::int64_t owner, const GuardConfig& config) {
  GuardStage out;
  if (plan.trial_id.empty() || !plan.variant) return out;
  std::shared_ptr<KeyState> state = state_of(plan.pk);
  std::lock_guard lk(state->mu);
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
  st.trial.add(arm, static_cast<double>(exec_ns));
  out.counted = st.trial.samples(arm) > before;
  if (out.counted) {
    st.since_sample = 0;
    std::lock_guard c(counters_mu_);
    ++(arm == Arm::candidate ? counters_.candidate_stages : counters_.incumbent_stages);
  }
  TrialResult r = st.trial.evaluate(config.trial);
  if (r.verdict == Verdict::undecided) {
    out.note = "trial: " + progress(st.trial, config.trial);
    return out;
  }
  out.verdict = write_verdict(plan, *st.arms, r, stage, program, owner, out.note);
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
  if (out.verdict || out.note.find("changed during") != std::string::npos) {
    st.trial_id.clear();
    st.arms.reset();
  }
  return out;
}

std::optional<TrialRecord> Guard::write_verdict(const StagePlan& plan, const Arms& arms,
                                                const TrialResult& result, std::int64_t stage,
                                                const std::string& program, std::int64_t owner,
                                                std::string& note) {
  auto current = store_.current(plan.pk);
  if (!current || !*current) {
    note = "verdict not recorded (profile read failed): the next stage retries";
    std::lock_guard c(counters_mu_);
    ++counters_.verdict_write_failures;
    return std::nullopt;
  }
  const ps::StoredProfile& sp = **current;
  if (profile_digest(sp.doc) != plan.current_digest) {
    note = "the profile changed during the trial: its figures are dropped";
    return std::nullopt;
  }
  TrialRecord t;
  t.candidate = named(*arms.candidate, plan.version);
  t.incumbent = named(arms.incumbent, plan.version);
  t.verdict = result.verdict == Verdict::accepted   ? TrialVerdict::accepted
              : result.verdict == Verdict::rejected ? TrialVerdict::rejected
                                                    : TrialVerdict::no_difference;
  t.ratio = result.ratio;
  t.candidate_stages = result.pairs;
  t.incumbent_stages = result.pairs;
  t.early_stop = result.early_stop;
  t.profile_version = plan.version;
  t.summary = t.candidate + " " +
              (t.verdict == TrialVerdict::accepted   ? "accepted"
               : t.verdict == TrialVerdict::rejected ? "rejected"
                                                     : "not taken (no difference)") +
              ": " + describe_ratio(t.ratio) + " than " + t.incumbent + " over " +
              std::to_string(t.candidate_stages) + "+" + std::to_string(t.incumbent_stages) +
              " stages" + (t.early_stop ? " (early stop)" : "");

  ProfileDoc doc = sp.doc;
  GuardRecord& g = doc.guard;
  const Variant& winner = t.verdict == TrialVerdict::accepted ? *arms.candidate : arms.incumbent;
  g.incumbent_base = winner.base;
  g.incumbent_knobs = to_json(winner.knobs);
  if (arms.kind == TrialKind::profile) {
    g.trialled_digest = plan.current_digest;
    g.tuning_step = 0;
  } else {
    ++g.tuning_step;
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
    return std::nullopt;
  }
  note = t.summary + " (profile v" + std::to_string(*written) + ")";
  log::info("guard " + plan.pk.substr(0, 12) + ": " + t.summary);
  return t;
}

} // namespace fdo::daemon
