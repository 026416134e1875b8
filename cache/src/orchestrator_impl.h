// The orchestrator's state (Orchestrator::Impl: the config, the key store and
// compiler it was given, the tiers and the parts beside them) and the steps of
// its stage processes, with what a stage carries between them. Private to
// fdo_cache; the steps are stage_steps.cpp (prepare, first and later stage,
// compile-and-store), stage_results.cpp (outputs, counts, explain records)
// and tier_up.cpp (precompile and background compiles).
#pragma once

#include "ahead_builds.h"
#include "counters.h"
#include "explain_log.h"
#include "fdo/cache/orchestrator.h"
#include "identity_history.h"
#include "single_flight.h"
#include "tier_lookup.h"
#include "tier_up_queue.h"

#include <optional>
#include <string>
#include <vector>

namespace fdo::cache {

namespace detail {

// A found or freshly compiled entry, as a compile flight hands it to every waiter.
struct Fetched {
  EntryRef entry;
  Outcome source = Outcome::compiled; // memory_hit, disk_hit, remote_hit or compiled
  std::string key;                    // storage key it was found/stored under
  double compile_ms = 0;
  std::string explanation; // the compiler's (CompiledOutput::explanation), when it compiled
};

// Where a compile's output goes: under VK with the FIG. 6 mapping updates
// (first stage) or under CK (every later stage).
enum class Placement { virtual_key, cache_key };

// Everything one stage has learned about its program so far.
struct Target {
  std::string ik, pk, ck, vk; // vk: the mapped VK, or the first stage's VK
  ProfileRef profile;
  CompileMode mode = CompileMode::plain;
  std::string identity;
  std::vector<std::string> candidates; // storage keys to look up, in order
  // TierLookup::eviction_mark() when the stage (or precompile) began: its
  // compile's output is dropped again if its program is evicted meanwhile.
  std::uint64_t eviction_mark = 0;

  detail::Wanted wanted() const { return {ik, ck, identity, candidates}; }
};

// "profile vN, mode" (or "no profile, mode"), as explanations name a profile.
std::string describe_profile(std::int64_t version, CompileMode mode);

} // namespace detail

using detail::Fetched;
using detail::Placement;
using detail::Served;
using detail::Target;

struct Orchestrator::Impl {
  Impl(Config c, KeyStore& k, Compiler& comp, std::unique_ptr<MemoryTier> memory,
       std::unique_ptr<DiskTier> disk, std::string programs_dir)
      : config(std::move(c)), keys(k), compiler(comp),
        tiers(std::move(memory), std::move(disk), config.remote),
        explain(config.explain_records_per_program, config.max_tracked_programs),
        identities(std::move(programs_dir), config.max_tracked_programs),
        tier_ups(config.tier_up_threads, config.tier_up_retry_after, config.max_tracked_programs) {}

  Config config;
  KeyStore& keys;
  Compiler& compiler;
  detail::StageCounters n;
  detail::TierLookup tiers;
  detail::ExplainLog explain;
  detail::IdentityHistory identities;
  detail::SingleFlight<Fetched> compile_flights;
  detail::AheadBuilds ahead_builds;
  // Last: its threads run jobs that use every member above, so it is built
  // after them and stopped before them.
  detail::TierUpQueue tier_ups;

  // ------------------------------------------------------------ stage steps
  // (stage_steps.cpp)

  // The program's IK under `identity`: the stamped one, else hashed now.
  static std::string stage_ik(const Program& program, const std::string& identity);

  // Design step 1: IK, and the profile key mapping decides which stage this is.
  // `shared`: the caller's shared `program` (null: none), which a compile
  // queued for later keeps instead of a copy of the bytes.
  Expected<StageOutput> prepare(const Program& program, TierUp policy,
                                const ProfileRef* variant = nullptr,
                                const SharedProgram* shared = nullptr);

  // Design step 2 / patent FIG. 5 steps 506-508 and FIG. 6.
  Expected<StageOutput> first_stage(Target t, const Program& given);

  // Design step 3 / patent FIG. 5 steps 510-518 and FIG. 4.
  Expected<StageOutput> later_stage(Target t, const Program& program, TierUp policy,
                                    const ProfileRef* variant, const SharedProgram* shared);

  // The body of a compile flight (FIG. 4 steps 412-418): re-check (a flight
  // that just finished may have stored the output), then compile and store.
  // `urgency`: a build ahead of need's (background priority); null: a stage's.
  Expected<Fetched> compile_and_store(const Target& t, const Program& given, Placement where,
                                      const std::shared_ptr<Urgency>& urgency);

  // The current profile for t.pk, the mode it asks for and the CK they give.
  Status read_profile(Target& t);

  // A caller-chosen profile (a variant of the current one) in its place.
  Status use_profile(Target& t, const ProfileRef& variant);

  // FIG. 6 steps 610 and 616; a failure costs a future recompile, not this stage.
  void record_mappings(const Target& t, std::string& note);

  // A remote entry that could not be used is the reason for the compile
  // unless the profile changed; an unreachable remote tier is mentioned.
  static void note_remote_miss(const detail::Found& found, Explanation& why);

  Explanation miss_reason(const Target& t, const std::optional<Served>& prev,
                          const detail::Found& found) const;

  // ------------------------------------------------------- stage results
  // (stage_results.cpp)

  StageOutput output_for(const Target& t, const EntryRef& ref, Outcome outcome,
                         Explanation why) const;

  StageOutput stage_from_flight(const Target& t, const Fetched& f, detail::FlightRole role,
                                Explanation why) const;

  StageOutput finish(const Target& t, const std::optional<Served>& prev, StageOutput s);

  ExplainRecord base_record(const Target& t, const std::optional<Served>& prev) const;

  Error fail(ExplainRecord r, Error err);

  // ---------------------------------------------------------------- tier-up
  // (tier_up.cpp)

  // Ahead of need (Orchestrator::precompile, Orchestrator::tier_up_current):
  // `variant`, or PK's current profile when null, queued at `priority`.
  Expected<Precompiled> precompile(const Program& program, const ProfileRef* variant,
                                   detail::JobPriority priority,
                                   const SharedProgram* shared = nullptr);

  // Queues t's compile; the job keeps `shared` when given and carrying t's
  // IK, else its own copy of the program.
  detail::Scheduled schedule(const Target& t, const Program& program, detail::JobPriority priority,
                             const SharedProgram* shared);

  // `ahead`: a precompile's Urgency (no stage asked for it yet); counted apart
  // from tier-ups. Null: a tier-up.
  detail::JobResult run_tier_up(const Target& t, const Program& program,
                                const std::shared_ptr<Urgency>& ahead);
};

} // namespace fdo::cache
