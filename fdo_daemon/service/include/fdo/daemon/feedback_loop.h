// The feedback loop: folds each stage's measurements into running totals per
// profile key, asks the policy (policy.h) and the drift rule (time_share.h)
// whether the profile should be rewritten, has the program's lifecycle
// (lifecycle.h) approve it, writes the new version through the store's
// versioned write, and batches the stage rows for a periodic flush.
//
// The lifecycle decides what each stage counts for (StageUse): a stage that
// ran an earlier build is counted for what it ran; only stages that ran the
// served build outside a trial feed the drift window, which belongs to that
// build (its digest) and restarts when another build serves.
//
// Concurrency: each profile key has its own state and lock, held while that
// key's stage is folded (including its reads, but not its versioned write:
// the key's other stages fold meanwhile and decide nothing until the write is
// back); stages of other keys never wait for it. Pending rows have their own lock, never held
// across store I/O. The store's optimistic concurrency (write v+1 only over v)
// settles races with other writers (fdoctl, another daemon).
#pragma once

#include "fdo/daemon/block_samples.h"
#include "fdo/daemon/lifecycle.h"
#include "fdo/daemon/policy.h"
#include "fdo/daemon/stage_metadata.h"
#include "fdo/daemon/stage_observation.h"
#include "fdo/daemon/time_share.h"
#include "fdo/profile_store/profile_store.h"
#include "fdo/util/expected.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace fdo::daemon {

// The part of the profile store the loop uses.
class FeedbackStore {
public:
  virtual ~FeedbackStore() = default;
  // Shared and immutable (null: no profile): a steady stage reads it without
  // a copy (profile_store's read view).
  virtual Expected<profile_store::SharedProfile> current(std::string_view pk) = 0;
  // One retained version (nullopt: unknown or pruned by retention).
  virtual Expected<std::optional<profile_store::StoredProfile>> version(std::string_view pk,
                                                                        std::int64_t version) = 0;
  virtual Expected<std::optional<profile_store::FeedbackTotals>> feedback(std::string_view pk,
                                                                          std::int64_t version) = 0;
  // Errors: conflict (another writer was first), pinned (feedback may not rewrite it).
  virtual Expected<std::int64_t> write(std::string_view pk, std::int64_t expected_version,
                                       const ProfileDoc& doc,
                                       const profile_store::WriteInfo& info) = 0;
  // batch_id non-empty: idempotent, a batch id the store already applied
  // applies nothing (so a batch retried after an ambiguous failure is never
  // counted twice); empty: the store_fallback.h decorator assigns one.
  virtual Status append_feedback(std::span<const profile_store::FeedbackRow> rows,
                                 std::string_view batch_id) = 0;
};

// What one stage produced, with what the loop needs to know about it.
struct StageReport {
  std::string pk;
  std::string program; // IK
  std::int64_t owner = 0;
  std::int64_t stage = 0;
  std::int64_t profile_version = 0;        // what the served output was compiled with
  std::int64_t target_profile_version = 0; // the current version when the stage began
  // What the stage asked for (the current profile's build, or the guard's
  // variant) and what it ran, for the lifecycle (its stage number is
  // `stage`'s). Both digests empty: it ran the current profile's own build,
  // as it asked.
  StageRun run;
  StageFeedback feedback;
  // The served output's compile metadata, decoded once per output and shared
  // (stage_metadata.h): PGO name -> CFG hash of each instrumented function,
  // canonical function fingerprints, the function's PGO name in the
  // submitted program (recorded in the profile for display and exports), and
  // (optimized outputs) the weights the profile gave its branches. Null: none
  // known (every lookup below finds nothing).
  StageMetadataRef metadata;
  std::optional<std::uint64_t> cfg_hash_of(const std::string& fn) const;
  const std::string* fingerprint_of(const std::string& fn) const;
  const std::string* source_name_of(const std::string& fn) const;
  // Sampled during the stage (time_share.h); present=false when not sampled.
  StageSamples samples;
  // Its samples per IR block and branch (block_samples.h).
  BlockTallies blocks;
};

struct Rewrite {
  std::int64_t from = 0;
  std::int64_t to = 0;
  std::string reason;
};

struct FeedbackOutcome {
  std::optional<Rewrite> rewritten;
  std::string policy; // the decision (or why none was taken), for the stage's reply
  StageUse use;       // what the lifecycle let the stage count for
};

class FeedbackLoop {
public:
  // `host` is recorded as the writer of every version the loop writes.
  // `lifecycles`: the programs' lifecycles, shared with the stage path (null:
  // the loop keeps its own).
  FeedbackLoop(FeedbackStore& store, std::string host, LifecycleTable* lifecycles = nullptr);

  FeedbackOutcome fold(const StageReport& stage, const PolicyConfig& policy,
                       const LifecycleConfig& lifecycle);
  // With the policy's rate cap and context-sensitive round, no guard, async tier-up.
  FeedbackOutcome fold(const StageReport& stage, const PolicyConfig& policy);
  // Writes the batched stage rows in one store call. On failure the rows are
  // kept, ahead of newer ones, for the next flush: nothing is lost.
  Status flush();
  // Forgets the running totals of `pk` (after a reset: they belonged to a
  // profile that no longer is current).
  void forget(const std::string& pk);
  // Forgets every key's running totals (the store was restored from a backup).
  void forget_all();

  std::uint64_t rewrites() const { return rewrites_.load(); }
  std::size_t pending_rows() const;

private:
  using RowKey = std::pair<std::string, std::int64_t>; // (pk, version)
  // How often a key's fleet totals are read again (other hosts' rows arrive at
  // their flush interval anyway; this bounds the store reads to one a second per key).
  static constexpr std::chrono::seconds kFleetRefresh{1};
  struct KeyState {
    std::mutex mu;
    std::int64_t version = -1; // the profile version `acc` belongs to
    FeedbackAccumulator acc;
    // The most recent sampled stages of one served build (`window_digest`;
    // empty: restored after a restart from the version's sampled stages
    // summed in its feedback rows, adopted by the next build that serves).
    TimeShareWindow window;
    std::string window_digest;
    // Drift is judged against the shares the profile recorded when its own
    // build serves; when another build serves (a variant the guard kept),
    // against that build's shares in its last trial (the most recent trial
    // stages that ran it, per build), or else its own first full window.
    std::optional<std::map<std::string, double>> own_baseline;
    std::map<std::string, TimeShareWindow> trial_windows;
    std::string clock_event;
    // Block and branch samples of every stage under `version`, and the
    // metadata (branch weights) of the compile that served them (null: none).
    // `blocks` changes only through add_blocks and reset_blocks, which count
    // the changes to its branch misses (what branch_stats reads of it; the
    // clock's samples land in it at every sampled stage) for `branch_cache`.
    BlockTallies blocks;
    StageMetadataRef weights_from;
    std::uint64_t blocks_changes = 0;
    void add_blocks(const BlockTallies& b) {
      blocks.add(b);
      if (has_branch_misses(b)) ++blocks_changes;
    }
    void reset_blocks() {
      blocks = {};
      ++blocks_changes;
    }
    // The policy's per-branch statistics (branch_stats) of `weights_from`
    // and `blocks` as they were at `blocks_changes`: made again only when
    // either moved (branch_stats_of), not at every stage; shared, so a fold
    // that releases the lock keeps what it decided on.
    struct BranchCache {
      StageMetadataRef weights_from;
      std::uint64_t blocks_changes = 0;
      std::shared_ptr<const std::map<std::string, std::vector<BranchStat>>> stats;
    } branch_cache;
    // Sampled i-cache misses per function of every stage under `version`.
    std::map<std::string, std::uint64_t> icache;
    // The fleet's totals for `version` (every host's flushed rows) when last
    // read from the store, at most every kFleetRefresh (fleet_view). Only a
    // read that no flush of this loop overlapped is kept (adopt_fleet), so
    // which of this loop's rows it holds is known exactly.
    std::optional<profile_store::FeedbackTotals> fleet;
    std::chrono::steady_clock::time_point fleet_read{};
    // A rewrite of this key is being written (the lock released meanwhile):
    // other stages fold their counts but decide nothing until it is back.
    bool rewrite_in_flight = false;
    // While the current version re-profiles version `earlier_of`: the
    // finished profiles among the versions before it (newest first, one per
    // digest) that its counts may turn out to equal (recognise_reprofile).
    // Read once per re-profile, ahead of the lock; versions never change.
    std::int64_t earlier_of = 0;
    std::vector<profile_store::SharedProfile> earlier;
  };

  // What a fold reads from the store, read before it takes the key's lock so
  // that no fold holds it across store I/O: the current version's totals when
  // the key's state lacks them (or its fleet view is due for a refresh), and
  // a re-profile's earlier versions. Empty when the stage counts for nothing.
  struct ReadAhead {
    bool counts = false;                // false: the stage counted for nothing, nothing was read
    std::int64_t version = 0;           // of `totals` (0: none read)
    std::optional<std::uint64_t> epoch; // quiet_flush_epoch() before the read
    std::optional<Expected<std::optional<profile_store::FeedbackTotals>>> totals;
    std::chrono::steady_clock::time_point read_at{};
    std::int64_t earlier_of = 0; // `earlier` read for this re-profiled version (0: none)
    std::vector<profile_store::SharedProfile> earlier;
  };
  ReadAhead read_ahead(KeyState& st, LifecycleTable::Entry& life, const StageReport& stage,
                       const StageRun& run);
  // Under st.mu: `ahead` holds what the fold of a stage whose current profile
  // is `current` needs from the store (nothing needed counts as held).
  static bool holds_reads(const KeyState& st, const ReadAhead& ahead,
                          const profile_store::StoredProfile* current);
  // The finished profiles among the kLookback versions up to `reprofiled`
  // (an error when one cannot be read: read again at the next stage).
  Expected<std::vector<profile_store::SharedProfile>> earlier_versions(const std::string& pk,
                                                                       std::int64_t reprofiled);

  std::shared_ptr<KeyState> state_of(const std::string& pk);
  // Under st.mu: the key's branch statistics, from its cache when neither
  // the weights nor the samples moved since they were made.
  static std::shared_ptr<const std::map<std::string, std::vector<BranchStat>>>
  branch_stats_of(KeyState& st);
  // Queues the stage's row under `version` (what the stage counts for), with
  // its counts and its samples only where the lifecycle let it give them.
  void queue_row(const StageReport& stage, std::int64_t version, CountsPart counts,
                 CountersPart counters);
  // Resets the key's state for `version` and loads the version's stored
  // totals from `ahead` (read again only if the read ahead missed it).
  void load_totals(KeyState& st, const StageReport& stage, std::int64_t version, ReadAhead& ahead);
  // Before a store read of fleet totals: the number of flushes done, or
  // nullopt while one is in flight (a read now may or may not see its rows).
  std::optional<std::uint64_t> quiet_flush_epoch() const;
  // After the read: keeps `totals` as st.fleet of (pk, version) if no flush
  // started or ended since `epoch` was taken (else false, st.fleet unchanged),
  // and from then on tracks this loop's rows of the key flushed after it.
  bool adopt_fleet(KeyState& st, const RowKey& key,
                   const std::optional<profile_store::FeedbackTotals>& totals,
                   std::optional<std::uint64_t> epoch);
  // Drops the flushed-rows tracking of `key` (its snapshot is gone).
  void drop_fleet(const RowKey& key);
  // What the policy decides on: the fleet's totals for the stage's version
  // plus this host's rows not yet in the store, when that is at least what
  // this host saw itself (else, e.g. while the store is down, its own view).
  // `hosts`: stages per contributing host of the view returned.
  // The snapshot is refreshed from `ahead` (never read under the lock).
  const FeedbackAccumulator& fleet_view(KeyState& st, const StageReport& stage,
                                        std::int64_t version, const ReadAhead& ahead,
                                        FeedbackAccumulator& scratch,
                                        std::map<std::string, std::uint64_t>& hosts);
  // Drift re-profiling when the policy kept the profile (time_share.h);
  // `own_build`: the profile's own build served the window.
  void consider_reprofile(const PolicyConfig& policy, const PolicyInput& in, KeyState& st,
                          bool own_build, PolicyDecision& d);
  // A re-profile's counts that equal a finished profile among the versions
  // it re-profiled (docs/lifecycle.md): that profile again.
  void recognise_reprofile(const KeyState& st, const PolicyConfig& policy, const PolicyInput& in,
                           const FeedbackAccumulator& counted, PolicyDecision& d);

  FeedbackStore& store_;
  std::string host_;
  std::unique_ptr<LifecycleTable> own_lifecycles_; // when none was given
  LifecycleTable& lifecycles_;

  std::mutex states_mu_; // guards the map only
  std::map<std::string, std::shared_ptr<KeyState>> states_;

  // Rows not yet in the store, and their running sums per (pk, version):
  // fleet_view reads a key's sum instead of scanning every row, which at
  // thousands of stages a second between flushes cost each stage more than
  // the rest of its fold.
  struct Batch {
    std::vector<profile_store::FeedbackRow> rows;
    std::map<RowKey, profile_store::FeedbackRow> sums;
    void add(profile_store::FeedbackRow row);
    // Appends `later`'s rows after this batch's, sums included.
    void append(Batch&& later);
    void clear() {
      rows.clear();
      sums.clear();
    }
  };

  mutable std::mutex pending_mu_;
  Batch pending_;
  // The rows of the flush in progress (read by fleet_view; written under
  // pending_mu_ by the one flush at a time that flush_mu_ admits).
  Batch inflight_;
  std::mutex flush_mu_;
  // Under pending_mu_: flushes ended (succeeded or failed), whether one is in
  // flight, and for each (pk, version) with an adopted fleet snapshot the sum
  // of this loop's rows flushed after that snapshot was read. A key's fleet
  // view is its snapshot + those rows + inflight_ + pending_: each of this
  // host's stages exactly once, whenever flushes land.
  std::uint64_t flushes_done_ = 0;
  bool flushing_ = false;
  std::map<RowKey, profile_store::FeedbackRow> flushed_since_snapshot_;

  std::atomic<std::uint64_t> rewrites_{0};
};

// A stage's observation as feedback: wall time, counted events and
// instrumentation counts (with their value profiles) of functions whose CFG
// hash the compile reported (anything else is ignored).
StageFeedback stage_feedback_from(const StageObservation& observation,
                                  const std::map<std::string, std::uint64_t>& cfg_hashes);

// What a stage observed, into its report, the same for exec worker stages
// and in-process batches: the feedback, the sampled time shares and the
// block tallies, read through the report's metadata (its CFG hashes and PGO
// names; none known: no counts and symbols as named). `known_functions`: the
// output's functions with code when the observation has no function ranges.
void observe(StageReport& report, const StageObservation& observation,
             const std::set<std::string>* known_functions = nullptr);

} // namespace fdo::daemon
