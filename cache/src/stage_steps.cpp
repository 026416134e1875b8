// The stage processes' steps (Orchestrator::Impl, orchestrator_impl.h):
// prepare (IK, then the profile key mapping), the first stage (FIG. 5 steps
// 506-508 and FIG. 6), later stages (FIG. 5 steps 510-518 and FIG. 4), the
// compile flights' compile-and-store, the profile a stage targets, the
// mappings it records and why it missed.
#include "fdo/cache/keys.h"
#include "fdo/util/log.h"
#include "fdo/util/time.h"
#include "orchestrator_impl.h"
#include "short_key.h"

namespace fdo::cache {

using Clock = std::chrono::steady_clock;
using detail::short_key;

namespace {

// Appended to a hit's explanation when the entry came from another host.
std::string from_remote(Outcome source) {
  return source == Outcome::remote_hit ? " (from the remote tier)" : "";
}

// The program as the compiler must see it: with its IK. The caller's object
// when it carries that IK already; otherwise a copy, made only here, on a
// path that identifies or compiles (a hit never copies the bytes).
const Program& with_ik(const Program& given, const std::string& ik, std::optional<Program>& copy) {
  if (given.ik == ik) return given;
  if (!copy) copy.emplace(Program{ik, given.scope, given.bytes, {}});
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

namespace detail {

std::string describe_profile(std::int64_t version, CompileMode mode) {
  std::string s = version == 0 ? std::string("no profile") : "profile v" + std::to_string(version);
  return s + ", " + std::string(to_string(mode));
}

} // namespace detail

using detail::describe_profile;

std::string Orchestrator::Impl::stage_ik(const Program& program, const std::string& identity) {
  if (!program.ik.empty() && program.ik_identity == identity) return program.ik;
  return initial_key(program.scope, program.bytes, identity);
}

Expected<StageOutput> Orchestrator::Impl::prepare(const Program& program, TierUp policy,
                                                  const ProfileRef* variant,
                                                  const SharedProgram* shared) {
  n.prepares++;
  Target t;
  t.eviction_mark = tiers.eviction_mark();
  if (auto st = check_scope(program.scope, program.bytes); !st)
    return fail(base_record(t, std::nullopt), std::move(st).error());
  t.identity = compiler.identity();
  t.ik = stage_ik(program, t.identity);
  auto pk = keys.lookup_profile_key(t.ik);
  if (!pk)
    return fail(base_record(t, std::nullopt),
                std::move(pk).error().context("look up the profile key mapping"));
  if (!*pk) return first_stage(std::move(t), program);
  t.pk = **pk;
  return later_stage(std::move(t), program, policy,
                     variant != nullptr && variant->pk == t.pk ? variant : nullptr, shared);
}

Expected<StageOutput> Orchestrator::Impl::first_stage(Target t, const Program& given) {
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
    Explanation why{Reason::virtual_first_stage, "first stage: an output for this profile (" +
                                                     describe_profile(t.profile.version, t.mode) +
                                                     ") was already stored under the virtual key" +
                                                     from_remote(found.source) +
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
    auto f = compile_and_store(t, program, Placement::virtual_key, nullptr);
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

Expected<StageOutput> Orchestrator::Impl::later_stage(Target t, const Program& program,
                                                      TierUp policy, const ProfileRef* variant,
                                                      const SharedProgram* shared) {
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
      const detail::Scheduled scheduled = schedule(t, program, detail::JobPriority::stage, shared);
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
  // A build of this CK ahead of need under way is this stage's now.
  ahead_builds.raise(t.ck);
  auto [fetched, role] = compile_flights.run(
      t.ck, [&] { return compile_and_store(t, program, Placement::cache_key, nullptr); });
  if (!fetched) {
    ExplainRecord r = base_record(t, prev);
    r.reason = why.reason;
    return fail(std::move(r), std::move(fetched).error());
  }
  return finish(t, prev, stage_from_flight(t, *fetched, role, std::move(why)));
}

Expected<Fetched> Orchestrator::Impl::compile_and_store(const Target& t, const Program& given,
                                                        Placement where,
                                                        const std::shared_ptr<Urgency>& urgency) {
  if (detail::Found again = tiers.find_existing(t.wanted(), detail::RemoteLookup::skip);
      again.entry)
    return Fetched{again.entry, again.source, again.key, 0, {}};
  std::optional<Program> copy;
  const Program& program = with_ik(given, t.ik, copy);
  auto start = Clock::now();
  // A build ahead of need that a stage asked for before it began is a stage's.
  const bool ahead = urgency != nullptr && !urgency->raised();
  auto out = compiler.compile(program, t.profile, t.mode,
                              ahead ? CompilePriority::background : CompilePriority::stage,
                              ahead ? urgency : nullptr);
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
  EntryRef ref = tiers.store(std::move(entry), t.eviction_mark);
  return Fetched{std::move(ref), Outcome::compiled, std::move(key), ms,
                 std::move(out->explanation)};
}

Status Orchestrator::Impl::read_profile(Target& t) {
  auto profile = keys.current_profile(t.pk);
  if (!profile)
    return std::move(profile).error().context("read the profile for " + short_key(t.pk));
  FDO_TRY_STATUS(check_profile(*profile, t.pk));
  t.profile = std::move(*profile);
  t.mode = choose_mode(t.profile.doc.get());
  t.ck = cache_key(t.ik, t.profile.digest, t.mode);
  return ok();
}

Status Orchestrator::Impl::use_profile(Target& t, const ProfileRef& variant) {
  FDO_TRY_STATUS(check_profile(variant, t.pk));
  t.profile = variant;
  t.mode = choose_mode(t.profile.doc.get());
  t.ck = cache_key(t.ik, t.profile.digest, t.mode);
  return ok();
}

void Orchestrator::Impl::record_mappings(const Target& t, std::string& note) {
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

void Orchestrator::Impl::note_remote_miss(const detail::Found& found, Explanation& why) {
  if (found.remote_corrupt && why.reason != Reason::profile_rewritten &&
      why.reason != Reason::compiler_identity_changed) {
    why.reason = Reason::corrupt_in_remote;
    why.text = "the remote tier's entry " + short_key(found.remote_corrupt->key) +
               " was not used (" + found.remote_corrupt->problem + "); " + why.text;
  }
  if (!found.remote_unavailable.empty())
    why.text += "; remote tier unavailable: " + found.remote_unavailable;
}

Explanation Orchestrator::Impl::miss_reason(const Target& t, const std::optional<Served>& prev,
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
      return {Reason::evicted, "the output for " + profile + " was stored under " + short_key(key) +
                                   " but has been evicted" +
                                   (from == detail::EvictedFrom::both     ? " from memory and disk"
                                    : from == detail::EvictedFrom::memory ? " from memory"
                                                                          : "")};
  }
  return {Reason::not_cached, "no output for " + profile + " is stored"};
}

} // namespace fdo::cache
