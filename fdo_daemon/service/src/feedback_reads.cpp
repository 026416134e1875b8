// What the feedback loop reads from the store for a fold (feedback_loop.h):
// read ahead of the key's lock, then loaded into the key's state under it.
#include "fdo/daemon/feedback_loop.h"
#include "fdo/daemon/icache_layout.h"
#include "fdo/util/log.h"

namespace fdo::daemon {

namespace ps = fdo::profile_store;

FeedbackLoop::ReadAhead FeedbackLoop::read_ahead(KeyState& st, LifecycleTable::Entry& life,
                                                 const StageReport& stage, const StageRun& run) {
  ReadAhead out;
  {
    std::lock_guard l(life.mu);
    if (life.lc.started() && !life.lc.use_of(run).current) return out; // counts for nothing
  }
  out.counts = true;
  auto current = store_.current(stage.pk);
  if (!current || !*current) return out;
  const std::int64_t version = (*current)->version;
  const std::int64_t reprofiled = (*current)->doc.reprofile_of;
  const auto now = std::chrono::steady_clock::now();
  bool load = false, refresh = false, earlier = false;
  {
    std::lock_guard l(st.mu);
    load = st.version != version;
    refresh = !load && now - st.fleet_read >= kFleetRefresh;
    earlier = reprofiled > 0 && st.earlier_of != reprofiled;
  }
  if (version > 0 && (load || refresh)) {
    // While a flush is in flight a read may or may not hold its rows: it is
    // not kept as the fleet's snapshot (adopt_fleet), so a refresh waits.
    out.epoch = quiet_flush_epoch();
    if (load || out.epoch) {
      out.version = version;
      out.totals = store_.feedback(stage.pk, version);
      out.read_at = now;
    }
  }
  if (earlier) {
    auto got = earlier_versions(stage.pk, reprofiled);
    if (got) {
      out.earlier_of = reprofiled;
      out.earlier = std::move(*got);
    }
  }
  return out;
}

bool FeedbackLoop::holds_reads(const KeyState& st, const ReadAhead& ahead,
                               const ps::StoredProfile* current) {
  if (current == nullptr) return true;
  if (current->version > 0 && st.version != current->version && ahead.version != current->version)
    return false;
  const std::int64_t reprofiled = current->doc.reprofile_of;
  return reprofiled == 0 || st.earlier_of == reprofiled || ahead.earlier_of == reprofiled;
}

// The totals recorded for the stage's version before this daemon saw the key
// (earlier runs, other processes), so thresholds count every stage.
void FeedbackLoop::load_totals(KeyState& st, const StageReport& stage, std::int64_t version,
                               ReadAhead& ahead) {
  st.acc = FeedbackAccumulator();
  st.reset_blocks();
  st.weights_from.reset();
  st.icache.clear();
  // The fleet's totals were another version's (or none).
  if (st.fleet) drop_fleet({stage.pk, st.version});
  st.fleet.reset();
  st.fleet_read = {};
  st.version = version;
  if (version <= 0) return;
  if (ahead.version != version || !ahead.totals) {
    // The version moved under every read ahead (fold tried three times): read here.
    ahead.epoch = quiet_flush_epoch();
    ahead.totals = store_.feedback(stage.pk, version);
    ahead.version = version;
    ahead.read_at = std::chrono::steady_clock::now();
  }
  const std::optional<std::uint64_t> epoch = ahead.epoch;
  const auto& totals = *ahead.totals;
  if (!totals) {
    log::warning("feedback: totals of " + stage.pk.substr(0, 12) + " v" + std::to_string(version) +
                 " unreadable, counting from this stage: " + totals.error().describe());
    return;
  }
  // A read that a flush overlapped is not kept as the fleet's totals (it may
  // hold rows still counted in flight); the next stage reads again.
  if (adopt_fleet(st, {stage.pk, version}, *totals, epoch)) st.fleet_read = ahead.read_at;
  if (!*totals) return;
  FeedbackAccumulator loaded;
  for (const auto& [name, counts] : (*totals)->function_counts)
    if (auto h = stage.cfg_hash_of(name))
      loaded.mutable_counts()[name] = FunctionCounts{*h, counts};
  std::map<std::string, std::uint64_t> counters = (*totals)->counters;
  if (auto sampled = take_sample_counters(counters)) {
    // A window this daemon keeps is newer than the version's sum (a verdict
    // wrote the version: the same build serves on).
    if (st.window.stages() == 0) {
      st.window.restore(sampled->sum, sampled->stages);
      st.window_digest.clear();
    }
    st.clock_event = sampled->sum.clock_event;
    add_icache_samples(st.icache, sampled->sum.misses);
  }
  loaded.mutable_counters() = std::move(counters);
  loaded.set_totals(static_cast<std::int64_t>((*totals)->stages), (*totals)->exec_ns);
  st.acc.merge(loaded);
}

} // namespace fdo::daemon
