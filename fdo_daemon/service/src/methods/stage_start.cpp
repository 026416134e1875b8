// The start of an execute stage (docs/lifecycle.md): the program's lifecycle
// says what the stage does, the guard picks the variant where the lifecycle
// lets it, the orchestrator looks the build up or compiles it. A planned
// build that does not compile moves the program to Phase::failed and the
// stage runs the plain build instead.
#include "fdo/util/log.h"
#include "methods.h"

#include <algorithm>

namespace fdo::daemon::methods {

namespace {

// What the compile of a build (not the store, not the request) did wrong.
bool compile_failure(const Error& e) {
  switch (e.code()) {
  case Errc::compile:
  case Errc::crashed:
  case Errc::timeout:
  case Errc::resource_exhausted:
    return true;
  default:
    return false;
  }
}

// The plain build of the profile's program: served while the profile's own
// build does not compile. Needs a stored profile (a variant is a document
// derived from one).
StagePlan fallback_plan(const std::string& pk, const profile_store::StoredProfile& sp,
                        std::string reason) {
  StagePlan p;
  p.pk = pk;
  const Variant v = plain_variant(&sp.doc);
  p.variant = variant_ref(pk, sp.version, v, sp.doc);
  p.name = describe(v);
  p.reason = std::move(reason);
  return p;
}

// The times of the last hour's feedback rewrites that changed the profile's
// digest (a verdict or a checkpoint keeps it), from the store's history: what
// the rate cap counted before this daemon met the key.
std::vector<ProgramLifecycle::Clock::time_point> recent_rewrites(ServiceState& s,
                                                                 const std::string& pk) {
  std::vector<ProgramLifecycle::Clock::time_point> out;
  auto history = s.store->history(pk);
  if (!history) {
    log::warning("lifecycle " + pk.substr(0, 12) + ": history unreadable, the rate cap counts " +
                 "from now: " + history.error().describe());
    return out;
  }
  std::vector<const profile_store::StoredProfile*> versions;
  for (const auto& v : *history)
    versions.push_back(&v);
  std::sort(versions.begin(), versions.end(),
            [](const auto* a, const auto* b) { return a->version < b->version; });
  const auto hour_ago = ProgramLifecycle::Clock::now() - std::chrono::hours(1);
  std::string before(no_profile_digest()); // what the first version was written over
  for (const profile_store::StoredProfile* v : versions) {
    const auto at = ProgramLifecycle::Clock::time_point(std::chrono::milliseconds(v->created_at));
    if (v->source == profile_store::WriteSource::feedback && v->digest != before && at > hour_ago)
      out.push_back(at);
    before = v->digest;
  }
  return out;
}

} // namespace

// Which variant ran and why (stage.variant in schemas/execute.result.schema.json).
void write_variant(JsonText& t, const StagePlan& plan, bool counted, std::string_view trial) {
  t.begin_object().field("role", to_string(plan.role));
  if (plan.name.empty())
    t.null_field("name");
  else
    t.field("name", plan.name);
  t.field("reason", plan.reason).field("counted", counted);
  if (trial.empty())
    t.null_field("trial");
  else
    t.field("trial", trial);
  t.end_object();
}

json variant_json(const StagePlan& plan) {
  JsonText t;
  write_variant(t, plan);
  return json::parse(t.text());
}

void precompile(ServiceState& s, const ProgramRef& prog,
                const std::optional<cache::ProfileRef>& build) {
  if (!build) return;
  auto done = s.orch->precompile(shared_program(prog), *build);
  if (!done)
    log::warning("guard: compiling the plain build of " + prog->ik.substr(0, 12) +
                 " ahead of its trial failed: " + done.error().describe());
  else
    log::debug("guard: plain build of " + prog->ik.substr(0, 12) +
               " ahead of its trial: " + std::string(cache::to_string(*done)));
}

void after_rewrite(ServiceState& s, const ProgramRef& prog, const Config& c, GuardAhead guard) {
  if (c.tier_up == TierUp::async) {
    auto done = s.orch->tier_up_current(shared_program(prog));
    if (!done)
      log::warning("cache: queueing the rewritten profile's build of " + prog->ik.substr(0, 12) +
                   " failed: " + done.error().describe());
    else
      log::debug("cache: rewritten profile's build of " + prog->ik.substr(0, 12) + ": " +
                 std::string(cache::to_string(*done)));
  }
  if (guard == GuardAhead::ask) precompile(s, prog, s.guard->ahead(prog->ik, c.guard));
}

CompileState compile_state_of(const cache::StageOutput& so) {
  switch (so.tier_up) {
  case cache::TierUpState::none:
    return CompileState::none;
  case cache::TierUpState::scheduled:
    return CompileState::under_way;
  case cache::TierUpState::held_off:
    break;
  }
  return CompileState::held_off;
}

bool renews(const StageStart& start) {
  switch (start.plan.kind) {
  case GuardPlanKind::trial:
  case GuardPlanKind::waiting:
  case GuardPlanKind::other_shape:
    return true;
  case GuardPlanKind::serving:
  case GuardPlanKind::not_guarded:
    break;
  }
  // The lifecycle kept the guard out (counts being gathered, a paused guard,
  // a failed build being retried) or the planned build still compiles: the
  // next stage may plan otherwise.
  return (start.life.entry && !start.life.directive.guard) ||
         start.so.profile_digest != start.so.target_profile_digest;
}

void StageLife::write_since_start(JsonText& t) const {
  if (!entry) {
    t.null();
    return;
  }
  std::lock_guard lk(entry->mu);
  if (!entry->lc.started()) {
    t.null();
    return;
  }
  t.begin_object().field("phase", to_string(entry->lc.phase())).key("transitions").begin_array();
  // A steady program's stage moves nothing: the array is usually empty.
  for (const Transition& tr : entry->lc.transitions_since(transitions_before))
    t.value(to_json(tr));
  t.end_array().end_object();
}

json StageLife::json_since_start() const {
  JsonText t;
  write_since_start(t);
  return json::parse(t.text());
}

Expected<StageStart> start_stage(ServiceState& s, const ProgramRef& prog, const std::string& shape,
                                 const Config& c) {
  StageStart out;
  const auto now = std::chrono::system_clock::now();
  // The number this stage takes (execute takes it once the build is ready).
  const std::int64_t number = prog->stages.load();
  const LifecycleConfig lifecycle = lifecycle_config(c);

  // The profile key and the current profile, read once for the lifecycle
  // and the guard. Before the first compile the key is not known: that
  // stage's feedback starts the lifecycle.
  profile_store::SharedProfile current;
  auto pk = s.keys->lookup_profile_key(prog->ik);
  if (pk && *pk) {
    auto got = s.feedback_store->current(**pk);
    if (got) {
      current = std::move(*got);
      out.life.entry = s.lifecycles->of(**pk);
    }
  }
  if (!out.life.entry) {
    // The first stage, or the key or profile could not be read: the guard
    // says why it plans the current profile.
    out.plan = s.guard->plan(prog->ik, shape, c.guard);
  } else {
    const profile_store::StoredProfile* sp = current.get();
    const ProfileFacts facts = facts_of(sp ? &sp->doc : nullptr, sp ? sp->version : 0,
                                        sp != nullptr && sp->pinned, sp ? sp->digest : "");
    bool started = false;
    {
      std::lock_guard lk(out.life.entry->mu);
      started = out.life.entry->lc.started();
    }
    // First sight of the key under this daemon: the rate cap's count from
    // the history, read outside the lifecycle's lock.
    std::vector<ProgramLifecycle::Clock::time_point> rewrites;
    // (Not while a shared store is out: the count starts from now.)
    if (!started && sp != nullptr && s.store_health().state != StoreState::down)
      rewrites = recent_rewrites(s, **pk);
    {
      std::lock_guard lk(out.life.entry->mu);
      if (!out.life.entry->lc.started()) out.life.entry->lc.restore_rewrites(rewrites);
      out.life.transitions_before = out.life.entry->lc.transitions();
      out.life.directive = out.life.entry->lc.begin(facts, number, lifecycle, now);
    }
    const StageDirective& d = out.life.directive;
    if (d.fallback && sp != nullptr) {
      out.plan = fallback_plan(**pk, *sp,
                               "the profile's build did not compile: the plain build serves "
                               "until it is tried again");
    } else {
      out.plan = s.guard->plan(**pk, sp, shape, c.guard);
      // Only where the lifecycle lets the guard judge (the guard leaves
      // counting and pinned profiles alone too; this keeps the two agreed).
      if (!d.guard && out.plan.kind != GuardPlanKind::not_guarded) {
        StagePlan as_is;
        as_is.pk = **pk;
        as_is.reason = "phase " + std::string(to_string(d.phase)) + ": the profile serves as it is";
        out.plan = std::move(as_is);
      }
    }
    std::lock_guard lk(out.life.entry->mu);
    out.life.entry->lc.planned(out.plan.kind, number, out.plan.name, now);
  }

  const TierUp tier = out.life.directive.sync ? TierUp::sync : c.tier_up;
  const cache::SharedProgram program = shared_program(prog);
  auto so = out.plan.variant ? s.orch->prepare(program, tier, *out.plan.variant)
                             : s.orch->prepare(program, tier);
  if (!so && out.life.entry && current && compile_failure(so.error())) {
    StagePlan fallback =
        fallback_plan(out.plan.pk.empty() ? current->pk : out.plan.pk, *current,
                      "the planned build did not compile (" + so.error().message() +
                          "): the plain build serves until it is tried again");
    const bool was_plain = out.plan.variant && out.plan.variant->digest == fallback.variant->digest;
    if (!was_plain) {
      log::warning("stage of program " + prog->ik.substr(0, 12) + ": " + so.error().describe() +
                   "; serving the plain build");
      {
        std::lock_guard lk(out.life.entry->mu);
        out.life.entry->lc.compile_failed(number, so.error().describe(), now);
      }
      out.plan = std::move(fallback);
      so = s.orch->prepare(program, TierUp::sync, *out.plan.variant);
    }
  }
  if (!so) return std::move(so).error();
  out.so = std::move(*so);
  return out;
}

} // namespace fdo::daemon::methods
