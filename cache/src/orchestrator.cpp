// The stage processes of WO2023234952A1 (FIG. 3-6, design.md section 2) in
// one place: prepare (IK, then the profile key mapping), first stage (FIG. 5
// steps 506-508 and FIG. 6), later stage (FIG. 5 steps 510-518 and FIG. 4) and
// compile-and-store.
// The parts they use live beside this file, each behind its own lock:
//   tier_lookup     memory, disk, then the remote tier (if any), single-flight
//                   loads and fetches, storing outputs
//   explain_log     per-IK explain records and what each program last served
//   identity_history  the compiler identity each program was last compiled under
//   tier_up_queue   background compiles: dedupe by CK, retry-after, wait_idle, stop
//   counters        the Stats counters
#include "fdo/cache/orchestrator.h"

#include "counters.h"
#include "explain_log.h"
#include "fdo/cache/keys.h"
#include "fdo/util/enum_names.h"
#include "fdo/util/log.h"
#include "fdo/util/time.h"
#include "identity_history.h"
#include "short_key.h"
#include "single_flight.h"
#include "tier_lookup.h"
#include "tier_up_queue.h"

#include <filesystem>
#include <optional>

namespace fdo::cache {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using detail::Served;
using detail::short_key;

namespace {

constexpr EnumNames<TierUp, 2> kTierUpNames{{{{TierUp::async, "async"}, {TierUp::sync, "sync"}}}};

// Appended to a hit's explanation when the entry came from another host.
std::string from_remote(Outcome source) {
  return source == Outcome::remote_hit ? " (from the remote tier)" : "";
}

std::string describe_profile(std::int64_t version, CompileMode mode) {
  std::string s = version == 0 ? std::string("no profile") : "profile v" + std::to_string(version);
  return s + ", " + std::string(to_string(mode));
}

// A found or freshly compiled entry, as a compile flight hands it to every waiter.
struct Fetched {
  EntryRef entry;
  Outcome source = Outcome::compiled; // memory_hit, disk_hit, remote_hit or compiled
  std::string key;                    // storage key it was found/stored under
  double compile_ms = 0;
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

  detail::Wanted wanted() const { return {ik, ck, identity, candidates}; }
};

// The program as the compiler must see it: with its IK. The caller's object
// when it carries that IK already; otherwise a copy, made only here, on a
// path that identifies or compiles (a hit never copies the bytes).
const Program& with_ik(const Program& given, const std::string& ik, std::optional<Program>& copy) {
  if (given.ik == ik) return given;
  if (!copy) copy.emplace(Program{ik, given.scope, given.bytes});
  return *copy;
}

// A KeyStore adapter bug must not turn into a wrong CK.
Status check_profile(const ProfileRef& p, const std::string& pk) {
  if (p.digest.empty())
    return make_error(Errc::internal,
                      "key store returned a profile for " + short_key(pk) + " without a digest");
  if (p.version < 0 || (p.version > 0) != (p.doc != nullptr))
    return make_error(Errc::internal, "key store returned an inconsistent profile for " +
                                          short_key(pk) + " (version " + std::to_string(p.version) +
                                          ")");
  return ok();
}

} // namespace

std::string_view to_string(TierUp t) {
  return kTierUpNames.name(t);
}

std::string_view to_string(TierUpState s) {
  static constexpr EnumNames<TierUpState, 3> kNames{{{{TierUpState::none, "none"},
                                                      {TierUpState::scheduled, "scheduled"},
                                                      {TierUpState::held_off, "held_off"}}}};
  return kNames.name(s);
}

std::string_view to_string(Precompiled p) {
  static constexpr EnumNames<Precompiled, 4> kNames{
      {{{Precompiled::stored, "stored"},
        {Precompiled::queued, "queued"},
        {Precompiled::already_queued, "already_queued"},
        {Precompiled::held_off, "held_off"}}}};
  return kNames.name(p);
}

Expected<TierUp> parse_tier_up(std::string_view s) {
  if (std::optional<TierUp> t = kTierUpNames.parse(s)) return *t;
  return make_error(Errc::invalid_argument, "unknown tier-up policy \"" + std::string(s) +
                                                "\" (expected " + kTierUpNames.alternatives() +
                                                ")");
}

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
  // Last: its threads run jobs that use every member above, so it is built
  // after them and stopped before them.
  detail::TierUpQueue tier_ups;

  // ------------------------------------------------------------ stage steps

  // Design step 1: IK, and the profile key mapping decides which stage this is.
  Expected<StageOutput> prepare(const Program& program, TierUp policy,
                                const ProfileRef* variant = nullptr) {
    n.prepares++;
    Target t;
    if (auto st = check_scope(program.scope, program.bytes); !st)
      return fail(base_record(t, std::nullopt), std::move(st).error());
    t.identity = compiler.identity();
    t.ik = initial_key(program.scope, program.bytes, t.identity);
    auto pk = keys.lookup_profile_key(t.ik);
    if (!pk)
      return fail(base_record(t, std::nullopt),
                  std::move(pk).error().context("look up the profile key mapping"));
    if (!*pk) return first_stage(std::move(t), program);
    t.pk = **pk;
    return later_stage(std::move(t), program, policy,
                       variant != nullptr && variant->pk == t.pk ? variant : nullptr);
  }

  // Design step 2 / patent FIG. 5 steps 506-508 and FIG. 6.
  Expected<StageOutput> first_stage(Target t, const Program& given) {
    t.vk = virtual_key(t.ik);
    t.candidates = {t.vk};
    std::optional<Program> copy;
    const Program& program = with_ik(given, t.ik, copy);
    ExplainRecord failure = base_record(t, std::nullopt);
    failure.reason = Reason::new_program;
    auto ident = compiler.identify(program);
    if (!ident) return fail(failure, std::move(ident).error().context("identify"));
    if (ident->pk.empty())
      return fail(base_record(t, std::nullopt),
                  make_error(Errc::internal, "compiler identified the program with an empty PK"));
    t.pk = ident->pk;
    if (auto st = read_profile(t); !st)
      return fail(base_record(t, std::nullopt), std::move(st).error());

    // FIG. 4 step 408: the VK may already hold an output (the mappings were
    // lost); it is served only if it was compiled for the current profile.
    detail::Found found = tiers.find_existing(t.wanted());
    if (found.entry) {
      std::string note;
      record_mappings(t, note);
      Explanation why{Reason::virtual_first_stage,
                      "first stage: an output for this profile (" +
                          describe_profile(t.profile.version, t.mode) +
                          ") was already stored under the virtual key" + from_remote(found.source) +
                          "; recorded IK->PK and CK->VK" + note};
      return finish(t, std::nullopt, output_for(t, found.entry, found.source, std::move(why)));
    }

    std::string phash = program_hash(program.scope, program.bytes);
    std::optional<std::string> seen_under = identities.last_identity(phash);
    Explanation why;
    if (seen_under && *seen_under != t.identity) {
      why.reason = Reason::compiler_identity_changed;
      why.text = "compiler identity changed from \"" + *seen_under + "\" to \"" + t.identity +
                 "\": the IK differs, so no output of the old compiler is reused; compiled "
                 "under the virtual key with " +
                 describe_profile(t.profile.version, t.mode);
    } else {
      why.reason = Reason::new_program;
      why.text = "first stage: no profile key mapping for this IK; compiled under the virtual "
                 "key with " +
                 describe_profile(t.profile.version, t.mode) +
                 (t.profile.version > 0 ? " (profile key shared with another program)" : "");
    }
    note_remote_miss(found, why);

    auto [fetched, role] = compile_flights.run(t.vk, [&]() -> Expected<Fetched> {
      auto f = compile_and_store(t, program, Placement::virtual_key);
      if (f && f->source == Outcome::compiled) {
        std::string note;
        record_mappings(t, note);
        if (!note.empty()) why.text += note;
      }
      return f;
    });
    if (!fetched) return fail(base_record(t, std::nullopt), std::move(fetched).error());
    identities.remember(phash, t.identity, t.ik);
    StageOutput s = stage_from_flight(t, *fetched, role, std::move(why));
    if (s.outcome == Outcome::memory_hit || s.outcome == Outcome::disk_hit ||
        s.outcome == Outcome::remote_hit)
      s.explanation = {Reason::virtual_first_stage,
                       "first stage: the output under the virtual key was stored meanwhile" +
                           from_remote(s.outcome)};
    return finish(t, std::nullopt, std::move(s));
  }

  // Design step 3 / patent FIG. 5 steps 510-518 and FIG. 4.
  Expected<StageOutput> later_stage(Target t, const Program& program, TierUp policy,
                                    const ProfileRef* variant) {
    if (auto st = variant ? use_profile(t, *variant) : read_profile(t); !st)
      return fail(base_record(t, std::nullopt), std::move(st).error());
    auto vk = keys.lookup_virtual_key(t.ck);
    if (!vk)
      return fail(base_record(t, std::nullopt),
                  std::move(vk).error().context("look up the virtual key mapping"));
    if (*vk) {
      if (auto mapped_ik = ik_of_virtual_key(**vk); mapped_ik && *mapped_ik == t.ik) {
        t.vk = **vk;
        t.candidates.push_back(t.vk);
      } else {
        log::warning("cache: ignoring virtual key mapping " + short_key(t.ck) + " -> \"" +
                     (**vk).substr(0, 80) + "\": not this program's virtual key");
      }
    }
    t.candidates.push_back(t.ck);
    std::optional<Served> prev = explain.last_served(t.ik);

    detail::Found found = tiers.find_existing(t.wanted());
    if (found.entry) {
      Explanation why;
      if (found.key == t.vk)
        why = {Reason::virtual_key_mapping,
               "hit through the virtual key mapping CK -> VK (first-stage output, " +
                   describe_profile(t.profile.version, t.mode) + ")"};
      else
        why = {Reason::cache_key,
               "hit under CK (" + describe_profile(t.profile.version, t.mode) + ")"};
      why.text += from_remote(found.source);
      return finish(t, prev, output_for(t, found.entry, found.source, std::move(why)));
    }

    Explanation why = miss_reason(t, prev, found);
    note_remote_miss(found, why);
    if (policy == TierUp::async) {
      std::string last_served = prev && prev->ck != t.ck ? prev->storage_key : std::string();
      if (EntryRef previous = tiers.find_previous(t.wanted(), last_served)) {
        const detail::Scheduled scheduled = schedule(t, program, detail::JobPriority::stage);
        n.stale_serves++;
        const char* state = " while the new one compiles in the background";
        if (scheduled == detail::Scheduled::already_queued)
          state = " while the new one's background compile, already under way, finishes";
        else if (scheduled == detail::Scheduled::failed_recently)
          state = " (its background compile failed recently: not retried yet)";
        else if (scheduled == detail::Scheduled::stopped)
          state = " (background compiles have stopped)";
        why.text += "; serving the output for " +
                    describe_profile(previous->info.profile_version, previous->info.mode) + state;
        StageOutput s = output_for(t, previous, Outcome::tier_up_pending, std::move(why));
        s.tier_up =
            scheduled == detail::Scheduled::queued || scheduled == detail::Scheduled::already_queued
                ? TierUpState::scheduled
                : TierUpState::held_off;
        return finish(t, prev, std::move(s));
      }
    }
    auto [fetched, role] = compile_flights.run(
        t.ck, [&] { return compile_and_store(t, program, Placement::cache_key); });
    if (!fetched) {
      ExplainRecord r = base_record(t, prev);
      r.reason = why.reason;
      return fail(std::move(r), std::move(fetched).error());
    }
    return finish(t, prev, stage_from_flight(t, *fetched, role, std::move(why)));
  }

  // The body of a compile flight (FIG. 4 steps 412-418): re-check (a flight
  // that just finished may have stored the output), then compile and store.
  Expected<Fetched> compile_and_store(const Target& t, const Program& given, Placement where) {
    if (detail::Found again = tiers.find_existing(t.wanted(), detail::RemoteLookup::skip);
        again.entry)
      return Fetched{again.entry, again.source, again.key, 0};
    std::optional<Program> copy;
    const Program& program = with_ik(given, t.ik, copy);
    auto start = Clock::now();
    auto out = compiler.compile(program, t.profile, t.mode);
    double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    n.compile_us += static_cast<std::uint64_t>(ms * 1000);
    if (out && out->object.empty())
      out = make_error(Errc::compile, "the compiler returned an empty object");
    if (!out) {
      n.compile_failures++;
      return std::move(out).error().context("compile " + short_key(t.ik) + " (" +
                                            describe_profile(t.profile.version, t.mode) + ")");
    }
    n.compiles++;
    if (where == Placement::cache_key) n.recompiles++;
    auto entry = std::make_shared<Entry>();
    entry->key = where == Placement::virtual_key ? t.vk : t.ck;
    entry->info.ck = t.ck;
    entry->info.compiler_identity = t.identity;
    entry->info.pk = t.pk;
    entry->info.profile_version = t.profile.version;
    entry->info.profile_digest = t.profile.digest;
    entry->info.mode = t.mode;
    entry->info.program_hash = program_hash(program.scope, program.bytes);
    entry->info.created_unix_ms = unix_ms_now();
    entry->object = std::move(out->object);
    entry->metadata = std::move(out->metadata);
    std::string key = entry->key;
    EntryRef ref = tiers.store(std::move(entry));
    return Fetched{std::move(ref), Outcome::compiled, std::move(key), ms};
  }

  // The current profile for t.pk, the mode it asks for and the CK they give.
  Status read_profile(Target& t) {
    auto profile = keys.current_profile(t.pk);
    if (!profile)
      return std::move(profile).error().context("read the profile for " + short_key(t.pk));
    FDO_TRY_STATUS(check_profile(*profile, t.pk));
    t.profile = std::move(*profile);
    t.mode = choose_mode(t.profile.doc.get());
    t.ck = cache_key(t.ik, t.profile.digest, t.mode);
    return ok();
  }

  // A caller-chosen profile (a variant of the current one) in its place.
  Status use_profile(Target& t, const ProfileRef& variant) {
    FDO_TRY_STATUS(check_profile(variant, t.pk));
    t.profile = variant;
    t.mode = choose_mode(t.profile.doc.get());
    t.ck = cache_key(t.ik, t.profile.digest, t.mode);
    return ok();
  }

  // FIG. 6 steps 610 and 616; a failure costs a future recompile, not this stage.
  void record_mappings(const Target& t, std::string& note) {
    if (auto st = keys.put_profile_key(t.ik, t.pk); !st) {
      n.key_store_errors++;
      note += "; could not record IK->PK: " + st.error().describe();
      log::warning("cache: recording IK->PK for " + short_key(t.ik) +
                   " failed: " + st.error().describe());
    }
    if (auto st = keys.put_virtual_key(t.ck, t.vk); !st) {
      n.key_store_errors++;
      note += "; could not record CK->VK: " + st.error().describe();
      log::warning("cache: recording CK->VK for " + short_key(t.ck) +
                   " failed: " + st.error().describe());
    }
  }

  // A remote entry that could not be used is the reason for the compile
  // unless the profile changed; an unreachable remote tier is mentioned.
  static void note_remote_miss(const detail::Found& found, Explanation& why) {
    if (found.remote_corrupt && why.reason != Reason::profile_rewritten &&
        why.reason != Reason::compiler_identity_changed) {
      why.reason = Reason::corrupt_in_remote;
      why.text = "the remote tier's entry " + short_key(found.remote_corrupt->key) +
                 " was not used (" + found.remote_corrupt->problem + "); " + why.text;
    }
    if (!found.remote_unavailable.empty())
      why.text += "; remote tier unavailable: " + found.remote_unavailable;
  }

  Explanation miss_reason(const Target& t, const std::optional<Served>& prev,
                          const detail::Found& found) const {
    std::string profile = describe_profile(t.profile.version, t.mode);
    if (prev && prev->ck != t.ck) {
      std::string text = "profile for " + short_key(t.pk) + " changed from " +
                         describe_profile(prev->version, prev->mode) + " to " + profile +
                         " (digest " + short_key(prev->digest) + " -> " +
                         short_key(t.profile.digest) + "): CK changed";
      return {Reason::profile_rewritten, std::move(text)};
    }
    if (found.corrupt)
      return {Reason::corrupt_on_disk, "the stored output " + short_key(found.corrupt->key) +
                                           " failed validation (" + found.corrupt->problem +
                                           ") and was removed"};
    for (const std::string& key : t.candidates) {
      detail::EvictedFrom from = tiers.evicted_from(key);
      // A mapped VK proves the first stage's output was stored once.
      if (from != detail::EvictedFrom::neither || key == t.vk)
        return {Reason::evicted, "the output for " + profile + " was stored under " +
                                     short_key(key) + " but has been evicted" +
                                     (from == detail::EvictedFrom::both ? " from memory and disk"
                                      : from == detail::EvictedFrom::memory ? " from memory"
                                                                            : "")};
    }
    return {Reason::not_cached, "no output for " + profile + " is stored"};
  }

  // ------------------------------------------------------- stage results

  StageOutput output_for(const Target& t, const EntryRef& ref, Outcome outcome,
                         Explanation why) const {
    StageOutput s;
    s.ik = t.ik;
    s.pk = t.pk;
    s.ck = t.ck;
    s.vk = t.vk;
    s.storage_key = ref->key;
    s.profile_digest = ref->info.profile_digest;
    s.mode = ref->info.mode;
    s.target_profile_version = t.profile.version;
    s.target_profile_digest = t.profile.digest;
    // Compiled for the target's digest (an earlier version with the same
    // compile-affecting content, e.g. a re-profile that counted the same):
    // it is the target's output.
    s.profile_version = ref->info.profile_digest == t.profile.digest && ref->info.mode == t.mode
                            ? t.profile.version
                            : ref->info.profile_version;
    s.entry = ref;
    s.outcome = outcome;
    s.explanation = std::move(why);
    return s;
  }

  StageOutput stage_from_flight(const Target& t, const Fetched& f, detail::FlightRole role,
                                Explanation why) const {
    Outcome outcome = f.source;
    if (role == detail::FlightRole::waiter && f.source == Outcome::compiled)
      outcome = Outcome::joined;
    StageOutput s = output_for(t, f.entry, outcome, std::move(why));
    s.compiled = outcome == Outcome::compiled;
    s.compile_ms = s.compiled ? f.compile_ms : 0;
    return s;
  }

  StageOutput finish(const Target& t, const std::optional<Served>& prev, StageOutput s) {
    switch (s.outcome) {
    case Outcome::memory_hit:
      n.memory_hits++;
      break;
    case Outcome::disk_hit:
      n.memory_misses++;
      n.disk_hits++;
      break;
    case Outcome::remote_hit: // counted as a hit by the remote tier itself
      n.memory_misses++;
      if (tiers.disk()) n.disk_misses++;
      break;
    default:
      n.memory_misses++;
      if (tiers.disk()) n.disk_misses++;
      break;
    }
    ExplainRecord r = base_record(t, prev);
    r.storage_key = s.storage_key;
    r.outcome = s.outcome;
    r.reason = s.explanation.reason;
    r.text = s.explanation.text;
    r.compile_ms = s.compile_ms;
    s.explain_sequence =
        explain.record(std::move(r), Served{s.storage_key, s.entry->info.ck, s.profile_digest,
                                            s.profile_version, s.mode});
    return s;
  }

  ExplainRecord base_record(const Target& t, const std::optional<Served>& prev) const {
    ExplainRecord r;
    r.ik = t.ik;
    r.pk = t.pk;
    r.ck = t.ck;
    r.vk = t.vk;
    r.to_version = t.profile.version;
    r.to_digest = t.profile.digest;
    r.mode = t.mode;
    if (prev) {
      r.from_version = prev->version;
      r.from_digest = prev->digest;
    }
    return r;
  }

  Error fail(ExplainRecord r, Error err) {
    n.failures++;
    r.outcome = Outcome::failed;
    r.error = err.describe();
    r.text = "stage failed: " + r.error;
    if (!r.ik.empty()) explain.record(std::move(r), std::nullopt);
    return err;
  }

  // ---------------------------------------------------------------- tier-up

  // Ahead of need (Orchestrator::precompile).
  Expected<Precompiled> precompile(const Program& program, const ProfileRef& variant) {
    Target t;
    FDO_TRY_STATUS(check_scope(program.scope, program.bytes));
    t.identity = compiler.identity();
    t.ik = initial_key(program.scope, program.bytes, t.identity);
    auto pk = keys.lookup_profile_key(t.ik);
    if (!pk) return std::move(pk).error().context("look up the profile key mapping");
    if (!*pk || **pk != variant.pk)
      return make_error(Errc::invalid_argument,
                        "precompile " + short_key(t.ik) +
                            ": the program's profile key is not the variant's (not yet known)");
    t.pk = **pk;
    FDO_TRY_STATUS(use_profile(t, variant));
    t.candidates.push_back(t.ck);
    if (tiers.find_existing(t.wanted()).entry) return Precompiled::stored;
    switch (schedule(t, program, detail::JobPriority::background)) {
    case detail::Scheduled::queued:
      return Precompiled::queued;
    case detail::Scheduled::already_queued:
      return Precompiled::already_queued;
    case detail::Scheduled::failed_recently:
    case detail::Scheduled::stopped:
      break;
    }
    return Precompiled::held_off;
  }

  detail::Scheduled schedule(const Target& t, const Program& program,
                             detail::JobPriority priority) {
    // A sync stage compiling this CK right now already does the job.
    if (compile_flights.in_flight(t.ck)) return detail::Scheduled::already_queued;
    return tier_ups.schedule(
        t.ck,
        [&] {
          const bool ahead = priority == detail::JobPriority::background;
          (ahead ? n.ahead_started : n.tier_ups_started)++;
          // The job outlives the stage, so it keeps its own copy of the program.
          return detail::TierUpQueue::Job(
              [this, t, ahead, own = Program{t.ik, program.scope, program.bytes}] {
                return run_tier_up(t, own, ahead);
              });
        },
        priority);
  }

  // `ahead`: a precompile (no stage asked for it); counted apart from tier-ups.
  detail::JobResult run_tier_up(const Target& t, const Program& program, bool ahead) {
    auto [fetched, role] = compile_flights.run(
        t.ck, [&] { return compile_and_store(t, program, Placement::cache_key); });
    ExplainRecord r = base_record(t, std::nullopt);
    r.reason = Reason::profile_rewritten;
    if (!fetched) {
      (ahead ? n.ahead_failed : n.tier_ups_failed)++;
      r.outcome = Outcome::failed;
      r.error = fetched.error().describe();
      r.text =
          ahead ? "compile ahead of need failed (" + r.error + ")"
                : "background tier-up failed (" + r.error + "); the earlier output keeps serving";
      log::warning("cache: " + r.text);
      explain.record(std::move(r), std::nullopt);
      return detail::JobResult::failed;
    }
    (ahead ? n.ahead_installed : n.tier_ups_installed)++;
    r.outcome = Outcome::background_compiled;
    r.storage_key = fetched->key;
    r.compile_ms = fetched->source == Outcome::compiled && role == detail::FlightRole::leader
                       ? fetched->compile_ms
                       : 0;
    r.text = (ahead ? "compiled ahead of need: the output for "
                    : "background tier-up installed the output for ") +
             describe_profile(t.profile.version, t.mode) + "; the next stage hits it";
    explain.record(std::move(r), std::nullopt);
    return detail::JobResult::installed;
  }
};

Orchestrator::Orchestrator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Orchestrator::~Orchestrator() {
  impl_->tier_ups.stop();
}

Expected<std::unique_ptr<Orchestrator>> Orchestrator::create(Config config, KeyStore& keys,
                                                             Compiler& compiler) {
  if (config.tier_up_threads == 0)
    return make_error(Errc::invalid_argument, "cache config: tier_up_threads must be at least 1");
  if (config.explain_records_per_program == 0)
    return make_error(Errc::invalid_argument,
                      "cache config: explain_records_per_program must be at least 1");
  if (config.max_tracked_programs == 0)
    return make_error(Errc::invalid_argument,
                      "cache config: max_tracked_programs must be at least 1");
  auto memory = MemoryTier::create(config.memory_budget_bytes);
  if (!memory) return std::move(memory).error().context("cache config");
  std::unique_ptr<DiskTier> disk;
  std::string programs_dir; // identity history, one small file per program hash
  if (!config.state_dir.empty()) {
    std::string root = (fs::path(config.state_dir) / "cache").string();
    if (config.disk_budget_bytes > 0) {
      DiskTierConfig dc;
      dc.root = root;
      dc.budget_bytes = config.disk_budget_bytes;
      dc.durability = config.disk_durability;
      FDO_TRY(disk, DiskTier::open(std::move(dc)));
    }
    programs_dir = root + "/programs";
  }
  auto impl = std::make_unique<Impl>(std::move(config), keys, compiler, std::move(*memory),
                                     std::move(disk), std::move(programs_dir));
  return std::unique_ptr<Orchestrator>(new Orchestrator(std::move(impl)));
}

Expected<StageOutput> Orchestrator::prepare(const Program& program) {
  return impl_->prepare(program, impl_->config.tier_up);
}

Expected<StageOutput> Orchestrator::prepare(const Program& program, TierUp policy) {
  return impl_->prepare(program, policy);
}

Expected<StageOutput> Orchestrator::prepare(const Program& program, TierUp policy,
                                            const ProfileRef& variant) {
  return impl_->prepare(program, policy, &variant);
}

Expected<Precompiled> Orchestrator::precompile(const Program& program, const ProfileRef& variant) {
  return impl_->precompile(program, variant);
}

std::string Orchestrator::initial_key_for(const Program& program) const {
  return initial_key(program.scope, program.bytes, impl_->compiler.identity());
}

std::vector<ExplainRecord> Orchestrator::explain(const std::string& ik) const {
  return impl_->explain.records(ik);
}

void Orchestrator::record_execution(const std::string& ik, std::uint64_t explain_sequence,
                                    std::uint64_t exec_ns) {
  impl_->explain.set_exec_ns(ik, explain_sequence, exec_ns);
}

void Orchestrator::record_variant(const std::string& ik, std::uint64_t explain_sequence,
                                  std::string role, std::string name) {
  impl_->explain.set_variant(ik, explain_sequence, std::move(role), std::move(name));
}

Stats Orchestrator::stats() const {
  const Impl& d = *impl_;
  Stats s;
  d.n.copy_to(s);
  s.single_flight_waits = d.compile_flights.waits() + d.tiers.load_waits();
  MemoryTierStats m = d.tiers.memory().stats();
  s.memory_evictions = m.evictions;
  s.memory_entries = m.entries;
  s.memory_bytes = m.bytes;
  s.memory_budget_bytes = m.budget_bytes;
  s.memory_held_entries = m.held_entries;
  s.memory_held_bytes = m.held_bytes;
  if (const DiskTier* disk = d.tiers.disk()) {
    DiskTierStats k = disk->stats();
    s.disk_evictions = k.evictions;
    s.disk_entries = k.entries;
    s.disk_bytes = k.bytes;
    s.disk_budget_bytes = k.budget_bytes;
    s.corrupt_entries = k.corrupt;
    s.disk_store_failures = k.store_failures;
    s.stray_files_removed = k.stray_files_removed;
  }
  s.tier_ups_queued = d.tier_ups.pending();
  if (const RemoteTier* remote = d.tiers.remote()) s.remote = remote->stats();
  return s;
}

void Orchestrator::wait_idle() {
  impl_->tier_ups.wait_idle();
}

std::size_t Orchestrator::evict(std::string_view prefix) {
  return impl_->tiers.evict_prefix(prefix);
}

const Config& Orchestrator::config() const {
  return impl_->config;
}
MemoryTier& Orchestrator::memory_tier() {
  return impl_->tiers.memory();
}
DiskTier* Orchestrator::disk_tier() {
  return impl_->tiers.disk();
}

} // namespace fdo::cache
