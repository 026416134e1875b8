// The compilation orchestrator: the patent's stage processes (WO2023234952A1
// FIG. 3-6, design.md section 2) over a memory tier, a disk tier, single-flight
// compiles and a tier-up policy. One call to prepare() is one stage's lookup:
//
//   1. IK from the program (its scope and bytes) and the compiler identity;
//      look IK up in the profile key mapping.
//   2. Not found (first stage): VK = IK + "-v". identify() gives PK; read the
//      current profile for PK (another program may share it); CK for it. An
//      output already under VK compiled for that CK is served; otherwise compile,
//      store under VK, add IK -> PK and CK -> VK (FIG. 6).
//   3. Found: read the current profile for PK, make CK. If the virtual key
//      mapping has CK, look up its VK (then CK). Hit -> serve. Miss (profile
//      rewritten, evicted, corrupt) -> compile with the current profile and store
//      under CK, or, with TierUp::async and an earlier output of the same
//      program at hand, serve that while a background thread compiles CK.
//
// Thread-safe: stages may call prepare() concurrently.
#pragma once

#include "fdo/cache/disk_tier.h"
#include "fdo/cache/entry.h"
#include "fdo/cache/interfaces.h"
#include "fdo/cache/memory_tier.h"
#include "fdo/cache/remote_tier.h"
#include "fdo/util/expected.h"
#include "fdo/util/fd.h"

#include <chrono>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fdo::cache {

// What a stage does when its profile changed and it misses.
enum class TierUp {
  async, // serve the program's previous output, compile the new one in the background
  sync,  // wait for the compile
};
std::string_view to_string(TierUp t);
Expected<TierUp> parse_tier_up(std::string_view s);

// What Orchestrator::precompile did.
enum class Precompiled {
  stored,         // the output is in a tier already: nothing to do
  queued,         // queued behind every stage's tier-up
  already_queued, // queued or compiling already
  held_off,       // its compile failed recently (tier_up_retry_after) or the queue stopped
};
std::string_view to_string(Precompiled p);

enum class Outcome {
  memory_hit,
  disk_hit,
  remote_hit,      // found in the remote tier (then stored in memory and on disk)
  compiled,        // this request ran the compiler
  joined,          // waited for a concurrent request's compile of the same key (single flight)
  tier_up_pending, // served an earlier profile's output; the new one compiles in the background
  // Only in explain records:
  background_compiled, // a background tier-up finished and installed its output
  failed,              // the stage got an error (see ExplainRecord::error)
};
std::string_view to_string(Outcome o);

enum class Reason {
  new_program,               // first stage: no profile key mapping for IK; compiled under VK
  compiler_identity_changed, // first stage of this IK, but these bytes were last compiled under
                             // another identity
  virtual_first_stage, // first stage: an output already stored under VK for this CK was served
  virtual_key_mapping, // hit through the CK -> VK mapping (the first stage's output)
  cache_key,           // hit under CK
  profile_rewritten,   // the profile (or mode) differs from the program's last stage: CK changed
  evicted,             // CK (or its VK) was stored before but is in neither tier
  corrupt_on_disk,     // the stored file failed validation; it was removed
  corrupt_in_remote,   // the remote tier held an entry that failed validation (or another
                       // identity's, or one over the cap); it was not used
  not_cached,          // IK known, but nothing is stored for this CK here
};
std::string_view to_string(Reason r);

struct Explanation {
  Reason reason = Reason::not_cached;
  std::string text; // one line for people
};

// Where the compile of a stage's target stood when the stage was served an
// earlier output instead (Outcome::tier_up_pending).
enum class TierUpState {
  none,      // the stage was served its target
  scheduled, // its compile was queued now, or was queued or running already
  held_off,  // its compile failed recently (tier_up_retry_after) or the queue stopped
};
std::string_view to_string(TierUpState s);

struct StageOutput {
  std::string ik;
  std::string pk;
  std::string ck;          // the CK for the current profile (the target)
  std::string vk;          // the VK when used (first stage, or CK -> VK mapped)
  std::string storage_key; // the key the served entry is stored under (VK or a CK)
  // What the served entry was compiled with (differs from the target while a
  // tier-up is pending). An entry compiled for the target's digest is the
  // target's output, whichever version first compiled it: its version is the
  // target's (a version is bookkeeping, the digest is what compiled).
  std::int64_t profile_version = 0;
  std::string profile_digest;
  CompileMode mode = CompileMode::plain;
  std::int64_t target_profile_version = 0; // the current profile's version
  std::string target_profile_digest;       // the digest the stage asked for
  TierUpState tier_up = TierUpState::none;
  EntryRef entry; // holds object + metadata; the reference is released with the last copy
  Outcome outcome = Outcome::compiled;
  Explanation explanation;
  bool compiled = false; // this request ran the compiler
  double compile_ms = 0; // its compile time, when compiled
  // The stage's explain record, for Orchestrator::record_execution.
  std::uint64_t explain_sequence = 0;
};

struct ExplainRecord {
  std::uint64_t sequence = 0; // increasing per orchestrator
  std::int64_t unix_ms = 0;
  std::string ik, pk, ck, vk, storage_key;
  Outcome outcome = Outcome::failed;
  Reason reason = Reason::not_cached;
  std::string text;
  // Profile version the program last ran with -> the version this stage
  // targeted; -1 where unknown (first stage, or forgotten after a restart).
  std::int64_t from_version = -1;
  std::int64_t to_version = -1;
  std::string from_digest, to_digest;
  CompileMode mode = CompileMode::plain; // mode of the target CK
  double compile_ms = 0;
  std::string error; // for Outcome::failed
  // Wall time of the stage's execution, once the caller ran the output and
  // said so (record_execution); unset for a compile-only stage, a failed one,
  // a background tier-up's record, or an output run in the client's process.
  std::optional<std::uint64_t> exec_ns;
  // The compiled variant the stage ran, as the live A/B guard named it
  // (record_variant): role current/incumbent/candidate and e.g. "plain O2";
  // empty where nothing said (compile-only, in-process, tier-up records).
  std::string variant_role, variant_name;
};
nlohmann::json to_json(const ExplainRecord& r);

struct Stats {
  std::uint64_t prepares = 0;
  std::uint64_t failures = 0;
  std::uint64_t memory_hits = 0, memory_misses = 0;
  std::uint64_t disk_hits = 0, disk_misses = 0;
  std::uint64_t compiles = 0;   // compiler runs (first stages + recompiles)
  std::uint64_t recompiles = 0; // compiler runs for programs whose PK was already known
  std::uint64_t compile_failures = 0;
  double compile_ms_total = 0;
  std::uint64_t single_flight_waits = 0; // requests that waited for another's compile/load
  std::uint64_t tier_ups_started = 0, tier_ups_installed = 0, tier_ups_failed = 0;
  // Compiles queued ahead of need (precompile), apart from the tier-ups.
  std::uint64_t ahead_started = 0, ahead_installed = 0, ahead_failed = 0;
  std::uint64_t stale_serves = 0;     // stages served an earlier profile's output (tier_up_pending)
  std::uint64_t key_store_errors = 0; // mapping writes that failed (the stage still succeeded)
  std::uint64_t memory_evictions = 0, disk_evictions = 0;
  // Compiles whose program was evicted while they ran: their output was
  // dropped again (no orphan), and queued compiles of it that never ran.
  std::uint64_t dropped_after_evict = 0, queued_dropped_by_evict = 0;
  std::uint64_t memory_entries = 0, memory_bytes = 0, memory_budget_bytes = 0;
  std::uint64_t memory_held_entries = 0, memory_held_bytes = 0; // marked, still referenced
  std::uint64_t disk_entries = 0, disk_bytes = 0, disk_budget_bytes = 0;
  std::uint64_t corrupt_entries = 0;
  std::uint64_t disk_store_failures = 0;
  std::uint64_t stray_files_removed = 0;
  std::uint64_t tier_ups_queued = 0;     // waiting or running now
  std::optional<RemoteTierStats> remote; // set when a remote tier is configured
};
nlohmann::json to_json(const Stats& s);

struct Config {
  std::string state_dir; // entries under <state_dir>/cache; empty = memory tier only
  // 0 = off: the memory tier keeps only entries in use; no disk tier.
  std::uint64_t memory_budget_bytes = std::uint64_t(256) << 20;
  std::uint64_t disk_budget_bytes = std::uint64_t(4) << 30;
  Durability disk_durability = Durability::fsync;
  TierUp tier_up = TierUp::async;
  unsigned tier_up_threads = 1;
  // After a background compile fails, async stages keep serving the earlier
  // output without retrying the same CK for this long (a sync stage retries at once).
  std::chrono::milliseconds tier_up_retry_after{30000};
  std::size_t explain_records_per_program = 64;
  std::size_t max_tracked_programs = 10000; // per-IK history (explain, tier-up) kept in memory
  // Consulted after memory and disk miss, before a compile; written after
  // every compile. Null = none (one host).
  std::shared_ptr<RemoteTier> remote;
};

class Orchestrator {
public:
  // Opens the disk tier when config.state_dir is set (removing stray temp
  // files) and starts the tier-up threads. `keys` and `compiler` must outlive it.
  static Expected<std::unique_ptr<Orchestrator>> create(Config config, KeyStore& keys,
                                                        Compiler& compiler);
  // Waits for running background compiles; queued ones are dropped.
  ~Orchestrator();
  Orchestrator(const Orchestrator&) = delete;
  Orchestrator& operator=(const Orchestrator&) = delete;

  // One stage's lookup (see the top of this file), with the configured policy.
  // The orchestrator computes the IK itself: program.ik is trusted only when
  // program.ik_identity is the compiler's current identity, which only
  // stamp_initial_key sets (a program record stamped once is not hashed again
  // each stage; a new identity means a new IK). The
  // compiler receives the program with its IK filled in: the caller's own
  // object when program.ik already holds that IK (initial_key_for), otherwise
  // a copy made only on a stage that identifies or compiles. invalid_argument
  // for a scope with a newline, or unscoped bytes starting with kScopeTag
  // (keys.h check_scope).
  Expected<StageOutput> prepare(const Program& program);
  Expected<StageOutput> prepare(const Program& program, TierUp policy);
  // The same stage, compiling and looking up `variant` instead of PK's current
  // profile: a document derived from it (the guard's plain build or a knob
  // variant, docs/guard.md), with its own digest, so its CK is an ordinary
  // profile-embedded key. Used only for a program whose IK -> PK is known and
  // equals variant.pk; otherwise this is prepare(program, policy). With
  // TierUp::async a miss serves the program's previous output (of whichever
  // variant) while the variant compiles: StageOutput::profile_digest says what
  // was served.
  Expected<StageOutput> prepare(const Program& program, TierUp policy, const ProfileRef& variant);
  // Ahead of need: makes sure the output a later prepare(program, policy,
  // variant) looks up exists, compiling it in the background at the lowest
  // priority (after every queued stage tier-up) when no tier holds it. No
  // stage, no explain record until the compile ends. Same precondition as the
  // variant prepare: the program's IK -> PK is known and equals variant.pk
  // (invalid_argument otherwise).
  Expected<Precompiled> precompile(const Program& program, const ProfileRef& variant);
  // Right after PK's profile was rewritten: makes sure the output the
  // program's next stage looks up under PK's current profile exists, queueing
  // its compile as a stage's tier-up (ahead of every precompile; `queued`
  // means that here) when no tier holds it. A sync stage then joins the
  // compile under way (single flight) instead of starting its own behind a
  // build compiling ahead of need: with one compile worker, a big program's
  // first optimized stage waited for the guard's plain build first. The
  // program's IK -> PK must be known (invalid_argument otherwise).
  Expected<Precompiled> tier_up_current(const Program& program);
  // The same four with a program the caller shares: the compile a stage or a
  // precompile queues for later keeps `program` alive instead of copying its
  // bytes (the Program& forms copy them into the job). Not null.
  Expected<StageOutput> prepare(const SharedProgram& program, TierUp policy);
  Expected<StageOutput> prepare(const SharedProgram& program, TierUp policy,
                                const ProfileRef& variant);
  Expected<Precompiled> precompile(const SharedProgram& program, const ProfileRef& variant);
  Expected<Precompiled> tier_up_current(const SharedProgram& program);

  // IK of the program (scope and bytes) under the compiler's current identity.
  std::string initial_key_for(const Program& program) const;
  // The same, kept in the program: sets program.ik and program.ik_identity
  // (the identity it was computed under). Returns the IK.
  std::string stamp_initial_key(Program& program) const;
  // The stage records kept for IK, oldest first (bounded).
  std::vector<ExplainRecord> explain(const std::string& ik) const;
  // Notes how long the stage prepared as `explain_sequence` (StageOutput) took
  // to execute, for its explain record; nothing when the record is gone.
  void record_execution(const std::string& ik, std::uint64_t explain_sequence,
                        std::uint64_t exec_ns);
  // Notes which variant that stage ran (docs/guard.md), for the same record.
  void record_variant(const std::string& ik, std::uint64_t explain_sequence, std::string role,
                      std::string name);
  Stats stats() const;
  // Blocks until no tier-up is queued or running.
  void wait_idle();
  // Drops every entry whose storage key starts with `prefix` (an IK drops a
  // whole program) from both tiers; held entries are freed on release.
  // Background compiles of it still queued are dropped, and a compile of it
  // running now drops its output again once stored (a deleted program's
  // objects never come back behind its delete).
  std::size_t evict(std::string_view prefix);

  const Config& config() const;
  // Exposed for tests and diagnostics.
  MemoryTier& memory_tier();
  DiskTier* disk_tier(); // null without a state dir

  struct Impl;

private:
  explicit Orchestrator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

} // namespace fdo::cache
