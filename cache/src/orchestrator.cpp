#include "fdo/cache/orchestrator.h"

#include "bounded.h"
#include "fdo/cache/keys.h"
#include "fdo/util/hash.h"
#include "fdo/util/log.h"
#include "single_flight.h"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <optional>
#include <thread>
#include <unordered_map>
#include <unordered_set>

namespace fdo::cache {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

std::int64_t now_unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string short_key(std::string_view k) {
  // Enough to tell keys apart in a log line; explain records carry the full keys.
  return std::string(k.substr(0, 12)) + (k.size() > 12 ? "…" : "");
}

std::string describe_profile(std::int64_t version, CompileMode mode) {
  std::string s = version == 0 ? std::string("no profile") : "profile v" + std::to_string(version);
  return s + ", " + std::string(to_string(mode));
}

// What the program ran with at its last stage (the served entry).
struct Served {
  std::string storage_key;
  std::string ck;
  std::string digest;
  std::int64_t version = 0;
  CompileMode mode = CompileMode::plain;
};

struct ProgramState {
  std::optional<Served> served;
  std::deque<ExplainRecord> log;
};

// A found or freshly compiled entry, as a flight hands it to every waiter.
struct Fetched {
  EntryRef entry;
  Outcome source = Outcome::compiled; // memory_hit, disk_hit or compiled
  std::string key;                    // storage key it was found/stored under
  double compile_ms = 0;
};

struct Lookup {
  EntryRef entry;
  Outcome source = Outcome::memory_hit;
  std::string key;
  bool corrupt = false;
  std::string corrupt_key, problem;
};

struct LoadShared {
  LoadStatus status = LoadStatus::miss;
  EntryRef entry;
  std::string problem;
  bool from_memory = false;
};

// Where a compile's output goes: under VK with the FIG. 6 mapping updates
// (first stage) or under CK (every later stage).
enum class Placement { virtual_key, cache_key };

struct Target {
  std::string ik, pk, ck, vk; // vk: the mapped VK, or the first stage's VK
  ProfileRef profile;
  CompileMode mode = CompileMode::plain;
  std::string identity;
  std::vector<std::string> candidates; // storage keys to look up, in order
};

struct TierUpJob {
  std::string bytes;
  Target target;
};

} // namespace

std::string_view to_string(TierUp t) {
  return t == TierUp::async ? "async" : "sync";
}

Expected<TierUp> parse_tier_up(std::string_view s) {
  if (s == "async") return TierUp::async;
  if (s == "sync") return TierUp::sync;
  return make_error(Errc::invalid_argument,
                    "unknown tier-up policy \"" + std::string(s) + "\" (expected async or sync)");
}

std::string_view to_string(Outcome o) {
  switch (o) {
  case Outcome::memory_hit:
    return "memory_hit";
  case Outcome::disk_hit:
    return "disk_hit";
  case Outcome::compiled:
    return "compiled";
  case Outcome::joined:
    return "joined";
  case Outcome::tier_up_pending:
    return "tier_up_pending";
  case Outcome::background_compiled:
    return "background_compiled";
  case Outcome::failed:
    return "failed";
  }
  return "failed";
}

std::string_view to_string(Reason r) {
  switch (r) {
  case Reason::new_program:
    return "new_program";
  case Reason::compiler_identity_changed:
    return "compiler_identity_changed";
  case Reason::virtual_first_stage:
    return "virtual_first_stage";
  case Reason::virtual_key_mapping:
    return "virtual_key_mapping";
  case Reason::cache_key:
    return "cache_key";
  case Reason::profile_rewritten:
    return "profile_rewritten";
  case Reason::evicted:
    return "evicted";
  case Reason::corrupt_on_disk:
    return "corrupt_on_disk";
  case Reason::not_cached:
    return "not_cached";
  }
  return "not_cached";
}

nlohmann::json to_json(const ExplainRecord& r) {
  nlohmann::json j = {{"sequence", r.sequence},
                      {"unix_ms", r.unix_ms},
                      {"ik", r.ik},
                      {"pk", r.pk},
                      {"ck", r.ck},
                      {"vk", r.vk},
                      {"storage_key", r.storage_key},
                      {"outcome", std::string(to_string(r.outcome))},
                      {"reason", std::string(to_string(r.reason))},
                      {"text", r.text},
                      {"from_version", r.from_version},
                      {"to_version", r.to_version},
                      {"from_digest", r.from_digest},
                      {"to_digest", r.to_digest},
                      {"mode", std::string(to_string(r.mode))},
                      {"compile_ms", r.compile_ms}};
  if (!r.error.empty()) j["error"] = r.error;
  return j;
}

nlohmann::json to_json(const Stats& s) {
  return {{"prepares", s.prepares},
          {"failures", s.failures},
          {"memory",
           {{"hits", s.memory_hits},
            {"misses", s.memory_misses},
            {"entries", s.memory_entries},
            {"bytes", s.memory_bytes},
            {"budget_bytes", s.memory_budget_bytes},
            {"held_entries", s.memory_held_entries},
            {"held_bytes", s.memory_held_bytes},
            {"evictions", s.memory_evictions}}},
          {"disk",
           {{"hits", s.disk_hits},
            {"misses", s.disk_misses},
            {"entries", s.disk_entries},
            {"bytes", s.disk_bytes},
            {"budget_bytes", s.disk_budget_bytes},
            {"evictions", s.disk_evictions},
            {"corrupt", s.corrupt_entries},
            {"store_failures", s.disk_store_failures},
            {"stray_files_removed", s.stray_files_removed}}},
          {"compiles", s.compiles},
          {"recompiles", s.recompiles},
          {"compile_failures", s.compile_failures},
          {"compile_ms_total", s.compile_ms_total},
          {"single_flight_waits", s.single_flight_waits},
          {"tier_up",
           {{"started", s.tier_ups_started},
            {"installed", s.tier_ups_installed},
            {"failed", s.tier_ups_failed},
            {"queued", s.tier_ups_queued},
            {"stale_serves", s.stale_serves}}},
          {"key_store_errors", s.key_store_errors}};
}

struct Orchestrator::Impl {
  Impl(Config c, KeyStore& k, Compiler& comp)
      : config(std::move(c)), keys(k), compiler(comp), programs(config.max_tracked_programs),
        identities(config.max_tracked_programs), failed_tier_ups(config.max_tracked_programs) {}

  Config config;
  KeyStore& keys;
  Compiler& compiler;
  std::unique_ptr<MemoryTier> memory;
  std::unique_ptr<DiskTier> disk;
  std::string programs_dir; // identity history, one small file per program hash

  struct Counters {
    std::atomic<std::uint64_t> prepares{0}, failures{0}, memory_hits{0}, memory_misses{0},
        disk_hits{0}, disk_misses{0}, compiles{0}, recompiles{0}, compile_failures{0},
        compile_us{0}, tier_ups_started{0}, tier_ups_installed{0}, tier_ups_failed{0},
        stale_serves{0}, key_store_errors{0};
  } n;

  mutable std::mutex track_mu; // programs, identities, sequence
  mutable detail::BoundedLru<ProgramState> programs;
  detail::BoundedLru<std::string> identities; // program hash -> compiler identity
  std::uint64_t sequence = 0;

  detail::SingleFlight<Fetched> compile_flights;
  detail::SingleFlight<LoadShared> load_flights;

  std::mutex job_mu;
  std::condition_variable job_cv, idle_cv;
  std::deque<TierUpJob> jobs;
  std::unordered_set<std::string> queued_cks; // queued or running
  detail::BoundedLru<Clock::time_point> failed_tier_ups;
  unsigned running = 0;
  bool stopping = false;
  std::vector<std::thread> threads;

  // ---------------------------------------------------------------- tracking

  std::optional<Served> served_of(const std::string& ik) const {
    std::lock_guard lock(track_mu);
    if (ProgramState* p = programs.find(ik)) return p->served;
    return std::nullopt;
  }

  void record(ExplainRecord r, const std::optional<Served>& now_serving) {
    std::lock_guard lock(track_mu);
    r.sequence = ++sequence;
    r.unix_ms = now_unix_ms();
    ProgramState& p = programs.get_or_create(r.ik);
    if (now_serving) p.served = now_serving;
    p.log.push_back(std::move(r));
    while (p.log.size() > config.explain_records_per_program)
      p.log.pop_front();
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
    if (!r.ik.empty()) record(std::move(r), std::nullopt);
    return err;
  }

  // ------------------------------------------------------- identity history

  std::string identity_file(const std::string& phash) const {
    return programs_dir + "/" + phash.substr(0, 2) + "/" + phash;
  }

  std::optional<std::string> identity_seen(const std::string& phash) {
    {
      std::lock_guard lock(track_mu);
      if (std::string* id = identities.find(phash)) return *id;
    }
    if (programs_dir.empty()) return std::nullopt;
    auto text = read_file(identity_file(phash), 1 << 20);
    if (!text) return std::nullopt;
    nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("identity") || !j["identity"].is_string())
      return std::nullopt; // advisory data: a damaged file only loses an explanation
    return j["identity"].get<std::string>();
  }

  void remember_identity(const std::string& phash, const std::string& identity,
                         const std::string& ik) {
    {
      std::lock_guard lock(track_mu);
      std::string& id = identities.get_or_create(phash);
      if (id == identity) return;
      id = identity;
    }
    if (programs_dir.empty()) return;
    std::string path = identity_file(phash);
    std::error_code ec;
    fs::create_directories(fs::path(path).parent_path(), ec);
    nlohmann::json j = {{"identity", identity}, {"ik", ik}};
    if (auto st = write_file_atomic(path, j.dump(), Durability::none); !st)
      log::warning("cache: cannot record compiler identity for program " + short_key(phash) + ": " +
                   st.error().describe());
  }

  // ----------------------------------------------------------------- lookup

  LoadShared load_from_disk(const std::string& key, const std::string& identity) {
    auto result = load_flights.run(key, [&]() -> Expected<LoadShared> {
      LoadShared out;
      // A load that finished just before this flight began has filled memory.
      if (EntryRef ref = memory->lookup(key)) {
        out.status = LoadStatus::hit;
        out.entry = std::move(ref);
        out.from_memory = true;
        return out;
      }
      LoadResult r = disk->load(key, identity);
      out.status = r.status;
      out.problem = r.problem;
      if (r.status == LoadStatus::hit) out.entry = memory->insert(std::move(r.entry));
      return out;
    });
    return *result.first; // the work never fails: errors are LoadStatus values
  }

  // Memory, then disk, for each candidate; only entries compiled for `ck`
  // under this compiler identity count (a stale CK -> VK mapping, or a VK
  // overwritten by a later first stage, is a miss).
  Lookup find_existing(const Target& t) {
    Lookup out;
    auto usable = [&](const EntryRef& ref) {
      return ref && ref->info.ck == t.ck && ref->info.compiler_identity == t.identity;
    };
    for (const std::string& key : t.candidates) {
      EntryRef ref = memory->lookup(key);
      if (usable(ref)) {
        // Keep the disk copy of a hot entry from aging out behind the memory tier.
        if (disk) disk->note_use(key);
        out.entry = std::move(ref);
        out.source = Outcome::memory_hit;
        out.key = key;
        return out;
      }
    }
    if (!disk) return out;
    for (const std::string& key : t.candidates) {
      if (!disk->contains(key)) continue;
      LoadShared r = load_from_disk(key, t.identity);
      if (r.status == LoadStatus::corrupt) {
        out.corrupt = true;
        out.corrupt_key = key;
        out.problem = r.problem;
      } else if (r.status == LoadStatus::hit && usable(r.entry)) {
        out.entry = std::move(r.entry);
        out.source = r.from_memory ? Outcome::memory_hit : Outcome::disk_hit;
        out.key = key;
        return out;
      }
    }
    return out;
  }

  // An output of the same program compiled for another profile, to serve
  // while the new one compiles (async tier-up).
  EntryRef find_previous(const Target& t, const std::optional<Served>& prev) {
    auto other = [&](const EntryRef& ref) {
      return ref && ref->info.ck != t.ck && ref->info.compiler_identity == t.identity;
    };
    if (prev && prev->ck != t.ck) {
      EntryRef ref = memory->lookup(prev->storage_key);
      if (other(ref)) return ref;
      if (disk && disk->contains(prev->storage_key)) {
        LoadShared r = load_from_disk(prev->storage_key, t.identity);
        if (other(r.entry)) return r.entry;
      }
    }
    if (!disk) return {};
    // After a restart the history is gone; the newest file of this IK serves.
    int tries = 0;
    for (const std::string& key : disk->keys_for_ik(t.ik)) {
      if (std::find(t.candidates.begin(), t.candidates.end(), key) != t.candidates.end()) continue;
      if (++tries > 3) break;
      EntryRef ref = memory->lookup(key);
      if (!ref) {
        LoadShared r = load_from_disk(key, t.identity);
        ref = std::move(r.entry);
      }
      if (other(ref)) return ref;
    }
    return {};
  }

  // ---------------------------------------------------------------- compile

  void record_mappings(const Target& t, std::string& note) {
    // FIG. 6 steps 610 and 616; a failure costs a future recompile, not this stage.
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

  // The body of a compile flight: re-check (a flight that just finished may
  // have stored the output), then compile and store.
  Expected<Fetched> compile_and_store(const Target& t, std::string_view bytes, Placement where) {
    if (Lookup again = find_existing(t); again.entry)
      return Fetched{again.entry, again.source, again.key, 0};
    Program program{t.ik, std::string(bytes)};
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
    entry->info.program_hash = program_hash(bytes);
    entry->info.created_unix_ms = now_unix_ms();
    entry->object = std::move(out->object);
    entry->metadata = std::move(out->metadata);
    EntryRef ref = memory->insert(entry);
    if (disk)
      if (auto st = disk->store(*entry); !st)
        log::warning("cache: " + st.error().describe() + " (kept in memory only)");
    return Fetched{std::move(ref), Outcome::compiled, entry->key, ms};
  }

  // ----------------------------------------------------------------- stages

  StageOutput output_for(const Target& t, const EntryRef& ref, Outcome outcome,
                         Explanation why) const {
    StageOutput s;
    s.ik = t.ik;
    s.pk = t.pk;
    s.ck = t.ck;
    s.vk = t.vk;
    s.storage_key = ref->key;
    s.profile_version = ref->info.profile_version;
    s.profile_digest = ref->info.profile_digest;
    s.mode = ref->info.mode;
    s.target_profile_version = t.profile.version;
    s.entry = ref;
    s.outcome = outcome;
    s.explanation = std::move(why);
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
    default:
      n.memory_misses++;
      if (disk) n.disk_misses++;
      break;
    }
    ExplainRecord r = base_record(t, prev);
    r.storage_key = s.storage_key;
    r.outcome = s.outcome;
    r.reason = s.explanation.reason;
    r.text = s.explanation.text;
    r.compile_ms = s.compile_ms;
    Served now{s.storage_key, s.entry->info.ck, s.profile_digest, s.profile_version, s.mode};
    record(std::move(r), now);
    return s;
  }

  Expected<StageOutput> prepare(std::string_view bytes, TierUp policy) {
    n.prepares++;
    Target t;
    t.identity = compiler.identity();
    t.ik = initial_key(bytes, t.identity);
    auto pk = keys.lookup_profile_key(t.ik);
    if (!pk)
      return fail(base_record(t, std::nullopt),
                  std::move(pk).error().context("look up the profile key mapping"));
    if (!*pk) return first_stage(std::move(t), bytes);
    t.pk = **pk;
    return later_stage(std::move(t), bytes, policy);
  }

  // A KeyStore adapter bug must not turn into a wrong CK.
  static Status check_profile(const ProfileRef& p, const std::string& pk) {
    if (p.digest.empty())
      return make_error(Errc::internal,
                        "key store returned a profile for " + short_key(pk) + " without a digest");
    if (p.version < 0 || (p.version > 0) != (p.doc != nullptr))
      return make_error(Errc::internal, "key store returned an inconsistent profile for " +
                                            short_key(pk) + " (version " +
                                            std::to_string(p.version) + ")");
    return ok();
  }

  // Design step 2 / patent FIG. 5 steps 506-508 and FIG. 6.
  Expected<StageOutput> first_stage(Target t, std::string_view bytes) {
    t.vk = virtual_key(t.ik);
    t.candidates = {t.vk};
    ExplainRecord failure = base_record(t, std::nullopt);
    failure.reason = Reason::new_program;
    auto ident = compiler.identify(Program{t.ik, std::string(bytes)});
    if (!ident) return fail(failure, std::move(ident).error().context("identify"));
    if (ident->pk.empty())
      return fail(base_record(t, std::nullopt),
                  make_error(Errc::internal, "compiler identified the program with an empty PK"));
    t.pk = ident->pk;
    auto profile = keys.current_profile(t.pk);
    if (!profile)
      return fail(base_record(t, std::nullopt),
                  std::move(profile).error().context("read the profile for " + short_key(t.pk)));
    if (auto st = check_profile(*profile, t.pk); !st)
      return fail(base_record(t, std::nullopt), std::move(st).error());
    t.profile = std::move(*profile);
    t.mode = choose_mode(t.profile.doc.get());
    t.ck = cache_key(t.ik, t.profile.digest, t.mode);

    // FIG. 4 step 408: the VK may already hold an output (the mappings were
    // lost); it is served only if it was compiled for the current profile.
    if (Lookup found = find_existing(t); found.entry) {
      std::string note;
      record_mappings(t, note);
      Explanation why{Reason::virtual_first_stage,
                      "first stage: an output for this profile (" +
                          describe_profile(t.profile.version, t.mode) +
                          ") was already stored under the virtual key; re-recorded IK->PK and "
                          "CK->VK" +
                          note};
      return finish(t, std::nullopt, output_for(t, found.entry, found.source, std::move(why)));
    }

    std::string phash = program_hash(bytes);
    std::optional<std::string> seen_under = identity_seen(phash);
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

    auto [fetched, role] = compile_flights.run(t.vk, [&]() -> Expected<Fetched> {
      auto f = compile_and_store(t, bytes, Placement::virtual_key);
      if (f && f->source == Outcome::compiled) {
        std::string note;
        record_mappings(t, note);
        if (!note.empty()) why.text += note;
      }
      return f;
    });
    if (!fetched) return fail(base_record(t, std::nullopt), std::move(fetched).error());
    remember_identity(phash, t.identity, t.ik);
    StageOutput s = stage_from_flight(t, *fetched, role, std::move(why));
    if (s.outcome == Outcome::memory_hit || s.outcome == Outcome::disk_hit)
      s.explanation = {Reason::virtual_first_stage,
                       "first stage: the output under the virtual key was stored meanwhile"};
    return finish(t, std::nullopt, std::move(s));
  }

  StageOutput stage_from_flight(const Target& t, const Fetched& f, detail::FlightRole role,
                                Explanation why) {
    Outcome outcome = f.source;
    if (role == detail::FlightRole::waiter && f.source == Outcome::compiled)
      outcome = Outcome::joined;
    StageOutput s = output_for(t, f.entry, outcome, std::move(why));
    s.compiled = outcome == Outcome::compiled;
    s.compile_ms = s.compiled ? f.compile_ms : 0;
    return s;
  }

  Explanation miss_reason(const Target& t, const std::optional<Served>& prev,
                          const Lookup& found) const {
    std::string profile = describe_profile(t.profile.version, t.mode);
    if (prev && prev->ck != t.ck) {
      std::string text = "profile for " + short_key(t.pk) + " changed from " +
                         describe_profile(prev->version, prev->mode) + " to " + profile +
                         " (digest " + short_key(prev->digest) + " -> " +
                         short_key(t.profile.digest) + "): CK changed";
      return {Reason::profile_rewritten, std::move(text)};
    }
    if (found.corrupt)
      return {Reason::corrupt_on_disk, "the stored output " + short_key(found.corrupt_key) +
                                           " failed validation (" + found.problem +
                                           ") and was removed"};
    for (const std::string& key : t.candidates) {
      bool mem = memory->was_evicted(key);
      bool dsk = disk && disk->was_evicted(key);
      // A mapped VK proves the first stage's output was stored once.
      if (mem || dsk || key == t.vk)
        return {Reason::evicted, "the output for " + profile + " was stored under " +
                                     short_key(key) + " but has been evicted" +
                                     (mem && dsk ? " from memory and disk"
                                      : mem      ? " from memory"
                                                 : "")};
    }
    return {Reason::not_cached, "no output for " + profile + " is stored"};
  }

  // Design step 3 / patent FIG. 5 steps 510-518 and FIG. 4.
  Expected<StageOutput> later_stage(Target t, std::string_view bytes, TierUp policy) {
    auto profile = keys.current_profile(t.pk);
    if (!profile)
      return fail(base_record(t, std::nullopt),
                  std::move(profile).error().context("read the profile for " + short_key(t.pk)));
    if (auto st = check_profile(*profile, t.pk); !st)
      return fail(base_record(t, std::nullopt), std::move(st).error());
    t.profile = std::move(*profile);
    t.mode = choose_mode(t.profile.doc.get());
    t.ck = cache_key(t.ik, t.profile.digest, t.mode);
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
    std::optional<Served> prev = served_of(t.ik);

    Lookup found = find_existing(t);
    if (found.entry) {
      Explanation why;
      if (found.key == t.vk)
        why = {Reason::virtual_key_mapping,
               "hit through the virtual key mapping CK -> VK (first-stage output, " +
                   describe_profile(t.profile.version, t.mode) + ")"};
      else
        why = {Reason::cache_key,
               "hit under CK (" + describe_profile(t.profile.version, t.mode) + ")"};
      return finish(t, prev, output_for(t, found.entry, found.source, std::move(why)));
    }

    Explanation why = miss_reason(t, prev, found);
    if (policy == TierUp::async) {
      if (EntryRef previous = find_previous(t, prev)) {
        bool scheduled = schedule_tier_up(t, bytes);
        n.stale_serves++;
        why.text += "; serving the output for " +
                    describe_profile(previous->info.profile_version, previous->info.mode) +
                    (scheduled ? " while the new one compiles in the background"
                               : " (a background compile is already under way or failed "
                                 "recently)");
        StageOutput s = output_for(t, previous, Outcome::tier_up_pending, std::move(why));
        return finish(t, prev, std::move(s));
      }
    }
    auto [fetched, role] = compile_flights.run(
        t.ck, [&] { return compile_and_store(t, bytes, Placement::cache_key); });
    if (!fetched) {
      ExplainRecord r = base_record(t, prev);
      r.reason = why.reason;
      return fail(std::move(r), std::move(fetched).error());
    }
    return finish(t, prev, stage_from_flight(t, *fetched, role, std::move(why)));
  }

  // ---------------------------------------------------------------- tier-up

  bool schedule_tier_up(const Target& t, std::string_view bytes) {
    std::lock_guard lock(job_mu);
    if (stopping || queued_cks.count(t.ck) || compile_flights.in_flight(t.ck)) return false;
    if (Clock::time_point* failed_at = failed_tier_ups.find(t.ck))
      if (Clock::now() - *failed_at < config.tier_up_retry_after) return false;
    queued_cks.insert(t.ck);
    jobs.push_back(TierUpJob{std::string(bytes), t});
    n.tier_ups_started++;
    job_cv.notify_one();
    return true;
  }

  void run_job(const TierUpJob& job) {
    const Target& t = job.target;
    auto [fetched, role] = compile_flights.run(
        t.ck, [&] { return compile_and_store(t, job.bytes, Placement::cache_key); });
    ExplainRecord r = base_record(t, std::nullopt);
    r.reason = Reason::profile_rewritten;
    if (!fetched) {
      n.tier_ups_failed++;
      {
        std::lock_guard lock(job_mu);
        failed_tier_ups.get_or_create(t.ck) = Clock::now();
      }
      r.outcome = Outcome::failed;
      r.error = fetched.error().describe();
      r.text = "background tier-up failed (" + r.error + "); the earlier output keeps serving";
      log::warning("cache: " + r.text);
      record(std::move(r), std::nullopt);
      return;
    }
    n.tier_ups_installed++;
    r.outcome = Outcome::background_compiled;
    r.storage_key = fetched->key;
    r.compile_ms = fetched->source == Outcome::compiled && role == detail::FlightRole::leader
                       ? fetched->compile_ms
                       : 0;
    r.text = "background tier-up installed the output for " +
             describe_profile(t.profile.version, t.mode) + "; the next stage hits it";
    record(std::move(r), std::nullopt);
  }

  void worker() {
    std::unique_lock lock(job_mu);
    for (;;) {
      job_cv.wait(lock, [&] { return stopping || !jobs.empty(); });
      if (stopping) return;
      TierUpJob job = std::move(jobs.front());
      jobs.pop_front();
      running++;
      lock.unlock();
      try {
        run_job(job);
      } catch (const std::exception& e) {
        // A background thread must not take the daemon down; the stage path
        // will retry the compile.
        log::error(std::string("cache: background tier-up threw: ") + e.what());
      }
      lock.lock();
      running--;
      queued_cks.erase(job.target.ck);
      if (jobs.empty() && running == 0) idle_cv.notify_all();
    }
  }

  void stop() {
    {
      std::lock_guard lock(job_mu);
      stopping = true;
      jobs.clear();
    }
    job_cv.notify_all();
    for (std::thread& th : threads)
      if (th.joinable()) th.join();
    idle_cv.notify_all();
  }
};

Orchestrator::Orchestrator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Orchestrator::~Orchestrator() {
  impl_->stop();
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
  auto impl = std::make_unique<Impl>(std::move(config), keys, compiler);
  auto memory = MemoryTier::create(impl->config.memory_budget_bytes);
  if (!memory) return std::move(memory).error().context("cache config");
  impl->memory = std::move(*memory);
  if (!impl->config.state_dir.empty()) {
    std::string root = (fs::path(impl->config.state_dir) / "cache").string();
    if (impl->config.disk_budget_bytes > 0) {
      DiskTierConfig dc;
      dc.root = root;
      dc.budget_bytes = impl->config.disk_budget_bytes;
      dc.durability = impl->config.disk_durability;
      FDO_TRY(impl->disk, DiskTier::open(std::move(dc)));
    }
    impl->programs_dir = root + "/programs";
  }
  Impl* raw = impl.get();
  for (unsigned i = 0; i < raw->config.tier_up_threads; ++i)
    raw->threads.emplace_back([raw] { raw->worker(); });
  return std::unique_ptr<Orchestrator>(new Orchestrator(std::move(impl)));
}

Expected<StageOutput> Orchestrator::prepare(std::string_view program_bytes) {
  return impl_->prepare(program_bytes, impl_->config.tier_up);
}

Expected<StageOutput> Orchestrator::prepare(std::string_view program_bytes, TierUp policy) {
  return impl_->prepare(program_bytes, policy);
}

std::string Orchestrator::initial_key_for(std::string_view program_bytes) const {
  return initial_key(program_bytes, impl_->compiler.identity());
}

std::vector<ExplainRecord> Orchestrator::explain(const std::string& ik) const {
  std::lock_guard lock(impl_->track_mu);
  ProgramState* p = impl_->programs.find(ik);
  if (p == nullptr) return {};
  return {p->log.begin(), p->log.end()};
}

Stats Orchestrator::stats() const {
  const Impl& d = *impl_;
  Stats s;
  s.prepares = d.n.prepares;
  s.failures = d.n.failures;
  s.memory_hits = d.n.memory_hits;
  s.memory_misses = d.n.memory_misses;
  s.disk_hits = d.n.disk_hits;
  s.disk_misses = d.n.disk_misses;
  s.compiles = d.n.compiles;
  s.recompiles = d.n.recompiles;
  s.compile_failures = d.n.compile_failures;
  s.compile_ms_total = static_cast<double>(d.n.compile_us.load()) / 1000.0;
  s.single_flight_waits = d.compile_flights.waits() + d.load_flights.waits();
  s.tier_ups_started = d.n.tier_ups_started;
  s.tier_ups_installed = d.n.tier_ups_installed;
  s.tier_ups_failed = d.n.tier_ups_failed;
  s.stale_serves = d.n.stale_serves;
  s.key_store_errors = d.n.key_store_errors;
  MemoryTierStats m = d.memory->stats();
  s.memory_evictions = m.evictions;
  s.memory_entries = m.entries;
  s.memory_bytes = m.bytes;
  s.memory_budget_bytes = m.budget_bytes;
  s.memory_held_entries = m.held_entries;
  s.memory_held_bytes = m.held_bytes;
  if (d.disk) {
    DiskTierStats k = d.disk->stats();
    s.disk_evictions = k.evictions;
    s.disk_entries = k.entries;
    s.disk_bytes = k.bytes;
    s.disk_budget_bytes = k.budget_bytes;
    s.corrupt_entries = k.corrupt;
    s.disk_store_failures = k.store_failures;
    s.stray_files_removed = k.stray_files_removed;
  }
  {
    std::lock_guard lock(impl_->job_mu);
    s.tier_ups_queued = impl_->queued_cks.size();
  }
  return s;
}

void Orchestrator::wait_idle() {
  std::unique_lock lock(impl_->job_mu);
  impl_->idle_cv.wait(
      lock, [&] { return impl_->stopping || (impl_->jobs.empty() && impl_->running == 0); });
}

std::size_t Orchestrator::evict(std::string_view prefix) {
  std::size_t n = impl_->memory->evict_prefix(prefix);
  if (impl_->disk) n += impl_->disk->evict_prefix(prefix);
  return n;
}

const Config& Orchestrator::config() const {
  return impl_->config;
}
MemoryTier& Orchestrator::memory_tier() {
  return *impl_->memory;
}
DiskTier* Orchestrator::disk_tier() {
  return impl_->disk.get();
}

} // namespace fdo::cache
