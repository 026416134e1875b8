// What a stage hands back and leaves behind (Orchestrator::Impl,
// orchestrator_impl.h): its StageOutput from a found or compiled entry, the
// counters its outcome adds to, and its explain record, failed or not.
#include "orchestrator_impl.h"

namespace fdo::cache {

StageOutput Orchestrator::Impl::output_for(const Target& t, const EntryRef& ref, Outcome outcome,
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

StageOutput Orchestrator::Impl::stage_from_flight(const Target& t, const Fetched& f,
                                                  detail::FlightRole role, Explanation why) const {
  Outcome outcome = f.source;
  if (role == detail::FlightRole::waiter && f.source == Outcome::compiled)
    outcome = Outcome::joined;
  if (outcome == Outcome::compiled && !f.explanation.empty()) why.text += "; " + f.explanation;
  StageOutput s = output_for(t, f.entry, outcome, std::move(why));
  s.compiled = outcome == Outcome::compiled;
  s.compile_ms = s.compiled ? f.compile_ms : 0;
  return s;
}

StageOutput Orchestrator::Impl::finish(const Target& t, const std::optional<Served>& prev,
                                       StageOutput s) {
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

ExplainRecord Orchestrator::Impl::base_record(const Target& t,
                                              const std::optional<Served>& prev) const {
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

Error Orchestrator::Impl::fail(ExplainRecord r, Error err) {
  n.failures++;
  r.outcome = Outcome::failed;
  r.error = err.describe();
  r.text = "stage failed: " + r.error;
  if (!r.ik.empty()) explain.record(std::move(r), std::nullopt);
  return err;
}

} // namespace fdo::cache
