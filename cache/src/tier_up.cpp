// Compiles no stage waits for (Orchestrator::Impl, orchestrator_impl.h): a
// precompile ahead of need, scheduling a background compile on the tier-up
// queue (tier_up_queue.h), and the job it runs, with its counts and its
// explain record.
#include "fdo/cache/keys.h"
#include "fdo/util/log.h"
#include "orchestrator_impl.h"
#include "short_key.h"

namespace fdo::cache {

using detail::describe_profile;
using detail::short_key;

Expected<Precompiled> Orchestrator::Impl::precompile(const Program& program,
                                                     const ProfileRef* variant,
                                                     detail::JobPriority priority,
                                                     const SharedProgram* shared) {
  Target t;
  t.eviction_mark = tiers.eviction_mark();
  FDO_TRY_STATUS(check_scope(program.scope, program.bytes));
  t.identity = compiler.identity();
  t.ik = stage_ik(program, t.identity);
  auto pk = keys.lookup_profile_key(t.ik);
  if (!pk) return std::move(pk).error().context("look up the profile key mapping");
  if (!*pk || (variant && **pk != variant->pk))
    return make_error(Errc::invalid_argument,
                      "precompile " + short_key(t.ik) +
                          (variant ? ": the program's profile key is not the variant's (not yet "
                                     "known)"
                                   : ": the program's profile key is not known yet"));
  t.pk = **pk;
  FDO_TRY_STATUS(variant ? use_profile(t, *variant) : read_profile(t));
  t.candidates.push_back(t.ck);
  if (tiers.find_existing(t.wanted()).entry) return Precompiled::stored;
  switch (schedule(t, program, priority, shared)) {
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

detail::Scheduled Orchestrator::Impl::schedule(const Target& t, const Program& program,
                                               detail::JobPriority priority,
                                               const SharedProgram* shared) {
  // A stage's: a build of this CK ahead of need, queued or compiling, is now
  // the stage's (the queue moves it up, the compiler hears of it).
  if (priority == detail::JobPriority::stage) ahead_builds.raise(t.ck);
  // A sync stage compiling this CK right now already does the job.
  if (compile_flights.in_flight(t.ck)) return detail::Scheduled::already_queued;
  return tier_ups.schedule(
      t.ck,
      [&] {
        const bool ahead = priority == detail::JobPriority::background;
        (ahead ? n.ahead_started : n.tier_ups_started)++;
        std::shared_ptr<Urgency> urgency = ahead ? ahead_builds.add(t.ck) : nullptr;
        // The job outlives the stage: it keeps the caller's shared program
        // when that carries the stage's IK, else its own copy (a big
        // program's bytes are megabytes, copied into pages the allocator
        // hands back at once).
        SharedProgram own =
            shared != nullptr && *shared && (*shared)->ik == t.ik
                ? *shared
                : std::make_shared<const Program>(Program{t.ik, program.scope, program.bytes, {}});
        return detail::TierUpQueue::Job(
            [this, t, urgency, own = std::move(own)] { return run_tier_up(t, *own, urgency); });
      },
      priority);
}

detail::JobResult Orchestrator::Impl::run_tier_up(const Target& t, const Program& program,
                                                  const std::shared_ptr<Urgency>& urgency) {
  const bool ahead = urgency != nullptr;
  // A stage's tier-up is what the program's next stages will run; a build
  // ahead of need may yield to it and to every stage's compile.
  auto [fetched, role] = compile_flights.run(
      t.ck, [&] { return compile_and_store(t, program, Placement::cache_key, urgency); });
  ExplainRecord r = base_record(t, std::nullopt);
  r.reason = Reason::profile_rewritten;
  if (!fetched) {
    (ahead ? n.ahead_failed : n.tier_ups_failed)++;
    r.outcome = Outcome::failed;
    r.error = fetched.error().describe();
    r.text = ahead
                 ? "compile ahead of need failed (" + r.error + ")"
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
  if (r.compile_ms > 0 && !fetched->explanation.empty()) r.text += "; " + fetched->explanation;
  explain.record(std::move(r), std::nullopt);
  return detail::JobResult::installed;
}

} // namespace fdo::cache
