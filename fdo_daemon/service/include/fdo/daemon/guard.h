// The guard (docs/guard.md): switch to a compiled variant only when it is
// shown faster. Per profile key it keeps an incumbent variant (what is
// served) and, while a new profile version or a knob variant is on trial, a
// candidate; stages of one comparable shape run them in blocks of four in a
// seeded random order, the trial's sequential test (trial.h) gives the
// verdict (the incumbent stays unless the candidate is kept), and the verdict is
// written into the profile document's guard record (a new profile version,
// through the store's versioned write), so a restart or another host starts
// from it. Variants are documents derived from the current profile with their
// own digest: their outputs are ordinary cache entries under profile-embedded
// keys.
//
// Concurrency: each profile key has its own state and lock, held while a
// stage is planned or recorded; the versioned write of a verdict (once per
// trial) happens under it, as the feedback loop's rewrites do. The store's
// optimistic concurrency settles races with other writers.
#pragma once

#include "fdo/cache/interfaces.h"
#include "fdo/daemon/abi.h"
#include "fdo/daemon/feedback_loop.h"
#include "fdo/daemon/guard_config.h"
#include "fdo/daemon/lifecycle.h"
#include "fdo/daemon/trial.h"
#include "fdo/util/profile.h"

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>

namespace fdo::daemon {

// Whether a profiled variant keeps an optional part of the profile: the
// context-sensitive counts (docs/jit.md, "Context-sensitive PGO") or a
// sampling-derived part (docs/perf.md): the `!unpredictable` branch marks,
// the i-cache layout (hot functions first, cold ones apart and for size).
// The guard tries variants without them (docs/guard.md, "Knob tuning").
enum class ProfilePart { kept, dropped };

// One compiled variant of a program: what it compiles from and with which knobs.
struct Variant {
  VariantBase base = VariantBase::profiled;
  Knobs knobs; // never carries a mode: the base decides it
  // profiled: the profile version whose counts it compiles from; 0: the
  // current profile. An incumbent kept from an earlier profile has one.
  std::int64_t version = 0;
  ProfilePart cs_counts = ProfilePart::kept;
  ProfilePart branch_marks = ProfilePart::kept;
  ProfilePart layout = ProfilePart::kept;

  bool operator==(const Variant&) const = default;
};

// The incumbent as the guard record keeps it (base, knobs, sampled parts);
// version 0 (the caller sets the record's). No incumbent recorded: the plain
// build with the current profile's knobs.
Variant recorded_incumbent(const GuardRecord& record, const ProfileDoc& current);
// "plain O2", "profiled O3 -unroll", "profiled O2 -marks": base, the knobs
// that differ from -O2 and the profile parts left out.
std::string describe(const Variant& v);
// The document a variant compiles from: plain = no functions, mode plain;
// profiled = the current profile's functions, mode derived (optimized),
// without the context-sensitive counts, the branch marks or the layout where
// the variant drops them.
ProfileDoc variant_doc(const Variant& v, const ProfileDoc& current);
// The cache's reference to the build of `v` from `current` (version: the
// profile version it serves under).
cache::ProfileRef variant_ref(const std::string& pk, std::int64_t version, const Variant& v,
                              const ProfileDoc& current);
// The plain build with the profile's knobs (no profile: the defaults): what
// a program whose planned build does not compile is served (lifecycle.h,
// Phase::failed).
Variant plain_variant(const ProfileDoc* current);
// The guard record's form of a variant's knobs (`guard.incumbent.knobs`): the
// knobs member's form, plus `"cs_counts": false` / `"branch_marks": false` /
// `"layout": false` for a dropped profile part; and back (a malformed object:
// nullopt).
nlohmann::json variant_knobs_json(const Variant& v);
std::optional<Variant> variant_from_knobs_json(VariantBase base, const nlohmann::json& j);
// Whether the guard record's incumbent leaves the context-sensitive counts out
// (the guard measured the program faster without them): then the policy does
// not run the context-sensitive round for its later profiles (cs_round.h).
bool incumbent_drops_cs(const GuardRecord& record);
// The steps of the knob sequence, in the order they are tried.
namespace knob_step {
inline constexpr int opt_level = 0; // O3 (or back to O2)
inline constexpr int text32 = 1;    // the text offset 32 (or back to 0)
inline constexpr int cs_counts = 2; // without (or again with) the context-sensitive counts
inline constexpr int marks = 3;     // without (or again with) the `!unpredictable` marks
inline constexpr int layout = 4;    // without (or again with) the i-cache layout
inline constexpr int text16 = 5;    // the text offsets 16 and 48 (each, or back to 0)
inline constexpr int text48 = 6;
inline constexpr int unroll = 7; // unrolling toggled
inline constexpr int vectorize = 8;
inline constexpr int inline500 = 9; // inline threshold 500 (or back to the default)
inline constexpr int inline75 = 10;
} // namespace knob_step
inline constexpr int kKnobVariants = 11;
// The `step`-th knob variant tried from `from` (knob_step above). From a
// plain `from`, a text-offset step tries the `current` profile's build at
// that offset when the profile has counts (the profile lost its trial at one
// placement only). A step that would compile the same code is not applicable
// and gives nullopt: the profile-part steps need a profiled `from` and a
// `current` profile that has context-sensitive counts (marks, a layout);
// nullopt also past the end.
std::optional<Variant> knob_variant(const Variant& from, int step,
                                    const ProfileDoc* current = nullptr);

// What a trial compares, derived from the guard record and the current
// profile (pure; guard_test.cpp). A new profile is tried against the
// incumbent: the build served now (the plain build before any verdict, or an
// earlier profile's build that won its trial).
enum class TrialKind { profile, tuning };
// Which arm a finished trial keeps: the candidate when it was accepted, else
// the incumbent (after "no difference" too; docs/guard.md, "What no
// difference keeps").
Arm kept_arm(const TrialResult& result);
struct Arms {
  Variant incumbent;
  std::optional<Variant> candidate; // none: serve the incumbent, nothing on trial
  TrialKind kind = TrialKind::profile;
  // No decision yet and too few stages for a trial: the profile is served as
  // it is (the incumbent is then the profiled build).
  bool waiting = false;
  // A tuning candidate's step in knob_variant's sequence (steps that are not
  // applicable to this profile are passed over).
  int step = 0;
  // The knob variant that would be tried next if the candidate loses (or,
  // before tuning starts, the first one): compiled ahead of its trial.
  std::optional<Variant> next;
};
Arms arms_of(const GuardRecord& record, const ProfileDoc& current,
             const std::string& current_digest, std::int64_t stages_seen,
             const GuardConfig& config);

// Comparable stages (docs/guard.md): the same entry with the same argument
// shape, i.e. the same scalar argument values and the same buffer element
// types and lengths.
std::string stage_shape(const std::string& entry, const PreparedCall& call);

enum class VariantRole { current, incumbent, candidate };
std::string_view to_string(VariantRole r);

// What one stage serves, and why.
struct StagePlan {
  std::string pk;
  GuardPlanKind kind = GuardPlanKind::not_guarded; // for the program's lifecycle (lifecycle.h)
  VariantRole role = VariantRole::current;
  // The profile to compile and serve; unset: the current profile, as usual.
  std::optional<cache::ProfileRef> variant;
  std::string name;   // the variant, for people ("plain O2")
  std::string reason; // why this stage runs it
  // Set on trial stages:
  std::string trial_id;
  std::int64_t version = 0;           // the profile version planned under
  std::int64_t trial_version = 0;     // the version the trial started under (names the variants)
  std::string current_digest;         // that version's digest
  GuardClock clock = GuardClock::cpu; // what the trial compares (guard.clock when planned)
  // A build to compile ahead of need, in the background at low priority
  // (Orchestrator::precompile): the plain build, so that the first trial
  // stage finds both arms compiled; once the plain build is not needed, the
  // next knob variant, so that its trial starts on a compiled build. Set once
  // per build and daemon.
  std::optional<cache::ProfileRef> ahead;
};

// A stage's times on both clocks, as the exec worker measured the call.
struct StageTimes {
  std::uint64_t wall_ns = 0;
  std::optional<std::uint64_t> cpu_ns; // process CPU time; unset: the reply had none
};
// The time a trial on `clock` compares; unset: the stage has none on it.
std::optional<std::uint64_t> time_on(GuardClock clock, const StageTimes& times);

struct GuardStage {
  bool counted = false;               // the stage's time went into the trial
  std::optional<TrialRecord> verdict; // the trial this stage finished
  // How the trial ended at this stage (a verdict written, or abandoned because
  // the profile changed under it), and the profile version written or found.
  std::optional<TrialEnd> ended;
  std::int64_t version = 0;
  std::string note; // progress or verdict, for the stage's reply
};

struct GuardCounters {
  std::uint64_t trials_started = 0;
  std::uint64_t accepted = 0;      // wins: the candidate became the incumbent
  std::uint64_t rejected = 0;      // reverts: the candidate lost
  std::uint64_t no_difference = 0; // the budget ran out
  std::uint64_t verdict_write_failures = 0;
  std::uint64_t incumbent_stages = 0, candidate_stages = 0; // trial stages counted
  std::uint64_t losing_stages = 0; // counted stages that ran the loser of a finished trial
  std::uint64_t checkpoints = 0;   // running trials' samples saved in the profile
  std::uint64_t resumed = 0;       // trials continued from a saved checkpoint (after a restart)
};

class Guard {
public:
  Guard(cache::KeyStore& keys, FeedbackStore& store, std::string host);

  // Chooses the variant stage `ik` serves. Errors are not the stage's: a
  // store read that fails plans the current profile, with the reason.
  StagePlan plan(const std::string& ik, const std::string& shape, const GuardConfig& config);
  // The same for a stage that resolved its profile key and read the current
  // profile already (null: none yet).
  StagePlan plan(const std::string& pk, const profile_store::StoredProfile* current,
                 const std::string& shape, const GuardConfig& config);
  // After a stage rewrote the program's profile: the build to compile ahead
  // of the trial the new profile will have (the plain build while that is
  // the incumbent), once per build; nullopt when nothing is needed.
  std::optional<cache::ProfileRef> ahead(const std::string& ik, const GuardConfig& config);
  // After the stage ran: `served_digest` is what the served output was
  // compiled for (another variant's while the planned one compiles: not
  // counted); `times` are the call's, the trial takes the one on the clock it
  // was planned with (a stage without it is not counted). May write the
  // verdict into the profile.
  GuardStage record(const StagePlan& plan, const std::string& served_digest,
                    const StageTimes& times, std::int64_t stage, const std::string& program,
                    std::int64_t owner, const GuardConfig& config);
  GuardCounters counters() const;
  // At a clean shutdown: saves each running trial's samples that the last
  // checkpoint does not hold yet (nothing with checkpoint_pairs 0), so a
  // restart loses no pair. Returns how many trials were saved.
  int save_running(const GuardConfig& config);
  // Drops the in-memory state of `pk` (after a reset or delete), or of every key.
  void forget(const std::string& pk);
  void forget_all();

private:
  struct KeyState {
    std::mutex mu;
    std::int64_t stages_seen = 0; // stages planned under a profile with counts
    std::string trial_id;
    std::string shape;             // the comparable shape the trial counts
    std::int64_t since_sample = 0; // planned stages since the trial last counted one
    Trial trial;
    std::optional<Arms> arms; // what trial_id compares
    std::int64_t trial_version = 0;
    std::string trial_digest;    // the profile digest the trial runs under
    std::size_t saved_pairs = 0; // pairs the last checkpoint (or the resumed one) holds
    // The last counted stage, named in a checkpoint written at shutdown.
    std::int64_t last_stage = 0, last_owner = 0;
    std::string last_program;
    std::string incumbent_digest, candidate_digest; // the arms' variant digests
    std::set<std::string> ahead_digests;            // builds asked for ahead of need (bounded)
    // An incumbent from an earlier profile version: that version's document.
    std::int64_t source_version = 0;
    std::shared_ptr<const ProfileDoc> source;
    std::string source_digest;
    // Variant documents already derived, with their digests, by the digest
    // of the profile they came from: a steady stage serves the same variant
    // of the same counts every time, and neither copies nor hashes it again.
    struct Built {
      std::string from_digest;
      Variant variant;
      std::string digest;
      std::shared_ptr<const ProfileDoc> doc;
    };
    std::vector<Built> built; // most recent last, at most kBuiltKept
    // A checkpoint or verdict of this key is being written (without the
    // lock): no other stage starts one until it is back.
    bool write_in_flight = false;
  };
  struct Source {
    const ProfileDoc* doc = nullptr; // what an incumbent with a version compiles from
    std::string digest;              // its digest (with doc)
    std::string fallback;            // why the recorded incumbent could not be used
  };
  // The variants one key may serve or build ahead under one profile.
  static constexpr std::size_t kBuiltKept = 8;
  std::shared_ptr<KeyState> state_of(const std::string& pk);
  // The cache's reference to variant `v` of `from` (whose digest is
  // `from_digest`), derived once per KeyState.
  static cache::ProfileRef built_ref(KeyState& st, const std::string& pk, std::int64_t version,
                                     const Variant& v, const ProfileDoc& from,
                                     const std::string& from_digest);
  // The earlier version a recorded incumbent compiles from, read from the
  // store with the key's lock released (null: not read).
  using VersionRead = std::optional<Expected<std::optional<profile_store::StoredProfile>>>;
  // Under st.mu: incumbent_source would need to read that version.
  bool needs_source_read(KeyState& st, const std::string& pk, const ProfileDoc& current,
                         const std::string& current_digest);
  // Takes the key's lock, having read the version incumbent_source needs
  // (into `read`) without it.
  std::unique_lock<std::mutex> lock_with_source(KeyState& st, const std::string& pk,
                                                const ProfileDoc& current,
                                                const std::string& current_digest,
                                                VersionRead& read);
  // Under st.mu, after lock_with_source.
  Source incumbent_source(KeyState& st, const std::string& pk, GuardRecord& record,
                          const ProfileDoc& current, const std::string& current_digest,
                          VersionRead& read);
  std::optional<cache::ProfileRef> request_ahead(KeyState& st, const std::string& pk,
                                                 const profile_store::StoredProfile& sp,
                                                 const Source& source, const Arms& arms);
  // The guard's writes (guard_writes.cpp) in three steps, so that no lock is
  // held across the store's I/O: what to write is taken from the key's state
  // under its lock (prepare_*: none while another write of the key is in
  // flight), written with the lock released (write_*), and the outcome
  // applied under the lock again (the state may have moved on meanwhile:
  // a checkpoint or verdict of a trial that has since ended changes nothing).
  // What every guard write records about itself (a feedback write by this host).
  profile_store::WriteInfo write_info(std::string reason, std::int64_t stage,
                                      const std::string& program, std::int64_t owner) const;
  struct CheckpointWrite {
    std::string pk, trial_id, trial_digest;
    TrialCheckpoint saved;
    std::size_t pairs = 0;
    profile_store::WriteInfo info;
  };
  // A running trial's samples as a checkpoint, if their pairs are past the
  // last one's.
  std::optional<CheckpointWrite> prepare_checkpoint(const std::string& pk, KeyState& st,
                                                    std::int64_t stage, const std::string& program,
                                                    std::int64_t owner);
  // Writes it into the profile if its digest is still the trial's; true when written.
  bool write_checkpoint(const CheckpointWrite& w, std::string& note);
  void apply_checkpoint(KeyState& st, const CheckpointWrite& w, bool written);
  // Saves st's running trial (lock held on entry and on return, released
  // during the write); true when written.
  bool save_checkpoint(std::unique_lock<std::mutex>& lk, KeyState& st, const CheckpointWrite& w,
                       std::string& note);

  struct VerdictPrep {
    std::string pk, trial_id, current_digest;
    TrialRecord record;
    Arm kept = Arm::incumbent;
    TrialKind kind = TrialKind::profile;
    // The incumbent the verdict leaves.
    VariantBase base = VariantBase::plain;
    nlohmann::json knobs;
    std::int64_t incumbent_version = 0;
    std::string incumbent_digest;
    int next_tuning_step = 0;
    profile_store::WriteInfo info;
  };
  VerdictPrep prepare_verdict(const StagePlan& plan, KeyState& st, const TrialResult& result,
                              Arm kept, std::int64_t stage, const std::string& program,
                              std::int64_t owner);
  // Writes the verdict into the profile: the record and its version, or
  // `ended` abandoned (the profile changed during the trial), or neither
  // (the write failed: the next stage retries).
  struct VerdictWrite {
    std::optional<TrialRecord> record;
    std::optional<TrialEnd> ended;
    std::int64_t version = 0;
  };
  VerdictWrite write_verdict(const VerdictPrep& prep, std::string& note);

  cache::KeyStore& keys_;
  FeedbackStore& store_;
  std::string host_;
  std::mutex states_mu_; // guards the map only
  std::map<std::string, std::shared_ptr<KeyState>> states_;
  mutable std::mutex counters_mu_;
  GuardCounters counters_;
};

} // namespace fdo::daemon
