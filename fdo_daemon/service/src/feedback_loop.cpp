#include "fdo/daemon/feedback_loop.h"

#include "fdo/daemon/icache_layout.h"
#include "fdo/util/log.h"
#include "fdo/util/log_record.h"

#include <algorithm>

namespace fdo::daemon {

namespace ps = fdo::profile_store;
using nlohmann::json;

namespace {
// "evidence from hosts a (12 stages), b (3 stages)": who contributed to a version.
std::string hosts_phrase(const std::map<std::string, std::uint64_t>& hosts) {
  std::string out = hosts.size() == 1 ? "evidence from host " : "evidence from hosts ";
  bool first = true;
  for (const auto& [host, stages] : hosts) {
    if (!first) out += ", ";
    first = false;
    out += (host.empty() ? std::string("(unnamed)") : host) + " (" + std::to_string(stages) +
           (stages == 1 ? " stage)" : " stages)");
  }
  return out;
}

// Adds `counts` into `sum` element-wise (saturating), growing it as needed.
void add_counts(std::vector<std::uint64_t>& sum, const std::vector<std::uint64_t>& counts) {
  if (sum.size() < counts.size()) sum.resize(counts.size(), 0);
  for (std::size_t i = 0; i < counts.size(); ++i)
    sum[i] = counts[i] > UINT64_MAX - sum[i] ? UINT64_MAX : sum[i] + counts[i];
}

} // namespace

StageFeedback stage_feedback_from(const StageObservation& obs,
                                  const std::map<std::string, std::uint64_t>& cfg_hashes) {
  StageFeedback fb;
  fb.exec_ns = obs.exec_ns;
  if (obs.measurement) {
    fb.cpu_ns = obs.measurement->process_cpu_ns;
    for (const perf::EventReading& e : obs.measurement->events)
      if (e.value) fb.counters[e.name] = *e.value;
  }
  for (const auto& [fn, counts] : obs.counts) {
    auto h = cfg_hashes.find(fn);
    if (h == cfg_hashes.end()) continue;
    FunctionCounts fc{h->second, counts};
    if (auto v = obs.values.find(fn); v != obs.values.end()) {
      fc.indirect_calls = v->second.indirect_calls;
      fc.memop_sizes = v->second.memop_sizes;
      fc.arg_values = v->second.arguments;
    }
    fb.counts.emplace(fn, std::move(fc));
  }
  return fb;
}

void observe(StageReport& report, const StageObservation& obs,
             const std::set<std::string>* known_functions) {
  const StageMetadata* meta = report.metadata.get();
  const std::map<std::string, std::uint64_t> no_hashes; // empty: no allocation
  const PgoNames no_names;
  report.feedback = stage_feedback_from(obs, meta ? meta->cfg_hashes : no_hashes);
  report.samples = stage_samples_from(obs, meta ? meta->pgo_names : no_names, known_functions);
  report.blocks = obs.samples ? obs.samples->tallies : BlockTallies{};
}

FeedbackLoop::FeedbackLoop(FeedbackStore& store, std::string host, LifecycleTable* lifecycles)
    : store_(store), host_(std::move(host)),
      own_lifecycles_(lifecycles ? nullptr : std::make_unique<LifecycleTable>()),
      lifecycles_(lifecycles ? *lifecycles : *own_lifecycles_) {}

std::shared_ptr<FeedbackLoop::KeyState> FeedbackLoop::state_of(const std::string& pk) {
  std::lock_guard lk(states_mu_);
  auto& slot = states_[pk];
  if (!slot) slot = std::make_shared<KeyState>();
  return slot;
}

void FeedbackLoop::forget(const std::string& pk) {
  {
    std::lock_guard lk(states_mu_);
    states_.erase(pk);
  }
  std::lock_guard lk(pending_mu_);
  std::erase_if(flushed_since_snapshot_, [&](const auto& e) { return e.first.first == pk; });
}

void FeedbackLoop::forget_all() {
  {
    std::lock_guard lk(states_mu_);
    states_.clear();
  }
  std::lock_guard lk(pending_mu_);
  flushed_since_snapshot_.clear();
}

std::size_t FeedbackLoop::pending_rows() const {
  std::lock_guard lk(pending_mu_);
  return pending_.rows.size();
}

namespace {
// Adds `r` into `sum`, a row of the same (pk, version).
// Both maps are sorted by name: each name's place is looked for from the
// previous one's (a row of a big program names a thousand functions or more).
void add_row(ps::FeedbackRow& sum, const ps::FeedbackRow& r) {
  sum.stages += r.stages;
  sum.exec_ns += r.exec_ns;
  auto counter = sum.counters.end();
  for (const auto& [name, v] : r.counters) {
    counter = sum.counters.try_emplace(counter, name, 0);
    counter->second += v;
    ++counter;
  }
  auto counts = sum.function_counts.end();
  for (const auto& [name, c] : r.function_counts) {
    counts = sum.function_counts.try_emplace(counts, name);
    add_counts(counts->second, c);
    ++counts;
  }
}
} // namespace

void FeedbackLoop::Batch::add(ps::FeedbackRow row) {
  auto [it, fresh] = sums.try_emplace(RowKey{row.pk, row.version});
  if (fresh) {
    it->second.pk = row.pk;
    it->second.version = row.version;
    it->second.host = row.host;
  }
  add_row(it->second, row);
  rows.push_back(std::move(row));
}

void FeedbackLoop::Batch::append(Batch&& later) {
  for (auto& [key, sum] : later.sums) {
    auto [it, fresh] = sums.try_emplace(key, sum);
    if (!fresh) add_row(it->second, sum);
  }
  rows.insert(rows.end(), std::make_move_iterator(later.rows.begin()),
              std::make_move_iterator(later.rows.end()));
  later.clear();
}

void FeedbackLoop::queue_row(const StageReport& stage, std::int64_t version, CountsPart counts,
                             CountersPart counters) {
  // Version 0 (no profile) has no history row to hang feedback on; its counts
  // live in memory until they become version 1.
  if (version <= 0) return;
  ps::FeedbackRow row;
  row.pk = stage.pk;
  row.version = version;
  row.stages = 1;
  row.exec_ns = stage.feedback.exec_ns;
  if (counters == CountersPart::taken) {
    row.counters = stage.feedback.counters;
    // What the drift window needs, so a restarted daemon starts from it.
    add_sample_counters(stage.samples, row.counters);
  }
  row.host = host_;
  if (counts == CountsPart::taken)
    for (const auto& [name, fc] : stage.feedback.counts) // sorted: each goes last
      row.function_counts.emplace_hint(row.function_counts.end(), name, fc.counts);
  std::lock_guard lk(pending_mu_);
  pending_.add(std::move(row));
}

FeedbackOutcome FeedbackLoop::fold(const StageReport& stage, const PolicyConfig& policy) {
  LifecycleConfig lifecycle;
  lifecycle.guard = false;
  lifecycle.max_rewrites_per_hour = policy.max_recompiles_per_hour;
  lifecycle.cs_round = policy.cs_pgo_stages > 0;
  return fold(stage, policy, lifecycle);
}

FeedbackOutcome FeedbackLoop::fold(const StageReport& stage, const PolicyConfig& policy,
                                   const LifecycleConfig& lifecycle) {
  FeedbackOutcome out;
  std::shared_ptr<KeyState> state = state_of(stage.pk);
  KeyState& st = *state;
  // What the stage counts for. The lifecycle took in the stored profile at
  // the stage's start (execute: start_stage); a stage that ran an earlier
  // build and counts for nothing now costs no store read.
  std::shared_ptr<LifecycleTable::Entry> life = lifecycles_.of(stage.pk);
  StageRun run = stage.run;
  run.stage = stage.stage;
  // The store reads the fold needs, done without the key's lock; again if
  // the profile moved before the lock was taken (a rewrite landed meanwhile).
  ReadAhead ahead;
  std::unique_lock lk(st.mu, std::defer_lock);
  for (int attempt = 0;; ++attempt) {
    ahead = read_ahead(st, *life, stage, run);
    lk.lock();
    if (attempt == 2 || !ahead.counts) break;
    auto now_current = store_.current(stage.pk); // the read view: no I/O once read ahead
    if (!now_current || holds_reads(st, ahead, now_current->get())) break;
    lk.unlock();
  }
  const auto now = std::chrono::system_clock::now();
  bool counts_for_nothing = false;
  {
    std::lock_guard l(life->mu);
    if (life->lc.started() && !life->lc.use_of(run).current) {
      out.use = life->lc.ran(run, now);
      counts_for_nothing = true;
    }
  }
  auto earlier_build = [&] {
    // Its row goes to the version it ran, for the record; it decides nothing now.
    queue_row(stage, stage.profile_version, CountsPart::taken, CountersPart::left);
    out.policy = "tier-up pending: the stage ran an earlier build (profile v" +
                 std::to_string(stage.profile_version) + ", current v" +
                 std::to_string(stage.target_profile_version) + ")" +
                 (run.compile == CompileState::under_way
                      ? ": the current one compiles in the background"
                      : ": the next stage waits for the current one's compile");
    return out;
  };
  if (counts_for_nothing) return earlier_build();
  auto current = store_.current(stage.pk);
  if (!current) {
    queue_row(stage, stage.profile_version, CountsPart::taken, CountersPart::left);
    out.policy = "profile read failed: " + current.error().describe();
    return out;
  }
  const ps::StoredProfile* sp = *current ? &**current : nullptr;
  const ProfileFacts facts = facts_of(sp ? &sp->doc : nullptr, sp ? sp->version : 0,
                                      sp != nullptr && sp->pinned, sp ? sp->digest : "");
  {
    // In-process feedback arrives without a stage start: changes made by
    // others are taken in here (a first stage starts the lifecycle).
    std::lock_guard l(life->mu);
    life->lc.sync(facts, stage.stage, lifecycle, now);
    out.use = life->lc.ran(run, now);
  }
  const StageUse& use = out.use;
  if (!use.current) return earlier_build();
  // The stage counts for the current version, whichever it ran.
  if (st.version != facts.version) load_totals(st, stage, facts.version, ahead);
  if (sp != nullptr && sp->doc.reprofile_of > 0 && ahead.earlier_of == sp->doc.reprofile_of) {
    st.earlier_of = ahead.earlier_of;
    st.earlier = std::move(ahead.earlier);
  } else if (sp == nullptr || sp->doc.reprofile_of == 0) {
    st.earlier_of = 0;
    st.earlier.clear();
  }
  // Queued only after load_totals read the store: a flush landing in between
  // would otherwise put this stage in the loaded totals and in acc twice.
  const CountsPart counts = use.counts ? CountsPart::taken : CountsPart::left;
  const CountersPart counters = use.samples ? CountersPart::taken : CountersPart::left;
  queue_row(stage, facts.version, counts, counters);
  st.acc.add(stage.feedback, counts, counters);
  const auto window_stages = static_cast<std::size_t>(policy.time_share_window_stages);
  if (run.trial && !use.stale && stage.samples.present) {
    // A trial's stages never feed drift; they say how the build they ran
    // shares time, which is that build's baseline if it comes to serve.
    if (!st.trial_windows.contains(run.served_digest) && st.trial_windows.size() >= 4)
      st.trial_windows.erase(st.trial_windows.begin());
    st.trial_windows[run.served_digest].add(stage.samples, window_stages);
  }
  if (use.samples) {
    if (stage.samples.present) {
      // The window is the served build's: another build's shares are not
      // comparable with it.
      if (!st.window_digest.empty() && st.window_digest != run.served_digest) {
        st.window.clear();
        st.own_baseline.reset();
        if (auto t = st.trial_windows.find(run.served_digest);
            t != st.trial_windows.end() && window_judgeable(policy, t->second))
          st.own_baseline = t->second.shares();
      }
      st.window_digest = run.served_digest;
      st.window.add(stage.samples, window_stages);
      st.clock_event = stage.samples.clock_event;
      add_icache_samples(st.icache, stage.samples.misses);
    }
    st.add_blocks(stage.blocks);
    if (stage.metadata && !stage.metadata->branch_weights.empty()) st.weights_from = stage.metadata;
  }

  if (st.rewrite_in_flight) {
    // Another stage's rewrite of this profile is being written (without the
    // lock): this stage's counts are in; that write decides.
    out.policy = "a rewrite of this profile is being written: the next stage decides";
    return out;
  }
  PolicyInput in;
  in.current = sp ? &sp->doc : nullptr;
  in.current_version = facts.version;
  in.pinned = facts.pinned;
  FeedbackAccumulator fleet_scratch;
  std::map<std::string, std::uint64_t> hosts;
  in.feedback = &fleet_view(st, stage, facts.version, ahead, fleet_scratch, hosts);
  in.now = now;
  const std::map<std::string, std::vector<BranchStat>> no_weights;
  const StageMetadataRef weights_from = st.weights_from; // held: `weights` points into it
  const auto& weights = weights_from ? weights_from->branch_weights : no_weights;
  const auto branches = branch_stats_of(st); // held: the lock is released for a write
  if (!branches->empty()) in.branch_stats = branches.get();
  if (!st.icache.empty()) in.icache_samples = &st.icache;
  if (facts.version != stage.target_profile_version) {
    out.policy =
        "profile changed under this stage (now version " + std::to_string(facts.version) + ")";
    return out;
  }
  PolicyDecision d = decide(policy, in);
  bool watches_drift = false;
  {
    std::lock_guard l(life->mu);
    watches_drift = life->lc.watches_drift();
  }
  // A report that names no digests ran the current profile's own build.
  const bool own_build =
      sp != nullptr && (run.served_digest.empty() || run.served_digest == sp->digest);
  if (d.action == PolicyAction::keep && watches_drift && use.samples)
    consider_reprofile(policy, in, st, own_build, d);
  if (d.action == PolicyAction::rewrite && d.kind == RewriteKind::counts && sp != nullptr &&
      sp->doc.reprofile_of > 0)
    recognise_reprofile(st, policy, in, *in.feedback, d);
  out.policy = d.reason;
  if (d.action != PolicyAction::rewrite) return out;
  {
    std::lock_guard l(life->mu);
    if (Approval a = life->lc.approve(d.kind, lifecycle, now); !a) {
      out.policy = d.reason + "; not written: " + a.why_not;
      return out;
    }
  }
  // The sampled shares the new version is made from: what drift is judged
  // against (also for a re-profile that found an earlier profile: the shares
  // of the workload now, counted as that profile's were).
  if (st.window.stages() != 0) {
    json& record = d.profile.hardware["sampling"];
    record = sampling_record(st.window, st.clock_event);
    if (!st.blocks.empty()) {
      record["blocks"] = blocks_record(st.blocks);
      record["branches"] = branches_record(st.blocks, weights);
    }
  }
  for (auto& [name, f] : d.profile.functions) {
    if (const std::string* fp = stage.fingerprint_of(name)) f.fingerprint = *fp;
    if (const std::string* sn = stage.source_name_of(name)) f.source_name = *sn;
  }
  ps::WriteInfo info;
  info.source = ps::WriteSource::feedback;
  info.reason = d.reason + "; " + hosts_phrase(hosts);
  info.owner = stage.owner;
  info.host = host_;
  info.stage = stage.stage;
  info.program = stage.program;
  std::string written_digest; // the store's, so the lifecycle need not hash the profile again
  info.digest_out = &written_digest;
  // Written with the key's lock released: the key's other stages fold
  // meanwhile (and leave the decision to this write).
  st.rewrite_in_flight = true;
  lk.unlock();
  auto written = store_.write(stage.pk, in.current_version, d.profile, info);
  lk.lock();
  st.rewrite_in_flight = false;
  if (!written) {
    // conflict: another writer got there first; pinned: an operator pinned it
    // meanwhile. Either way this stage's view is stale; the totals are kept
    // (the rows are queued) and the next stage decides again.
    out.policy = "rewrite skipped: " + written.error().describe();
    return out;
  }
  ++rewrites_;
  {
    std::lock_guard l(life->mu);
    life->lc.rewritten(d.kind, facts_of(&d.profile, *written, false, written_digest), stage.stage,
                       d.reason, lifecycle, now);
  }
  st.version = *written;
  st.acc = FeedbackAccumulator();
  st.window.clear();
  st.window_digest.clear();
  st.own_baseline.reset();
  st.trial_windows.clear();
  st.reset_blocks();
  st.icache.clear();
  // The fleet's totals were the old version's: the new version's first stages
  // must not count them (a re-profile would otherwise end after one
  // instrumented stage, its counters mixed with the old code's).
  if (st.fleet) drop_fleet({stage.pk, in.current_version});
  st.fleet.reset();
  st.fleet_read = {};
  out.rewritten = Rewrite{in.current_version, *written, d.reason};
  const std::string owner = std::to_string(stage.owner), version = std::to_string(*written);
  log::record(log::Level::info,
              "profile " + stage.pk.substr(0, 12) + " rewritten v" +
                  std::to_string(in.current_version) + " -> v" + version + ": " + d.reason,
              {{"FDO_PROFILE_KEY", stage.pk},
               {"FDO_PROFILE_VERSION", version},
               {"FDO_PROGRAM", stage.program},
               {"FDO_TENANT_UID", owner},
               {"FDO_STAGE", std::to_string(stage.stage)}});
  return out;
}

std::shared_ptr<const std::map<std::string, std::vector<BranchStat>>>
FeedbackLoop::branch_stats_of(KeyState& st) {
  KeyState::BranchCache& c = st.branch_cache;
  if (!c.stats || c.weights_from != st.weights_from || c.blocks_changes != st.blocks_changes) {
    // Every function's branches of the served build are copied and merged
    // with the samples: ~0.3-1.4 ms a stage on a program of 1,000 functions
    // when it was done at every stage (bench/service/README.md).
    c.stats = std::make_shared<const std::map<std::string, std::vector<BranchStat>>>(
        branch_stats(st.weights_from ? st.weights_from->branch_weights
                                     : std::map<std::string, std::vector<BranchStat>>{},
                     st.blocks));
    c.weights_from = st.weights_from;
    c.blocks_changes = st.blocks_changes;
  }
  return c.stats;
}

const FeedbackAccumulator& FeedbackLoop::fleet_view(KeyState& st, const StageReport& stage,
                                                    std::int64_t version, const ReadAhead& ahead,
                                                    FeedbackAccumulator& scratch,
                                                    std::map<std::string, std::uint64_t>& hosts) {
  hosts = {{host_, static_cast<std::uint64_t>(st.acc.stages())}};
  if (version <= 0) return st.acc; // no rows before version 1: local only
  const RowKey key{stage.pk, version};
  // Refreshed from the read ahead of the lock, when there is one of this
  // version that no flush overlapped (else a later stage reads again).
  if (ahead.read_at - st.fleet_read >= kFleetRefresh && ahead.version == version && ahead.totals &&
      *ahead.totals && ahead.epoch && adopt_fleet(st, key, **ahead.totals, ahead.epoch))
    st.fleet_read = ahead.read_at;
  if (!st.fleet) return st.acc;
  std::uint64_t stages = st.fleet->stages, exec_ns = st.fleet->exec_ns;
  std::map<std::string, std::vector<std::uint64_t>> counts = st.fleet->function_counts;
  std::map<std::string, std::uint64_t> counters = st.fleet->counters;
  std::map<std::string, std::uint64_t> fleet_hosts = st.fleet->host_stages;
  {
    // This loop's rows the snapshot does not hold: flushed after it was
    // read, in flight, or pending. Each is in exactly one of the three.
    auto add = [&](const ps::FeedbackRow& r) {
      if (r.stages == 0) return;
      stages += r.stages;
      exec_ns += r.exec_ns;
      fleet_hosts[r.host] += r.stages;
      for (const auto& [name, c] : r.function_counts)
        add_counts(counts[name], c);
      for (const auto& [name, v] : r.counters)
        counters[name] += v;
    };
    std::lock_guard lk(pending_mu_);
    if (auto it = flushed_since_snapshot_.find(key); it != flushed_since_snapshot_.end())
      add(it->second);
    for (const Batch* batch : {&inflight_, &pending_})
      if (auto it = batch->sums.find(key); it != batch->sums.end()) add(it->second);
  }
  if (static_cast<std::int64_t>(stages) < st.acc.stages()) return st.acc;
  hosts = std::move(fleet_hosts);
  scratch.set_totals(static_cast<std::int64_t>(stages), exec_ns);
  scratch.mutable_counters() = std::move(counters);
  for (auto& [name, c] : counts) {
    auto h = stage.cfg_hash_of(name);
    if (!h) continue;
    FunctionCounts fc{*h, std::move(c)};
    // Value profiles travel in no row: this host's own.
    if (auto local = st.acc.counts().find(name); local != st.acc.counts().end()) {
      fc.indirect_calls = local->second.indirect_calls;
      fc.memop_sizes = local->second.memop_sizes;
      fc.arg_values = local->second.arg_values;
    }
    scratch.mutable_counts()[name] = std::move(fc);
  }
  return scratch;
}

std::optional<std::uint64_t> FeedbackLoop::quiet_flush_epoch() const {
  std::lock_guard lk(pending_mu_);
  if (flushing_) return std::nullopt;
  return flushes_done_;
}

bool FeedbackLoop::adopt_fleet(KeyState& st, const RowKey& key,
                               const std::optional<ps::FeedbackTotals>& totals,
                               std::optional<std::uint64_t> epoch) {
  std::lock_guard lk(pending_mu_);
  if (!epoch || flushing_ || flushes_done_ != *epoch) return false;
  // The read saw every flush that ended before it and none after: this
  // loop's rows flushed from now on are the ones it lacks.
  st.fleet = totals;
  ps::FeedbackRow& since = flushed_since_snapshot_[key];
  since = ps::FeedbackRow{};
  since.pk = key.first;
  since.version = key.second;
  since.host = host_;
  return true;
}

void FeedbackLoop::drop_fleet(const RowKey& key) {
  std::lock_guard lk(pending_mu_);
  flushed_since_snapshot_.erase(key);
}

Status FeedbackLoop::flush() {
  std::lock_guard flush_lk(flush_mu_);
  {
    std::lock_guard lk(pending_mu_);
    std::swap(inflight_, pending_);
    if (inflight_.rows.empty()) return ok();
    flushing_ = true;
  }
  Status st = store_.append_feedback(inflight_.rows, {});
  std::lock_guard lk(pending_mu_);
  flushing_ = false;
  ++flushes_done_;
  if (!st) {
    inflight_.append(std::move(pending_));
    std::swap(pending_, inflight_);
    inflight_.clear();
    return std::move(st).error().context("flush feedback");
  }
  // In the store now: fleet snapshots read before this flush lack these rows.
  for (const auto& [key, sum] : inflight_.sums)
    if (auto it = flushed_since_snapshot_.find(key); it != flushed_since_snapshot_.end())
      add_row(it->second, sum);
  inflight_.clear();
  return ok();
}

} // namespace fdo::daemon
