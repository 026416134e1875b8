#include "fdo/daemon/feedback_loop.h"

#include "fdo/daemon/icache_layout.h"
#include "fdo/util/log.h"
#include "fdo/util/log_record.h"

#include <algorithm>

namespace fdo::daemon {

namespace ps = fdo::profile_store;
using nlohmann::json;

namespace {
// Rewrite times kept per key: enough for any sensible hourly cap.
constexpr std::size_t kRewriteTimesKept = 256;
// How often a key's fleet totals are read again (other hosts' rows arrive at
// their flush interval anyway; this bounds the store reads to one a second per key).
constexpr std::chrono::seconds kFleetRefresh{1};

// Adds `counts` into `sum` element-wise (saturating), growing it as needed.
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

void add_counts(std::vector<std::uint64_t>& sum, const std::vector<std::uint64_t>& counts) {
  if (sum.size() < counts.size()) sum.resize(counts.size(), 0);
  for (std::size_t i = 0; i < counts.size(); ++i)
    sum[i] = counts[i] > UINT64_MAX - sum[i] ? UINT64_MAX : sum[i] + counts[i];
}

// A count as the worker sent it; anything else (negative, fractional, text) is no count.
std::optional<std::uint64_t> as_count(const json& v) {
  if (v.is_number_unsigned()) return v.get<std::uint64_t>();
  if (v.is_number_integer() && v.get<std::int64_t>() >= 0)
    return static_cast<std::uint64_t>(v.get<std::int64_t>());
  return std::nullopt;
}
} // namespace

StageFeedback stage_feedback_from(const json& exec_reply,
                                  const std::map<std::string, std::uint64_t>& cfg_hashes) {
  // Read in place: the reply is walked once per stage, and json::value()
  // would copy every event (explanations included) and every count array.
  StageFeedback fb;
  auto member = [](const json& j, const char* key) -> const json* {
    if (!j.is_object()) return nullptr;
    auto it = j.find(key);
    return it == j.end() ? nullptr : &*it;
  };
  if (const json* m = member(exec_reply, "measurement")) {
    if (const json* wall = member(*m, "wall_ns")) fb.exec_ns = as_count(*wall).value_or(0);
    if (const json* cpu = member(*m, "process_cpu_ns")) fb.cpu_ns = as_count(*cpu);
    if (const json* events = member(*m, "events"); events && events->is_array())
      for (const json& e : *events) {
        const json* value = member(e, "value");
        const json* name = member(e, "name");
        if (value == nullptr) continue;
        if (auto v = as_count(*value))
          fb.counters[name && name->is_string() ? name->get_ref<const std::string&>() : ""] = *v;
      }
  }
  if (const json* counts = member(exec_reply, "counts"); counts && counts->is_object())
    for (auto it = counts->begin(); it != counts->end(); ++it) {
      auto h = cfg_hashes.find(it.key());
      if (h == cfg_hashes.end() || !it->is_array()) continue;
      FunctionCounts fc{h->second, {}, {}, {}};
      fc.counts.reserve(it->size());
      for (const json& v : *it)
        fc.counts.push_back(as_count(v).value_or(0));
      fb.counts[it.key()] = std::move(fc);
    }
  // Value profiles, in the profile document's form: parsed through it so the
  // rules (hex targets, non-negative counts) are the same.
  if (const json* values = member(exec_reply, "values"); values && values->is_object())
    for (auto it = values->begin(); it != values->end(); ++it) {
      auto fc = fb.counts.find(it.key());
      if (fc == fb.counts.end() || !it->is_object()) continue;
      json function = *it;
      function["cfg_hash"] = "0";
      json doc = json::object();
      doc["functions"] = json::object();
      doc["functions"][it.key()] = std::move(function);
      auto parsed = profile_from_json(doc);
      if (!parsed) continue; // malformed: the counts alone still count
      FunctionProfile& f = parsed->functions.begin()->second;
      fc->second.indirect_calls = std::move(f.indirect_calls);
      fc->second.memop_sizes = std::move(f.memop_sizes);
    }
  return fb;
}

FeedbackLoop::FeedbackLoop(FeedbackStore& store, std::string host)
    : store_(store), host_(std::move(host)) {}

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
void add_row(ps::FeedbackRow& sum, const ps::FeedbackRow& r) {
  sum.stages += r.stages;
  sum.exec_ns += r.exec_ns;
  for (const auto& [name, v] : r.counters)
    sum.counters[name] += v;
  for (const auto& [name, c] : r.function_counts)
    add_counts(sum.function_counts[name], c);
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

void FeedbackLoop::queue_row(const StageReport& stage) {
  // Version 0 (no profile) has no history row to hang feedback on; its counts
  // live in memory until they become version 1.
  if (stage.profile_version <= 0) return;
  ps::FeedbackRow row;
  row.pk = stage.pk;
  row.version = stage.profile_version;
  row.stages = 1;
  row.exec_ns = stage.feedback.exec_ns;
  row.counters = stage.feedback.counters;
  // What the drift window needs, so a restarted daemon starts from it.
  add_sample_counters(stage.samples, row.counters);
  row.host = host_;
  for (const auto& [name, fc] : stage.feedback.counts)
    row.function_counts[name] = fc.counts;
  std::lock_guard lk(pending_mu_);
  pending_.add(std::move(row));
}

// The totals recorded for the stage's version before this daemon saw the key
// (earlier runs, other processes), so thresholds count every stage.
void FeedbackLoop::load_totals(KeyState& st, const StageReport& stage) {
  st.acc = FeedbackAccumulator();
  st.window.clear();
  st.blocks = {};
  st.branch_weights.clear();
  st.icache.clear();
  // The fleet's totals were another version's (or none).
  if (st.fleet) drop_fleet({stage.pk, st.version});
  st.fleet.reset();
  st.fleet_read = {};
  st.version = stage.profile_version;
  if (stage.profile_version <= 0) return;
  const std::optional<std::uint64_t> epoch = quiet_flush_epoch();
  auto totals = store_.feedback(stage.pk, stage.profile_version);
  if (!totals) {
    log::warning("feedback: totals of " + stage.pk.substr(0, 12) + " v" +
                 std::to_string(stage.profile_version) +
                 " unreadable, counting from this stage: " + totals.error().describe());
    return;
  }
  // A read that a flush overlapped is not kept as the fleet's totals (it may
  // hold rows still counted in flight); the next stage reads again.
  if (adopt_fleet(st, {stage.pk, stage.profile_version}, *totals, epoch))
    st.fleet_read = std::chrono::steady_clock::now();
  if (!*totals) return;
  FeedbackAccumulator loaded;
  for (const auto& [name, counts] : (*totals)->function_counts)
    if (auto h = stage.cfg_hashes.find(name); h != stage.cfg_hashes.end())
      loaded.mutable_counts()[name] = FunctionCounts{h->second, counts};
  std::map<std::string, std::uint64_t> counters = (*totals)->counters;
  if (auto sampled = take_sample_counters(counters)) {
    st.window.restore(sampled->sum, sampled->stages);
    st.clock_event = sampled->sum.clock_event;
    add_icache_samples(st.icache, sampled->sum.misses);
  }
  loaded.mutable_counters() = std::move(counters);
  loaded.set_totals(static_cast<std::int64_t>((*totals)->stages), (*totals)->exec_ns);
  st.acc.merge(loaded);
}

FeedbackOutcome FeedbackLoop::fold(const StageReport& stage, const PolicyConfig& policy) {
  FeedbackOutcome out;
  if (stage.profile_version != stage.target_profile_version) {
    queue_row(stage);
    out.policy = "tier-up pending: stage ran profile version " +
                 std::to_string(stage.profile_version) + ", current is " +
                 std::to_string(stage.target_profile_version);
    return out;
  }
  std::shared_ptr<KeyState> state = state_of(stage.pk);
  std::lock_guard lk(state->mu);
  KeyState& st = *state;
  if (st.version != stage.profile_version) load_totals(st, stage);
  // Queued only after load_totals read the store: a flush landing in between
  // would otherwise put this stage in the loaded totals and in acc twice.
  queue_row(stage);
  st.acc.add(stage.feedback);
  if (stage.samples.present) {
    st.window.add(stage.samples, static_cast<std::size_t>(policy.time_share_window_stages));
    st.clock_event = stage.samples.clock_event;
    add_icache_samples(st.icache, stage.samples.misses);
  }
  st.blocks.add(stage.blocks);
  if (!stage.branch_weights.empty()) st.branch_weights = stage.branch_weights;

  auto current = store_.current(stage.pk);
  if (!current) {
    out.policy = "profile read failed: " + current.error().describe();
    return out;
  }
  PolicyInput in;
  in.current = *current ? &(*current)->doc : nullptr;
  in.current_version = *current ? (*current)->version : 0;
  in.pinned = *current && (*current)->pinned;
  FeedbackAccumulator fleet_scratch;
  std::map<std::string, std::uint64_t> hosts;
  in.feedback = &fleet_view(st, stage, fleet_scratch, hosts);
  in.now = std::chrono::system_clock::now();
  in.recent_rewrites = &st.rewrites;
  const std::map<std::string, std::vector<BranchStat>> branches =
      branch_stats(st.branch_weights, st.blocks);
  if (!branches.empty()) in.branch_stats = &branches;
  if (!st.icache.empty()) in.icache_samples = &st.icache;
  if (in.current_version != stage.profile_version) {
    out.policy =
        "profile changed under this stage (now version " + std::to_string(in.current_version) + ")";
    return out;
  }
  PolicyDecision d = decide(policy, in);
  if (d.action == PolicyAction::keep) consider_reprofile(policy, in, st, d);
  out.policy = d.reason;
  if (d.action != PolicyAction::rewrite) return out;
  // The sampled shares the new version is made from: what drift is judged against.
  if (st.window.stages() != 0) {
    json& record = d.profile.hardware["sampling"];
    record = sampling_record(st.window, st.clock_event);
    if (!st.blocks.empty()) {
      record["blocks"] = blocks_record(st.blocks);
      record["branches"] = branches_record(st.blocks, st.branch_weights);
    }
  }
  for (auto& [name, f] : d.profile.functions) {
    if (auto fp = stage.function_fingerprints.find(name); fp != stage.function_fingerprints.end())
      f.fingerprint = fp->second;
    if (auto sn = stage.source_names.find(name); sn != stage.source_names.end())
      f.source_name = sn->second;
  }
  ps::WriteInfo info;
  info.source = ps::WriteSource::feedback;
  info.reason = d.reason + "; " + hosts_phrase(hosts);
  info.owner = stage.owner;
  info.host = host_;
  info.stage = stage.stage;
  info.program = stage.program;
  auto written = store_.write(stage.pk, in.current_version, d.profile, info);
  if (!written) {
    // conflict: another writer got there first; pinned: an operator pinned it
    // meanwhile. Either way this stage's view is stale; the totals are kept
    // (the rows are queued) and the next stage decides again.
    out.policy = "rewrite skipped: " + written.error().describe();
    return out;
  }
  ++rewrites_;
  st.rewrites.push_back(in.now);
  while (st.rewrites.size() > kRewriteTimesKept)
    st.rewrites.pop_front();
  st.version = *written;
  st.acc = FeedbackAccumulator();
  st.window.clear();
  st.blocks = {};
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

const FeedbackAccumulator& FeedbackLoop::fleet_view(KeyState& st, const StageReport& stage,
                                                    FeedbackAccumulator& scratch,
                                                    std::map<std::string, std::uint64_t>& hosts) {
  hosts = {{host_, static_cast<std::uint64_t>(st.acc.stages())}};
  if (stage.profile_version <= 0) return st.acc; // no rows before version 1: local only
  const RowKey key{stage.pk, stage.profile_version};
  const auto now = std::chrono::steady_clock::now();
  if (now - st.fleet_read >= kFleetRefresh) {
    // While a flush is in flight a read may or may not hold its rows: keep
    // the snapshot there is, read again at a later stage.
    if (const std::optional<std::uint64_t> epoch = quiet_flush_epoch()) {
      auto totals = store_.feedback(stage.pk, stage.profile_version);
      if (totals && adopt_fleet(st, key, *totals, epoch)) st.fleet_read = now;
    }
  }
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
    auto h = stage.cfg_hashes.find(name);
    if (h == stage.cfg_hashes.end()) continue;
    FunctionCounts fc{h->second, std::move(c), {}, {}};
    // Value profiles travel in no row: this host's own.
    if (auto local = st.acc.counts().find(name); local != st.acc.counts().end()) {
      fc.indirect_calls = local->second.indirect_calls;
      fc.memop_sizes = local->second.memop_sizes;
    }
    scratch.mutable_counts()[name] = std::move(fc);
  }
  return scratch;
}

void FeedbackLoop::consider_reprofile(const PolicyConfig& policy, const PolicyInput& in,
                                      KeyState& st, PolicyDecision& d) {
  if (in.current == nullptr || in.pinned) return;
  ReprofileDecision r = decide_reprofile(policy, *in.current, st.window);
  if (r.reason.empty()) return;
  if (!r.reprofile) {
    d.reason += "; " + r.reason;
    return;
  }
  // The same cap as every other rewrite: a workload that flips back and forth
  // re-profiles at most max_recompiles_per_hour times an hour.
  const auto hour_ago = in.now - std::chrono::hours(1);
  const auto recent =
      std::count_if(st.rewrites.begin(), st.rewrites.end(), [&](auto t) { return t > hour_ago; });
  if (recent >= policy.max_recompiles_per_hour) {
    d.reason += "; " + r.reason + " deferred: recompile rate cap reached";
    return;
  }
  d.action = PolicyAction::rewrite;
  d.drift = *r.drift;
  d.profile = reprofile_doc(*in.current);
  d.reason = r.reason;
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
