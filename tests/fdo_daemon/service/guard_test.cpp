// The guard over fake stores with injected stage times: which variant each
// stage is planned to run, what is counted, and the verdicts it writes into
// the profile document (docs/guard.md). No clocks, no compiles.
#include "fakes.h"
#include "fdo/cache/memory_key_store.h"
#include "fdo/daemon/guard.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <future>
#include <mutex>
#include <random>

using namespace fdo;
using namespace fdo::daemon;
using namespace fdo::daemon::testing;
using Catch::Contains;
using json = nlohmann::json;

namespace {

ProfileDoc counted_profile() {
  ProfileDoc doc;
  doc.functions["main"] = FunctionProfile{0x1234, {1800, 200}};
  return doc;
}

// A stage that took `t` on both clocks.
StageTimes both(std::uint64_t t) {
  return {t, t};
}

struct GuardHarness {
  cache::MemoryKeyStore keys;
  FakeFeedbackStore store;
  Guard guard{keys, store, "testhost"};
  GuardConfig config;
  const std::string ik = std::string(64, 'a');
  const std::string pk = std::string(64, 'b');
  const std::string shape = "main()";
  std::int64_t stage = 0;

  GuardHarness() {
    REQUIRE(keys.put_profile_key(ik, pk));
    ps::WriteInfo info;
    REQUIRE(store.write(pk, 0, counted_profile(), info));
    config.min_stages = 0;
    config.tune_max_variants = 0;
    config.checkpoint_pairs = 0; // the restart test turns saving on
  }

  // One stage: plan it, "run" it for the time `time_of` gives the planned
  // role, record it. Returns the plan and the record.
  template <class TimeOf> std::pair<StagePlan, GuardStage> stage_with(TimeOf&& time_of) {
    StagePlan p = guard.plan(ik, shape, config);
    std::string served = p.variant ? p.variant->digest : std::string();
    GuardStage g = guard.record(p, served, both(time_of(p.role)), stage++, ik, 0, config);
    return {p, g};
  }

  // Stages until one ends the trial (at most 200): its verdict and how many ran.
  template <class TimeOf> std::pair<std::optional<TrialRecord>, int> run_to_verdict(TimeOf&& t) {
    std::optional<TrialRecord> verdict;
    int stages = 0;
    for (; stages < 200 && !verdict; ++stages)
      verdict = stage_with(t).second.verdict;
    return {verdict, stages};
  }

  ps::StoredProfile current() {
    auto c = store.current(pk);
    REQUIRE(c);
    REQUIRE(*c);
    return **c;
  }
};

// "plain" for a plain build's document, "knobs" for a profiled variant's.
std::string describe_variant_doc(const ProfileDoc& doc) {
  return choose_mode(&doc) == CompileMode::plain ? "plain" : "knobs";
}

// Candidate slower (or faster) by `ratio`, with a little seeded noise.
auto timing(double ratio, std::uint64_t seed) {
  return [ratio, rng = std::mt19937_64(seed),
          noise = std::normal_distribution<double>(0, 0.01)](VariantRole role) mutable {
    double t = 1e6 * std::exp(noise(rng));
    return static_cast<std::uint64_t>(role == VariantRole::candidate ? t * ratio : t);
  };
}

} // namespace

TEST_CASE("guard: variants derive from the profile with their own digests", "[guard]") {
  ProfileDoc cur = counted_profile();
  Variant plain{VariantBase::plain, cur.knobs};
  Variant profiled{VariantBase::profiled, cur.knobs};
  ProfileDoc pd = variant_doc(plain, cur);
  CHECK(pd.functions.empty());
  CHECK(choose_mode(&pd) == CompileMode::plain);
  ProfileDoc od = variant_doc(profiled, cur);
  CHECK(choose_mode(&od) == CompileMode::optimized);
  // The profiled variant with the profile's own knobs is the profile: same CK.
  CHECK(profile_digest(od) == profile_digest(cur));
  CHECK(profile_digest(pd) != profile_digest(od));
  CHECK(describe(plain) == "plain O2");
  auto o3 = knob_variant(profiled, knob_step::opt_level);
  REQUIRE(o3);
  CHECK(describe(*o3) == "profiled O3");
  CHECK(describe(*knob_variant(profiled, knob_step::text32)) == "profiled O2 text+32");
  // The profile-part steps (context-sensitive counts, marks, layout) need the
  // profile to look at.
  CHECK_FALSE(knob_variant(profiled, knob_step::cs_counts));
  CHECK_FALSE(knob_variant(profiled, knob_step::marks));
  CHECK_FALSE(knob_variant(profiled, knob_step::layout));
  CHECK(describe(*knob_variant(profiled, knob_step::text16)) == "profiled O2 text+16");
  CHECK(describe(*knob_variant(profiled, knob_step::text48)) == "profiled O2 text+48");
  CHECK(describe(*knob_variant(profiled, knob_step::unroll)) == "profiled O2 -unroll");
  CHECK(describe(*knob_variant(profiled, knob_step::vectorize)) == "profiled O2 -vectorize");
  CHECK(describe(*knob_variant(profiled, knob_step::inline500)) == "profiled O2 inline=500");
  CHECK(describe(*knob_variant(profiled, knob_step::inline75)) == "profiled O2 inline=75");
  CHECK_FALSE(knob_variant(profiled, kKnobVariants));
  // A text offset is a compile of its own (the offset travels with the
  // object), and the plain build has them too; the step for the offset the
  // incumbent already has goes back to 0, the others replace it.
  auto t32 = knob_variant(profiled, knob_step::text32);
  CHECK(t32->knobs.text_offset == 32);
  CHECK(profile_digest(variant_doc(*t32, cur)) != profile_digest(cur));
  CHECK(describe(*knob_variant(plain, knob_step::text48)) == "plain O2 text+48");
  // From a plain incumbent beside a profile with counts (the profile lost
  // its trial at one placement), the offset steps try the profile's build
  // at the other placements: the current counts (version 0).
  auto profiled_at = knob_variant(plain, knob_step::text32, &cur);
  REQUIRE(profiled_at);
  CHECK(describe(*profiled_at) == "profiled O2 text+32");
  CHECK(profiled_at->version == 0);
  const ProfileDoc at_doc = variant_doc(*profiled_at, cur);
  CHECK(choose_mode(&at_doc) == CompileMode::optimized);
  CHECK(at_doc.knobs.text_offset == 32);
  CHECK(describe(*knob_variant(plain, knob_step::opt_level, &cur)) ==
        "plain O3"); // the other steps keep the base
  CHECK(describe(*knob_variant(plain, knob_step::unroll, &cur)) == "plain O2 -unroll");
  ProfileDoc uncounted;
  uncounted.functions["main"] = FunctionProfile{0x1234, {0, 0}};
  CHECK(describe(*knob_variant(plain, knob_step::text16, &uncounted)) == "plain O2 text+16");
  CHECK(knob_variant(*t32, knob_step::text32)->knobs.text_offset == 0);
  CHECK(knob_variant(*t32, knob_step::text16)->knobs.text_offset == 16);
  CHECK(describe(*knob_variant(*t32, knob_step::opt_level)) == "profiled O3 text+32");
  auto t32_back = variant_from_knobs_json(VariantBase::profiled, variant_knobs_json(*t32));
  REQUIRE(t32_back);
  CHECK(*t32_back == *t32);
  CHECK(profile_digest(variant_doc(*o3, cur)) != profile_digest(cur));
  // An imported profile's records outside the program shape the compile (the
  // profile summary): the profiled variant keeps them, and stays the profile.
  ProfileDoc imported = cur;
  imported.outside_functions["main"] = FunctionProfile{.cfg_hash = 7, .counts = {0, 3, 1}};
  CHECK(profile_digest(variant_doc(profiled, imported)) == profile_digest(imported));
}

TEST_CASE("guard: arms follow the record, the profile and the stage budgets", "[guard]") {
  ProfileDoc cur = counted_profile();
  std::string digest = profile_digest(cur);
  GuardConfig c;
  c.min_stages = 20;
  c.tune_min_stages = 100;
  c.tune_max_variants = 2;
  GuardRecord none;
  Arms a = arms_of(none, cur, digest, 5, c);
  CHECK(a.waiting); // few stages: the profile is served as it is
  a = arms_of(none, cur, digest, 20, c);
  CHECK_FALSE(a.waiting);
  CHECK(a.incumbent.base == VariantBase::plain);
  REQUIRE(a.candidate);
  CHECK(a.candidate->base == VariantBase::profiled);
  CHECK(a.kind == TrialKind::profile);

  GuardRecord decided;
  decided.incumbent_base = VariantBase::plain;
  decided.incumbent_knobs = to_json(cur.knobs);
  decided.trialled_digest = digest;
  a = arms_of(decided, cur, digest, 50, c);
  CHECK_FALSE(a.candidate); // trialled, too few stages to tune
  a = arms_of(decided, cur, digest, 100, c);
  REQUIRE(a.candidate);
  CHECK(a.kind == TrialKind::tuning);
  CHECK(describe(*a.candidate) == "plain O3");
  // O3 and the text offset 32 tried: two variants, the budget is spent (the
  // profile-part steps never apply to a plain incumbent).
  decided.tuning_step = knob_step::text32 + 1;
  CHECK_FALSE(arms_of(decided, cur, digest, 1000, c).candidate); // budget spent

  // A new profile version: trial it again, against the plain build.
  ProfileDoc next = cur;
  next.functions["main"].counts = {100, 1900};
  a = arms_of(decided, next, profile_digest(next), 1000, c);
  REQUIRE(a.candidate);
  CHECK(a.kind == TrialKind::profile);
  CHECK(a.incumbent.base == VariantBase::plain);
}

TEST_CASE("guard: a slower profiled build is rejected and the plain build served", "[guard]") {
  GuardHarness h;
  auto time = timing(1.07, 1);
  std::optional<TrialRecord> verdict;
  int counted = 0;
  std::vector<VariantRole> roles;
  for (int i = 0; i < 60 && !verdict; ++i) {
    auto [p, g] = h.stage_with(time);
    roles.push_back(p.role);
    counted += g.counted;
    verdict = g.verdict;
  }
  REQUIRE(verdict);
  CHECK(verdict->verdict == TrialVerdict::rejected);
  CHECK(verdict->candidate == "v1 profiled O2");
  CHECK(verdict->incumbent == "plain O2");
  CHECK(verdict->ratio > 1.04);
  CHECK(verdict->candidate_stages == counted / 2);
  CHECK_THAT(verdict->summary,
             Contains("v1 profiled O2 rejected: 1.0") && Contains("x slower than plain O2 over "));
  CHECK(std::count(roles.begin(), roles.end(), VariantRole::candidate) == counted / 2);
  // Blocks of four stages, I C C I or C I I C: two of each arm, the first and
  // last alike, the middle two the other arm.
  REQUIRE(roles.size() % 4 == 0);
  for (std::size_t b = 0; b + 4 <= roles.size(); b += 4) {
    CHECK(roles[b] == roles[b + 3]);
    CHECK(roles[b + 1] == roles[b + 2]);
    CHECK(roles[b] != roles[b + 1]);
  }

  // The decision is in the profile document: a new version, same digest.
  ps::StoredProfile cur = h.current();
  CHECK(cur.version == 2);
  CHECK(cur.digest == profile_digest(counted_profile()));
  REQUIRE(cur.doc.guard.incumbent_base);
  CHECK(*cur.doc.guard.incumbent_base == VariantBase::plain);
  REQUIRE(cur.doc.guard.trials.size() == 1);
  CHECK(cur.doc.guard.trials[0] == *verdict);
  CHECK_THAT(cur.reason, Contains("guard: v1 profiled O2 rejected"));

  // Later stages run the plain build, and a new guard (a restart) does too.
  for (int i = 0; i < 5; ++i) {
    auto [p, g] = h.stage_with(time);
    CHECK(p.role == VariantRole::incumbent);
    CHECK(p.name == "plain O2");
    REQUIRE(p.variant);
    CHECK(choose_mode(p.variant->doc.get()) == CompileMode::plain);
    CHECK_FALSE(g.counted);
  }
  Guard restarted(h.keys, h.store, "testhost");
  StagePlan p = restarted.plan(h.ik, h.shape, h.config);
  CHECK(p.name == "plain O2");
  CHECK_THAT(p.reason, Contains("rejected"));
  GuardCounters n = h.guard.counters();
  CHECK(n.trials_started == 1);
  CHECK(n.rejected == 1);
  CHECK(n.accepted == 0);
  CHECK(n.losing_stages == static_cast<std::uint64_t>(counted / 2));
}

TEST_CASE("guard: a faster profiled build is accepted and served", "[guard]") {
  GuardHarness h;
  auto time = timing(1 / 1.05, 2);
  std::optional<TrialRecord> verdict;
  for (int i = 0; i < 60 && !verdict; ++i)
    verdict = h.stage_with(time).second.verdict;
  REQUIRE(verdict);
  CHECK(verdict->verdict == TrialVerdict::accepted);
  CHECK_THAT(verdict->summary, Contains("accepted: 1.05x faster than plain O2"));
  auto [p, g] = h.stage_with(time);
  CHECK(p.role == VariantRole::incumbent);
  REQUIRE(p.variant);
  CHECK(p.variant->digest == profile_digest(counted_profile())); // the profile's own CK
  CHECK(h.guard.counters().accepted == 1);
}

TEST_CASE("guard: equal builds end in no difference and keep the plain build", "[guard]") {
  GuardHarness h;
  auto time = timing(1.0, 3);
  auto [verdict, stages] = h.run_to_verdict(time);
  REQUIRE(verdict);
  CHECK(verdict->verdict == TrialVerdict::no_difference);
  // At most the budget; earlier once no run of blocks left could keep the
  // candidate.
  CHECK(stages <= 2 * h.config.trial.max_pairs);
  CHECK(stages >= 2 * h.config.trial.min_pairs);
  CHECK(*h.current().doc.guard.incumbent_base == VariantBase::plain);
}

TEST_CASE("guard: an inconclusive profile trial keeps the incumbent, whatever its median",
          "[guard]") {
  GuardHarness h;
  // Two candidate stages in three 3% faster, the third 3% slower: the median
  // pair says 3% faster, but the test is not sure of more than min_effect
  // within the budget. Not shown faster: the plain build stays.
  int candidate_stages = 0;
  auto time = [&](VariantRole role) -> std::uint64_t {
    if (role != VariantRole::candidate) return 1'000'000;
    return candidate_stages++ % 3 == 2 ? 1'030'928 : 970'000;
  };
  auto [verdict, stages] = h.run_to_verdict(time);
  REQUIRE(verdict);
  CHECK(verdict->verdict == TrialVerdict::no_difference);
  CHECK(stages <= 2 * h.config.trial.max_pairs);
  CHECK(verdict->ratio < 0.98);
  CHECK_THAT(verdict->summary,
             Contains("v1 profiled O2 not taken (no difference): 1.03x faster than plain O2"));
  CHECK(*h.current().doc.guard.incumbent_base == VariantBase::plain);
  auto [p, g] = h.stage_with(time);
  CHECK(p.role == VariantRole::incumbent);
  CHECK(p.name == "plain O2");
  CHECK(h.guard.counters().no_difference == 1);
  CHECK(h.guard.counters().accepted == 0);
}

TEST_CASE("guard: what a finished trial keeps", "[guard]") {
  TrialResult r;
  r.verdict = Verdict::accepted;
  CHECK(kept_arm(r) == Arm::candidate);
  r.verdict = Verdict::rejected;
  CHECK(kept_arm(r) == Arm::incumbent);
  // Not shown faster: the incumbent stays, whatever the median said.
  r.verdict = Verdict::no_difference;
  r.ratio = 0.95;
  CHECK(kept_arm(r) == Arm::incumbent);
  r.ratio = 1.2;
  CHECK(kept_arm(r) == Arm::incumbent);
}

TEST_CASE("guard: stages that ran another variant or another shape are not counted", "[guard]") {
  GuardHarness h;
  StagePlan p = h.guard.plan(h.ik, h.shape, h.config);
  REQUIRE(p.variant);
  // The variant was still compiling: the previous output served.
  GuardStage g = h.guard.record(p, "some-other-digest", both(1000), 0, h.ik, 0, h.config);
  CHECK_FALSE(g.counted);
  CHECK_THAT(g.note, Contains("still compiling"));
  // Same plan counted now; then a stage of another shape runs the incumbent.
  CHECK(h.guard.record(p, p.variant->digest, both(1000), 1, h.ik, 0, h.config).counted);
  StagePlan other = h.guard.plan(h.ik, "main(2a)", h.config);
  CHECK(other.role == VariantRole::incumbent);
  CHECK(other.trial_id.empty());
  CHECK_THAT(other.reason, Contains("not comparable"));
  CHECK_FALSE(h.guard.record(other, other.variant->digest, both(10), 2, h.ik, 0, h.config).counted);
}

TEST_CASE("guard: a trial compares the clock guard.clock names, never both", "[guard]") {
  CHECK(GuardConfig{}.clock == GuardClock::cpu);
  CHECK(time_on(GuardClock::cpu, {900, 400}) == 400u);
  CHECK(time_on(GuardClock::wall, {900, 400}) == 900u);
  CHECK_FALSE(time_on(GuardClock::cpu, {900, std::nullopt}));

  // On CPU time (the default) the candidate is faster (a loaded host made
  // its wall times slow); on wall time the same stages say the opposite.
  auto run = [](GuardClock clock) {
    GuardHarness h;
    h.config.clock = clock;
    std::optional<TrialRecord> verdict;
    std::string first_id;
    for (int i = 0; i < 200 && !verdict; ++i) {
      StagePlan p = h.guard.plan(h.ik, h.shape, h.config);
      REQUIRE(p.variant);
      if (first_id.empty()) first_id = p.trial_id;
      CHECK(p.clock == clock);
      const bool cand = p.role == VariantRole::candidate;
      const double jitter = 1.0 + 0.001 * (i % 7);
      const auto cpu = static_cast<std::uint64_t>((cand ? 800'000 : 1'000'000) * jitter);
      const auto wall = static_cast<std::uint64_t>((cand ? 1'500'000 : 1'000'000) * jitter);
      GuardStage g =
          h.guard.record(p, p.variant->digest, {wall, cpu}, h.stage++, h.ik, 0, h.config);
      CHECK(g.counted);
      verdict = g.verdict;
    }
    REQUIRE(verdict);
    return std::pair{*verdict, first_id};
  };
  auto [on_cpu, cpu_id] = run(GuardClock::cpu);
  CHECK(on_cpu.verdict == TrialVerdict::accepted);
  CHECK(on_cpu.ratio == Approx(0.8).epsilon(0.02));
  auto [on_wall, wall_id] = run(GuardClock::wall);
  CHECK(on_wall.verdict == TrialVerdict::rejected);
  CHECK(on_wall.ratio == Approx(1.5).epsilon(0.02));
  // The clock is part of the trial: a CPU-time trial's id says so. Both
  // name the randomized blocks, so a checkpoint saved before them (in the
  // fixed order) is not resumed.
  CHECK_THAT(cpu_id, Catch::EndsWith(" blocks cpu"));
  CHECK(wall_id + " cpu" == cpu_id);

  // A stage without a CPU time is not counted on that clock.
  GuardHarness h;
  StagePlan p = h.guard.plan(h.ik, h.shape, h.config);
  REQUIRE(p.variant);
  GuardStage g = h.guard.record(p, p.variant->digest, {1000, std::nullopt}, 0, h.ik, 0, h.config);
  CHECK_FALSE(g.counted);
  CHECK_THAT(g.note, Contains("no cpu time"));

  // Changing the clock starts a running trial over: samples on one clock are
  // never compared with the other's.
  CHECK(h.guard.record(p, p.variant->digest, both(1000), 1, h.ik, 0, h.config).counted);
  h.config.clock = GuardClock::wall;
  StagePlan q = h.guard.plan(h.ik, h.shape, h.config);
  CHECK(q.trial_id != p.trial_id);
  CHECK(q.clock == GuardClock::wall);
  // The trial restarted: the stage recorded under the old plan is not counted.
  CHECK_FALSE(h.guard.record(p, p.variant->digest, both(1000), 2, h.ik, 0, h.config).counted);
  CHECK(h.guard.counters().trials_started == 2);
}

TEST_CASE("guard: a trial bound to a shape that stopped coming moves to the new shape", "[guard]") {
  GuardHarness h;
  (void)h.guard.plan(h.ik, "main(1)", h.config); // binds the trial to main(1)
  StagePlan p;
  for (int i = 0; i <= 2 * h.config.trial.max_pairs + 1; ++i)
    p = h.guard.plan(h.ik, "main(2)", h.config);
  CHECK_FALSE(p.trial_id.empty()); // rebound: main(2) stages are on trial now
}

TEST_CASE("guard: pinned profiles, operator modes, no counts and guard off serve the profile",
          "[guard]") {
  GuardHarness h;
  h.config.mode = GuardMode::off;
  CHECK(h.guard.plan(h.ik, h.shape, h.config).role == VariantRole::current);
  CHECK_FALSE(h.guard.plan(h.ik, h.shape, h.config).variant);
  h.config.mode = GuardMode::on;
  h.store.keys[h.pk].pinned = true;
  StagePlan p = h.guard.plan(h.ik, h.shape, h.config);
  CHECK(p.role == VariantRole::current);
  CHECK_THAT(p.reason, Contains("pinned"));
  h.store.keys[h.pk].pinned = false;
  ProfileDoc instrument = counted_profile();
  instrument.knobs.mode = CompileMode::instrumented;
  REQUIRE(h.store.write(h.pk, 1, instrument, {}));
  p = h.guard.plan(h.ik, h.shape, h.config);
  CHECK(p.role == VariantRole::current);
  CHECK_THAT(p.reason, Contains("mode instrumented"));
  // An unknown program (first stage) is not the guard's either.
  CHECK(h.guard.plan(std::string(64, 'c'), h.shape, h.config).role == VariantRole::current);
}

TEST_CASE("guard: a verdict the store refuses is retried at the next stage", "[guard]") {
  GuardHarness h;
  auto time = timing(1.3, 4); // clearly slower: rejected at the first look (min_pairs)
  h.store.conflicts_to_inject = 1;
  std::vector<GuardStage> seen;
  for (int i = 0; i < 2 * h.config.trial.min_pairs; ++i)
    seen.push_back(h.stage_with(time).second);
  CHECK_FALSE(seen.back().verdict);
  CHECK_THAT(seen.back().note, Contains("not recorded"));
  GuardStage next = h.stage_with(time).second;
  REQUIRE(next.verdict);
  CHECK(next.verdict->verdict == TrialVerdict::rejected);
  CHECK_FALSE(next.verdict->early_stop);
  CHECK(h.guard.counters().verdict_write_failures == 1);
  CHECK(h.current().doc.guard.trials.size() == 1);
}

TEST_CASE("guard: a verdict is written without the key's lock - other stages go on meanwhile",
          "[guard]") {
  GuardHarness h;
  auto time = timing(1.3, 4); // clearly slower: rejected at the first look
  h.store.hold_writes_of = h.pk;
  // The stage that decides writes the verdict, and waits in the store.
  auto writer = std::async(std::launch::async, [&] { return h.run_to_verdict(time); });
  h.store.wait_until_write_held();
  // Meanwhile another stage of the same key is planned and recorded: it must
  // not wait for the write (with the key's lock held across it, it would).
  auto other = std::async(std::launch::async, [&] { return h.stage_with(time); });
  const bool finished = other.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  h.store.release_held_write();
  REQUIRE(finished);
  GuardStage meanwhile = other.get().second;
  // It counts, and leaves the verdict to the write under way.
  CHECK_FALSE(meanwhile.verdict);
  CHECK_FALSE(meanwhile.ended);
  CHECK_THAT(meanwhile.note, Contains("being recorded"));
  auto [verdict, stages] = writer.get();
  REQUIRE(verdict);
  CHECK(verdict->verdict == TrialVerdict::rejected);
  // One verdict, written once; the next stage serves what it left.
  CHECK(h.current().doc.guard.trials.size() == 1);
  CHECK(h.guard.counters().rejected == 1);
  CHECK(h.guard.counters().verdict_write_failures == 0);
  auto [p, g] = h.stage_with(time);
  CHECK(p.name == "plain O2");
  CHECK_FALSE(g.counted);
}

TEST_CASE("guard: knob variants are tried on programs that run many stages", "[guard]") {
  GuardHarness h;
  h.config.tune_min_stages = 40;
  h.config.tune_max_variants = 1;
  // First the profile trial (equal: no difference, plain stays) ...
  auto equal = timing(1.0, 5);
  std::vector<TrialRecord> verdicts;
  for (int i = 0; i < 400 && verdicts.size() < 2; ++i) {
    auto [p, g] = h.stage_with(verdicts.empty() ? equal : timing(1 / 1.08, 100 + i));
    if (g.verdict) verdicts.push_back(*g.verdict);
  }
  REQUIRE(verdicts.size() == 2);
  // ... then O3 on the plain build, faster here: accepted and kept.
  CHECK(verdicts[1].candidate == "plain O3");
  CHECK(verdicts[1].verdict == TrialVerdict::accepted);
  ps::StoredProfile cur = h.current();
  CHECK(cur.doc.guard.tuning_step == 1);
  auto knobs = knobs_from_json(cur.doc.guard.incumbent_knobs);
  REQUIRE(knobs);
  CHECK(knobs->opt_level == 3);
  // Budget spent: no more candidates.
  StagePlan p = h.guard.plan(h.ik, h.shape, h.config);
  CHECK(p.name == "plain O3");
  CHECK(p.trial_id.empty());
}

ProfileDoc marked_profile() {
  ProfileDoc doc = counted_profile();
  doc.functions["main"].unpredictable = {1};
  doc.functions["helper"] = FunctionProfile{0x99, {2000, 0}};
  doc.functions["helper"].layout = FunctionLayout::hot;
  return doc;
}

TEST_CASE("guard: the sampled marks and layout are knob variants where the profile has them",
          "[guard]") {
  ProfileDoc cur = marked_profile();
  Variant profiled{VariantBase::profiled, cur.knobs};
  Variant plain{VariantBase::plain, cur.knobs};
  // Not applicable without a profile to look at, on the plain build, or
  // where the profile has no marks / layout: the same code would compile.
  CHECK_FALSE(knob_variant(profiled, knob_step::marks));
  CHECK_FALSE(knob_variant(plain, knob_step::marks, &cur));
  CHECK_FALSE(knob_variant(plain, knob_step::layout, &cur));
  ProfileDoc bare = counted_profile();
  CHECK_FALSE(knob_variant(profiled, knob_step::marks, &bare));
  CHECK_FALSE(knob_variant(profiled, knob_step::layout, &bare));

  auto no_marks = knob_variant(profiled, knob_step::marks, &cur);
  REQUIRE(no_marks);
  CHECK(describe(*no_marks) == "profiled O2 -marks");
  ProfileDoc d = variant_doc(*no_marks, cur);
  CHECK(d.functions.at("main").unpredictable.empty());
  CHECK(d.functions.at("main").counts == cur.functions.at("main").counts);
  CHECK(d.functions.at("helper").layout == FunctionLayout::hot); // only the marks go
  CHECK(d.knobs == cur.knobs);
  CHECK(profile_digest(d) != profile_digest(cur));

  auto no_layout = knob_variant(profiled, knob_step::layout, &cur);
  REQUIRE(no_layout);
  CHECK(describe(*no_layout) == "profiled O2 -layout");
  d = variant_doc(*no_layout, cur);
  CHECK(d.functions.at("helper").layout == FunctionLayout::normal);
  CHECK(d.functions.at("main").unpredictable == std::vector<std::uint32_t>{1});
  CHECK(profile_digest(d) != profile_digest(cur));
  // From an incumbent without them, the step tries them again.
  auto back = knob_variant(*no_marks, knob_step::marks, &cur);
  REQUIRE(back);
  CHECK(back->branch_marks == ProfilePart::kept);
  CHECK(profile_digest(variant_doc(*back, cur)) == profile_digest(cur));

  // The record's form keeps them, and reads back; a malformed one is refused.
  Variant both = *no_marks;
  both.layout = ProfilePart::dropped;
  json j = variant_knobs_json(both);
  CHECK(j.at("branch_marks") == false);
  CHECK(j.at("layout") == false);
  CHECK_FALSE(variant_knobs_json(profiled).contains("branch_marks"));
  auto read = variant_from_knobs_json(VariantBase::profiled, j);
  REQUIRE(read);
  CHECK(*read == both);
  j["layout"] = "off";
  CHECK_FALSE(variant_from_knobs_json(VariantBase::profiled, j));
}

ProfileDoc cs_profile() {
  ProfileDoc doc = counted_profile();
  doc.cs_functions["main"] = FunctionProfile{0x1234 | kCsHashFlag, {900, 100, 700}};
  return doc;
}

TEST_CASE("guard: the context-sensitive counts are a knob variant where the profile has them",
          "[guard]") {
  ProfileDoc cur = cs_profile();
  Variant profiled{VariantBase::profiled, cur.knobs};
  Variant plain{VariantBase::plain, cur.knobs};
  // Not applicable without a profile to look at, on the plain build, or
  // where the profile has no CS counts: the same code would compile.
  CHECK_FALSE(knob_variant(profiled, knob_step::cs_counts));
  CHECK_FALSE(knob_variant(plain, knob_step::cs_counts, &cur));
  ProfileDoc first_round_only = counted_profile();
  CHECK_FALSE(knob_variant(profiled, knob_step::cs_counts, &first_round_only));

  auto no_cs = knob_variant(profiled, knob_step::cs_counts, &cur);
  REQUIRE(no_cs);
  CHECK(describe(*no_cs) == "profiled O2 -cs");
  // It compiles from the first round's counts alone: the profile without
  // its CS section, a build of its own.
  ProfileDoc d = variant_doc(*no_cs, cur);
  CHECK(d.cs_functions.empty());
  CHECK(d.functions == cur.functions);
  CHECK(d.knobs == cur.knobs);
  CHECK(choose_mode(&d) == CompileMode::optimized);
  CHECK(profile_digest(d) == profile_digest(first_round_only));
  CHECK(profile_digest(d) != profile_digest(cur));
  // The next knob step keeps them out; the step from there tries them again.
  auto o3 = knob_variant(*no_cs, knob_step::opt_level, &cur);
  REQUIRE(o3);
  CHECK(describe(*o3) == "profiled O3 -cs");
  CHECK(variant_doc(*o3, cur).cs_functions.empty());
  auto back = knob_variant(*no_cs, knob_step::cs_counts, &cur);
  REQUIRE(back);
  CHECK(back->cs_counts == ProfilePart::kept);
  CHECK(profile_digest(variant_doc(*back, cur)) == profile_digest(cur));

  // The record's form, read back; a malformed one is refused.
  json j = variant_knobs_json(*no_cs);
  CHECK(j.at("cs_counts") == false);
  CHECK_FALSE(variant_knobs_json(profiled).contains("cs_counts"));
  auto read = variant_from_knobs_json(VariantBase::profiled, j);
  REQUIRE(read);
  CHECK(*read == *no_cs);
  j["cs_counts"] = 0;
  CHECK_FALSE(variant_from_knobs_json(VariantBase::profiled, j));

  // What the policy asks of the record (cs_round.h): only a profiled
  // incumbent that leaves them out says the program runs faster without.
  GuardRecord record;
  CHECK_FALSE(incumbent_drops_cs(record));
  record.incumbent_base = VariantBase::profiled;
  record.incumbent_knobs = variant_knobs_json(profiled);
  CHECK_FALSE(incumbent_drops_cs(record));
  record.incumbent_knobs = variant_knobs_json(*no_cs);
  CHECK(incumbent_drops_cs(record));
  record.incumbent_base = VariantBase::plain;
  CHECK_FALSE(incumbent_drops_cs(record));
}

TEST_CASE("guard: tuning passes over steps that do not apply and names the next variant",
          "[guard]") {
  GuardConfig c;
  c.tune_min_stages = 100;
  c.tune_max_variants = kKnobVariants;
  GuardRecord decided;
  decided.incumbent_base = VariantBase::profiled;
  decided.incumbent_version = 1;
  ProfileDoc cur = counted_profile();
  cur.functions["helper"] = FunctionProfile{0x99, {2000, 0}};
  cur.functions["helper"].layout = FunctionLayout::hot; // a layout, no marks
  decided.incumbent_knobs = to_json(cur.knobs);
  const std::string digest = profile_digest(cur);
  decided.trialled_digest = digest;

  // Halfway to tuning: nothing on trial, its first variant named for an early compile.
  Arms a = arms_of(decided, cur, digest, 49, c);
  CHECK_FALSE(a.candidate);
  CHECK_FALSE(a.next);
  a = arms_of(decided, cur, digest, 50, c);
  CHECK_FALSE(a.candidate);
  REQUIRE(a.next);
  CHECK(describe(*a.next) == "profiled O3");
  a = arms_of(decided, cur, digest, 100, c);
  REQUIRE(a.candidate);
  CHECK(a.step == knob_step::opt_level);
  REQUIRE(a.next);
  CHECK(describe(*a.next) == "profiled O2 text+32");

  decided.tuning_step = knob_step::text32;
  a = arms_of(decided, cur, digest, 100, c);
  REQUIRE(a.candidate);
  CHECK(a.step == knob_step::text32);
  CHECK(describe(*a.candidate) == "profiled O2 text+32");
  REQUIRE(a.next); // no CS counts, no marks: their steps are passed over
  CHECK(describe(*a.next) == "profiled O2 -layout");

  decided.tuning_step = knob_step::text32 + 1;
  a = arms_of(decided, cur, digest, 100, c);
  REQUIRE(a.candidate);
  CHECK(a.step == knob_step::layout);
  CHECK(describe(*a.candidate) == "profiled O2 -layout");
  CHECK(a.candidate->version == 1); // the incumbent's counts, as every knob variant
  REQUIRE(a.next);
  CHECK(describe(*a.next) == "profiled O2 text+16");
  // The budget counts variants tried: O3, text+32 and -layout are three.
  c.tune_max_variants = 3;
  decided.tuning_step = knob_step::layout + 1;
  CHECK_FALSE(arms_of(decided, cur, digest, 100, c).candidate);
  c.tune_max_variants = 4;
  a = arms_of(decided, cur, digest, 100, c);
  REQUIRE(a.candidate);
  CHECK(describe(*a.candidate) == "profiled O2 text+16");
  CHECK_FALSE(a.next); // the last one the budget allows
  c.tune_max_variants = kKnobVariants;
  decided.tuning_step = kKnobVariants;
  CHECK_FALSE(arms_of(decided, cur, digest, 100, c).candidate);
  // No profile parts: after text+32 the next variant is text+16.
  ProfileDoc bare = counted_profile();
  decided.trialled_digest = profile_digest(bare);
  decided.tuning_step = knob_step::text32 + 1;
  a = arms_of(decided, bare, profile_digest(bare), 100, c);
  REQUIRE(a.candidate);
  CHECK(a.step == knob_step::text16);
  // An incumbent that won text+16: its own step goes back to 0, the next
  // one tries 48 instead of 16; the budget still counts every step tried.
  decided.incumbent_knobs["text_offset"] = 16;
  a = arms_of(decided, bare, profile_digest(bare), 100, c);
  REQUIRE(a.candidate);
  CHECK(a.step == knob_step::text16);
  CHECK(describe(*a.candidate) == "profiled O2");
  REQUIRE(a.next);
  CHECK(describe(*a.next) == "profiled O2 text+48");
  c.tune_max_variants = 3; // O3, text+32, text+16
  decided.tuning_step = knob_step::text16 + 1;
  CHECK_FALSE(arms_of(decided, bare, profile_digest(bare), 100, c).candidate);
}

// Stages until four trials are decided (at most 4000): the first trial's
// candidate and every candidate whose name has `winner` run 0.8x the
// incumbent's time, the others 1.25x. The builds asked for ahead go to `aheads`.
std::vector<TrialRecord> four_trials_won_by(GuardHarness& h, const std::string& winner,
                                            std::vector<std::string>* aheads = nullptr) {
  std::vector<TrialRecord> verdicts;
  for (int i = 0; i < 4000 && verdicts.size() < 4; ++i) {
    StagePlan p = h.guard.plan(h.ik, h.shape, h.config);
    if (p.ahead && aheads) aheads->push_back(describe_variant_doc(*p.ahead->doc));
    const bool candidate = p.role == VariantRole::candidate;
    double ratio = verdicts.empty() || p.name.find(winner) != std::string::npos ? 0.8 : 1.25;
    std::uint64_t t = candidate ? static_cast<std::uint64_t>(1e6 * ratio) : 1'000'000;
    t += static_cast<std::uint64_t>(i % 7) * 1000;
    std::string served = p.variant ? p.variant->digest : std::string();
    GuardStage g = h.guard.record(p, served, both(t), i, h.ik, 0, h.config);
    if (g.verdict) verdicts.push_back(*g.verdict);
  }
  return verdicts;
}

TEST_CASE("guard: a profile without its marks wins a knob trial and keeps them out", "[guard]") {
  GuardHarness h;
  ps::WriteInfo info;
  REQUIRE(h.store.write(h.pk, 1, marked_profile(), info));
  h.config.tune_min_stages = 40;
  h.config.tune_max_variants = 3; // O3, text+32 and -marks; -layout is past the budget
  // The profile trial (profiled faster: accepted), O3 and text+32 (slower:
  // rejected), then the profile without its marks (faster: accepted).
  std::vector<std::string> aheads;
  std::vector<TrialRecord> verdicts = four_trials_won_by(h, "-marks", &aheads);
  REQUIRE(verdicts.size() == 4);
  CHECK(verdicts[0].verdict == TrialVerdict::accepted);
  CHECK(verdicts[1].candidate == "v2 profiled O3");
  CHECK(verdicts[1].verdict == TrialVerdict::rejected);
  CHECK(verdicts[2].candidate == "v2 profiled O2 text+32");
  CHECK(verdicts[2].verdict == TrialVerdict::rejected);
  CHECK(verdicts[3].candidate == "v2 profiled O2 -marks");
  CHECK(verdicts[3].verdict == TrialVerdict::accepted);
  ps::StoredProfile cur = h.current();
  CHECK(cur.doc.guard.tuning_step == knob_step::marks + 1);
  CHECK(cur.doc.guard.incumbent_knobs.at("branch_marks") == false);
  // What is served from now on compiles without the marks, with the layout.
  StagePlan p = h.guard.plan(h.ik, h.shape, h.config);
  REQUIRE(p.variant);
  CHECK(p.trial_id.empty());
  CHECK(p.name == "v2 profiled O2 -marks");
  CHECK(p.variant->doc->functions.at("main").unpredictable.empty());
  CHECK(p.variant->doc->functions.at("helper").layout == FunctionLayout::hot);
  // Compiled ahead: the plain build, then O3 (halfway to tuning), text+32
  // (during O3's trial) and -marks (during text+32's); nothing during the
  // last trial the budget allows.
  CHECK(aheads == std::vector<std::string>{"plain", "knobs", "knobs", "knobs"});
}

TEST_CASE("guard: a profile without its context-sensitive counts wins and keeps them out",
          "[guard]") {
  GuardHarness h;
  ps::WriteInfo info;
  REQUIRE(h.store.write(h.pk, 1, cs_profile(), info));
  h.config.tune_min_stages = 40;
  h.config.tune_max_variants = 3; // O3, text+32 and -cs
  // The profile trial (profiled faster: accepted), O3 and text+32 (slower:
  // rejected), then the profile without its CS counts (faster: accepted).
  std::vector<TrialRecord> verdicts = four_trials_won_by(h, "-cs");
  REQUIRE(verdicts.size() == 4);
  CHECK(verdicts[0].verdict == TrialVerdict::accepted);
  CHECK(verdicts[1].candidate == "v2 profiled O3");
  CHECK(verdicts[2].candidate == "v2 profiled O2 text+32");
  CHECK(verdicts[3].candidate == "v2 profiled O2 -cs");
  CHECK(verdicts[3].verdict == TrialVerdict::accepted);
  ps::StoredProfile cur = h.current();
  CHECK(cur.doc.guard.tuning_step == knob_step::cs_counts + 1);
  CHECK(cur.doc.guard.incumbent_knobs.at("cs_counts") == false);
  CHECK(incumbent_drops_cs(cur.doc.guard));
  // Served from now on: the first round's counts alone.
  StagePlan p = h.guard.plan(h.ik, h.shape, h.config);
  REQUIRE(p.variant);
  CHECK(p.trial_id.empty());
  CHECK(p.name == "v2 profiled O2 -cs");
  CHECK(p.variant->doc->cs_functions.empty());
  CHECK(p.variant->doc->functions == cur.doc.functions);

  // A new profile (new counts, again with CS counts) is tried without them,
  // as the incumbent it is tried against.
  ProfileDoc next = cur.doc;
  next.functions["main"].counts = {100, 1900};
  REQUIRE(h.store.write(h.pk, cur.version, next, info));
  p = h.guard.plan(h.ik, h.shape, h.config);
  CHECK(p.role != VariantRole::current);
  CHECK_THAT(p.name, Contains("-cs"));
  REQUIRE(p.variant);
  CHECK(p.variant->doc->cs_functions.empty());
}

TEST_CASE("guard: a profile that lost at one placement is tried at another and served there",
          "[guard]") {
  GuardHarness h;
  h.config.tune_min_stages = 40;
  h.config.tune_max_variants = 2; // O3 and text+32
  // The profiled build is slower than the plain one where it was first
  // placed (rejected), O3 of the plain build too; the profiled build 32
  // bytes on is faster (accepted).
  std::vector<TrialRecord> verdicts;
  std::mt19937_64 rng(7);
  std::normal_distribution<double> noise(0, 0.01);
  for (int i = 0; i < 3000 && verdicts.size() < 3; ++i) {
    StagePlan p = h.guard.plan(h.ik, h.shape, h.config);
    double ratio = 1.0;
    if (p.role == VariantRole::candidate)
      ratio = p.name.find("text+32") != std::string::npos ? 0.8 : 1.25;
    const auto t = static_cast<std::uint64_t>(1e6 * ratio * std::exp(noise(rng)));
    std::string served = p.variant ? p.variant->digest : std::string();
    GuardStage g = h.guard.record(p, served, both(t), i, h.ik, 0, h.config);
    if (g.verdict) verdicts.push_back(*g.verdict);
  }
  REQUIRE(verdicts.size() == 3);
  CHECK(verdicts[0].candidate == "v1 profiled O2");
  CHECK(verdicts[0].verdict == TrialVerdict::rejected);
  CHECK(verdicts[1].candidate == "plain O3");
  CHECK(verdicts[1].verdict == TrialVerdict::rejected);
  CHECK(verdicts[2].incumbent == "plain O2");
  CHECK_THAT(verdicts[2].candidate, Catch::Matches("v[0-9]+ profiled O2 text\\+32"));
  CHECK(verdicts[2].verdict == TrialVerdict::accepted);
  ps::StoredProfile cur = h.current();
  CHECK(cur.doc.guard.incumbent_base == VariantBase::profiled);
  CHECK(cur.doc.guard.incumbent_version > 0); // the counts it compiles from
  CHECK(cur.doc.guard.incumbent_knobs.at("text_offset") == 32);
  // What is served from now on: the profile's build at +32, nothing on trial.
  StagePlan p = h.guard.plan(h.ik, h.shape, h.config);
  REQUIRE(p.variant);
  CHECK(p.trial_id.empty());
  CHECK(p.role == VariantRole::incumbent);
  CHECK_THAT(p.name, Catch::Matches("v[0-9]+ profiled O2 text\\+32"));
  CHECK(choose_mode(p.variant->doc.get()) == CompileMode::optimized);
  CHECK(p.variant->doc->knobs.text_offset == 32);
}

TEST_CASE("guard: a malformed guard record is a clear error naming the field", "[guard]") {
  auto doc = to_json(counted_profile());
  doc["guard"] = {{"incumbent", {{"base", "fastest"}}}};
  auto bad = profile_from_json(doc);
  REQUIRE_FALSE(bad);
  CHECK_THAT(bad.error().describe(), Contains("guard.incumbent.base"));
  doc["guard"] = {{"trials", {{{"verdict", "won"}}}}};
  bad = profile_from_json(doc);
  REQUIRE_FALSE(bad);
  CHECK_THAT(bad.error().describe(), Contains("guard.trials[0].verdict"));
  doc["guard"] = {{"incumbent", {{"base", "plain"}, {"knobs", {{"opt_level", 9}}}}}};
  bad = profile_from_json(doc);
  REQUIRE_FALSE(bad);
  CHECK_THAT(bad.error().describe(), Contains("guard.incumbent.knobs"));
  // A good record round-trips, and never changes the digest.
  ProfileDoc withg = counted_profile();
  withg.guard.incumbent_base = VariantBase::plain;
  withg.guard.trials.push_back(TrialRecord{"v1 profiled O2", "plain O2", TrialVerdict::rejected,
                                           1.07, 12, 12, false, 1, "", "x"});
  auto back = profile_from_json(to_json(withg));
  REQUIRE(back);
  CHECK(back->guard == withg.guard);
  CHECK(profile_digest(withg) == profile_digest(counted_profile()));
}

TEST_CASE("guard: the plain build is asked for ahead of the first trial, once", "[guard]") {
  GuardHarness h;
  h.config.min_stages = 3;
  // Right after the rewrite that gave the program its first counts.
  std::optional<cache::ProfileRef> ahead = h.guard.ahead(h.ik, h.config);
  REQUIRE(ahead);
  CHECK(choose_mode(ahead->doc.get()) == CompileMode::plain);
  CHECK(ahead->pk == h.pk);
  CHECK_FALSE(h.guard.ahead(h.ik, h.config)); // asked once
  // Stages before the trial serve the profile and ask for nothing more.
  for (int i = 0; i < 2; ++i) {
    StagePlan p = h.guard.plan(h.ik, h.shape, h.config);
    CHECK(p.role == VariantRole::current);
    CHECK_FALSE(p.ahead);
    h.guard.record(p, "", both(1000), i, h.ik, 0, h.config);
  }
  // The trial's plain arm is the build compiled ahead (its first block may
  // start with the candidate: then the plain arm's first stage is the next).
  StagePlan first = h.guard.plan(h.ik, h.shape, h.config);
  REQUIRE(first.variant);
  if (first.role == VariantRole::candidate) {
    h.guard.record(first, first.variant->digest, both(1000), 2, h.ik, 0, h.config);
    first = h.guard.plan(h.ik, h.shape, h.config);
    REQUIRE(first.variant);
  }
  CHECK(first.role == VariantRole::incumbent);
  CHECK(first.variant->digest == ahead->digest);

  // Without the rewrite hook (a daemon that restarted after it), the first
  // planned stage under the profile asks for it.
  Guard other(h.keys, h.store, "testhost");
  StagePlan p = other.plan(h.ik, h.shape, h.config);
  REQUIRE(p.ahead);
  CHECK(p.ahead->digest == ahead->digest);
  CHECK_FALSE(other.plan(h.ik, h.shape, h.config).ahead);
  // Not for profiles the guard leaves alone.
  h.config.mode = GuardMode::off;
  Guard off(h.keys, h.store, "testhost");
  CHECK_FALSE(off.ahead(h.ik, h.config));
  CHECK_FALSE(off.plan(h.ik, h.shape, h.config).ahead);
}

namespace {
// Runs stages until a verdict (at most `limit`).
template <class TimeOf>
std::optional<TrialRecord> until_verdict(GuardHarness& h, TimeOf&& time, int limit = 200) {
  for (int i = 0; i < limit; ++i)
    if (auto v = h.stage_with(time).second.verdict) return v;
  return std::nullopt;
}

// A rewrite by the feedback policy: new counts, the guard's record carried over.
std::int64_t rewrite_counts(GuardHarness& h, std::vector<std::uint64_t> counts) {
  ps::StoredProfile cur = h.current();
  ProfileDoc next = cur.doc;
  next.functions["main"].counts = std::move(counts);
  auto v = h.store.write(h.pk, cur.version, next, {});
  REQUIRE(v);
  return *v;
}
} // namespace

TEST_CASE("guard: a new profile is tried against the incumbent that won, not the plain build",
          "[guard]") {
  GuardHarness h;
  // v1's profiled build beats the plain build: it becomes the incumbent.
  auto v1 = until_verdict(h, timing(1 / 1.3, 7));
  REQUIRE(v1);
  REQUIRE(v1->verdict == TrialVerdict::accepted);
  ProfileDoc v1_doc = h.current().doc;
  CHECK(h.current().doc.guard.incumbent_version == 1);
  const std::string v1_build =
      profile_digest(variant_doc(Variant{VariantBase::profiled, v1_doc.knobs, 0}, v1_doc));
  CHECK(h.current().doc.guard.incumbent_digest == v1_build);

  // A rewrite (v3): its profiled build is on trial against v1's build.
  const std::int64_t v3 = rewrite_counts(h, {100, 1900});
  // The first block's first two stages: one of each arm, in the coin's order.
  std::optional<StagePlan> p, c;
  for (int i = 0; i < 2; ++i) {
    StagePlan s = h.guard.plan(h.ik, h.shape, h.config);
    REQUIRE(s.variant);
    CHECK_THAT(s.reason, Contains("profile trial: v" + std::to_string(v3) +
                                  " profiled O2 against v1 profiled O2"));
    h.guard.record(s, s.variant->digest, both(1000000), h.stage++, h.ik, 0, h.config);
    (s.role == VariantRole::incumbent ? p : c) = s;
  }
  REQUIRE(p);
  REQUIRE(c);
  CHECK(p->name == "v1 profiled O2");
  CHECK(choose_mode(p->variant->doc.get()) == CompileMode::optimized);
  CHECK(p->variant->digest == v1_build);           // compiled from v1's counts, not v3's
  CHECK(c->variant->digest == h.current().digest); // v3's own build

  // v3 is slower than v1's build: rejected, and v1's build stays served.
  auto verdict = until_verdict(h, timing(1.3, 8));
  REQUIRE(verdict);
  CHECK(verdict->verdict == TrialVerdict::rejected);
  CHECK(verdict->incumbent == "v1 profiled O2");
  std::string v3_name = "v"; // built step by step: GCC 12's -Wrestrict misfires on "v" + string
  v3_name += std::to_string(v3);
  v3_name += " profiled O2";
  CHECK(verdict->candidate == v3_name);
  ps::StoredProfile cur = h.current();
  CHECK(*cur.doc.guard.incumbent_base == VariantBase::profiled);
  CHECK(cur.doc.guard.incumbent_version == 1);
  StagePlan later = h.guard.plan(h.ik, h.shape, h.config);
  REQUIRE(later.variant);
  CHECK(later.name == "v1 profiled O2");
  CHECK(later.variant->digest == v1_build);
  // After a restart too (v1 is read back from the store's history).
  Guard restarted(h.keys, h.store, "testhost");
  StagePlan again = restarted.plan(h.ik, h.shape, h.config);
  REQUIRE(again.variant);
  CHECK(again.variant->digest == v1_build);

  // v1 pruned from the history: the plain build stands in, and says so.
  h.store.forget_versions.insert(1);
  Guard pruned(h.keys, h.store, "testhost");
  StagePlan fallback = pruned.plan(h.ik, h.shape, h.config);
  CHECK_THAT(fallback.reason, Contains("v1 is no longer in the history"));
  // The current profile is tried against it afresh (this stage runs either arm).
  CHECK_THAT(fallback.reason, Contains(" against plain O2"));
  if (fallback.role == VariantRole::incumbent)
    CHECK(fallback.name == "plain O2");
  else
    CHECK_THAT(fallback.name, Catch::StartsWith("v") && Catch::EndsWith(" profiled O2"));
  CHECK_FALSE(fallback.trial_id.empty());
}

TEST_CASE("guard: the incumbent's earlier version is read without the key's lock", "[guard]") {
  GuardHarness h;
  REQUIRE(until_verdict(h, timing(1 / 1.3, 7))); // v1's profiled build is the incumbent
  rewrite_counts(h, {100, 1900});                // v3 is tried against it
  // A restarted daemon reads v1 back from the history; the first such read
  // waits in the store until released.
  Guard restarted(h.keys, h.store, "testhost");
  FirstCallGate gate;
  h.store.on_version_read = [&] { gate(); };
  auto slow =
      std::async(std::launch::async, [&] { return restarted.plan(h.ik, h.shape, h.config); });
  gate.wait_until_held();
  // The same key's next stage plans meanwhile (with the key's lock held
  // across that read, it would wait for it).
  auto next =
      std::async(std::launch::async, [&] { return restarted.plan(h.ik, h.shape, h.config); });
  const bool finished = next.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  gate.release();
  REQUIRE(finished);
  const StagePlan a = next.get(), b = slow.get();
  CHECK_THAT(a.reason + " | " + b.reason, Contains("against v1 profiled O2"));
  CHECK(a.reason.find("stands in") == std::string::npos);
  CHECK(b.reason.find("stands in") == std::string::npos);
  // Read once per incumbent version: later stages read nothing.
  const int reads = gate.calls();
  restarted.plan(h.ik, h.shape, h.config);
  CHECK(gate.calls() == reads);
  h.store.on_version_read = nullptr;
}

TEST_CASE("guard: a running trial's samples survive a restart", "[guard]") {
  GuardHarness h;
  h.config.checkpoint_pairs = 2;
  auto time = timing(1.06, 9); // slower, but not enough to stop early
  int counted = 0;
  for (int i = 0; i < 8; ++i) { // 4 pairs: saved after the 2nd and the 4th
    auto [p, g] = h.stage_with(time);
    REQUIRE_FALSE(g.verdict);
    counted += g.counted;
  }
  REQUIRE(counted == 8);
  ps::StoredProfile saved = h.current();
  REQUIRE(saved.doc.guard.running);
  CHECK(saved.doc.guard.running->incumbent_ns.size() == 4);
  CHECK(saved.doc.guard.running->candidate_ns.size() == 4);
  CHECK(saved.doc.guard.running->version == 1);
  CHECK(saved.digest == profile_digest(counted_profile())); // bookkeeping: no recompile
  CHECK_THAT(saved.reason, Contains("guard: trial saved (4+4 stages"));
  CHECK(h.guard.counters().checkpoints == 2);

  // A restart: a new guard continues the trial from the saved pairs.
  Guard restarted(h.keys, h.store, "testhost");
  StagePlan p = restarted.plan(h.ik, h.shape, h.config);
  CHECK_THAT(p.reason, Contains("4+4 stages"));
  CHECK(restarted.counters().resumed == 1);
  CHECK(restarted.counters().trials_started == 0);
  std::optional<TrialRecord> verdict;
  int more = 0;
  for (int i = 0; i < 60 && !verdict; ++i) {
    StagePlan q = i == 0 ? p : restarted.plan(h.ik, h.shape, h.config);
    GuardStage g =
        restarted.record(q, q.variant->digest, both(time(q.role)), h.stage++, h.ik, 0, h.config);
    more += g.counted;
    verdict = g.verdict;
  }
  REQUIRE(verdict);
  CHECK(verdict->verdict == TrialVerdict::rejected);
  CHECK(verdict->candidate == "v1 profiled O2");    // named by the version the trial began under
  CHECK(verdict->candidate_stages == 4 + more / 2); // the pairs before the restart count
  CHECK_FALSE(h.current().doc.guard.running);       // a verdict clears the saved trial

  // A saved trial of another profile (a rewrite meanwhile) is not resumed.
  GuardHarness fresh;
  fresh.config.checkpoint_pairs = 1;
  for (int i = 0; i < 2; ++i)
    fresh.stage_with(time);
  REQUIRE(fresh.current().doc.guard.running);
  rewrite_counts(fresh, {5, 5000});
  Guard after(fresh.keys, fresh.store, "testhost");
  StagePlan q = after.plan(fresh.ik, fresh.shape, fresh.config);
  CHECK_THAT(q.reason, Contains("0+0 stages"));
  CHECK(after.counters().resumed == 0);
  CHECK(after.counters().trials_started == 1);
}

TEST_CASE("guard: a resumed trial plans the block orders it would have", "[guard]") {
  // The orders come from a seed of the profile key, the trial id and the
  // version it began under: a daemon that resumes a checkpoint plans, stage
  // by stage, what the daemon that saved it goes on planning.
  GuardHarness h;
  h.config.checkpoint_pairs = 4;
  auto time = timing(1.0, 13);
  for (int i = 0; i < 8; ++i) // two blocks, saved at 4+4
    REQUIRE(h.stage_with(time).second.counted);
  REQUIRE(h.current().doc.guard.running);
  Guard restarted(h.keys, h.store, "testhost");
  GuardConfig quiet = h.config;
  quiet.checkpoint_pairs = 0; // both go on in memory: no write between them
  std::vector<VariantRole> roles;
  for (int i = 0; i < 8; ++i) { // two more blocks: still below min_pairs
    StagePlan a = h.guard.plan(h.ik, h.shape, quiet);
    StagePlan b = restarted.plan(h.ik, h.shape, quiet);
    REQUIRE(a.variant);
    REQUIRE(b.variant);
    CHECK(a.role == b.role);
    CHECK(a.variant->digest == b.variant->digest);
    const StageTimes t = both(time(a.role));
    CHECK(h.guard.record(a, a.variant->digest, t, h.stage, h.ik, 0, quiet).counted);
    CHECK(restarted.record(b, b.variant->digest, t, h.stage++, h.ik, 0, quiet).counted);
    roles.push_back(a.role);
  }
  CHECK(restarted.counters().resumed == 1);
  // Its blocks are I C C I or C I I C.
  for (std::size_t b = 0; b < roles.size(); b += 4) {
    CHECK(roles[b] == roles[b + 3]);
    CHECK(roles[b + 1] == roles[b + 2]);
    CHECK(roles[b] != roles[b + 1]);
  }
}

TEST_CASE("guard: a clean shutdown saves the pairs since the last checkpoint", "[guard]") {
  GuardHarness h;
  h.config.checkpoint_pairs = 100; // no periodic save within this test
  auto time = timing(1.06, 11);
  for (int i = 0; i < 6; ++i) // 3 pairs
    REQUIRE(h.stage_with(time).second.counted);
  CHECK_FALSE(h.current().doc.guard.running);
  CHECK(h.guard.save_running(h.config) == 1);
  ps::StoredProfile saved = h.current();
  REQUIRE(saved.doc.guard.running);
  CHECK(saved.doc.guard.running->incumbent_ns.size() == 3);
  CHECK(saved.doc.guard.running->candidate_ns.size() == 3);
  CHECK_THAT(saved.reason, Contains("guard: trial saved (3+3 stages"));
  CHECK(saved.digest == profile_digest(counted_profile()));
  // Nothing new since: a second shutdown save writes nothing.
  CHECK(h.guard.save_running(h.config) == 0);
  CHECK(h.current().version == saved.version);

  // The restarted guard continues from those pairs; its own shutdown saves
  // only once it has more.
  Guard restarted(h.keys, h.store, "testhost");
  StagePlan p = restarted.plan(h.ik, h.shape, h.config);
  CHECK_THAT(p.reason, Contains("3+3 stages"));
  CHECK(restarted.counters().resumed == 1);
  CHECK(restarted.save_running(h.config) == 0);
  REQUIRE(restarted.record(p, p.variant->digest, both(time(p.role)), h.stage++, h.ik, 0, h.config)
              .counted);
  StagePlan q = restarted.plan(h.ik, h.shape, h.config);
  REQUIRE(restarted.record(q, q.variant->digest, both(time(q.role)), h.stage++, h.ik, 0, h.config)
              .counted);
  CHECK(restarted.save_running(h.config) == 1);
  CHECK(h.current().doc.guard.running->incumbent_ns.size() == 4);

  // checkpoint_pairs 0 (saving off): nothing is written at shutdown either.
  GuardHarness off;
  for (int i = 0; i < 4; ++i)
    off.stage_with(time);
  CHECK(off.guard.save_running(off.config) == 0);
  CHECK_FALSE(off.current().doc.guard.running);
}

TEST_CASE("guard: records written before versions and checkpoints read as before", "[guard]") {
  // An old document: a profiled incumbent without a version, no running trial.
  auto doc = to_json(counted_profile());
  doc["guard"] = {{"incumbent", {{"base", "profiled"}, {"knobs", nullptr}}},
                  {"trialled_digest", "old"},
                  {"tuning_step", 0},
                  {"trials", json::array()}};
  auto old = profile_from_json(doc);
  REQUIRE(old);
  CHECK(old->guard.incumbent_version == 0);
  CHECK(old->guard.incumbent_digest.empty());
  CHECK_FALSE(old->guard.running);
  // Its next profile is tried against the plain build, as before.
  GuardConfig c;
  Arms a = arms_of(old->guard, *old, profile_digest(*old), 100, c);
  REQUIRE(a.candidate);
  CHECK(a.incumbent.base == VariantBase::plain);
  // While it is the trialled profile, the incumbent is the current profile's build.
  a = arms_of(old->guard, *old, "old", 0, c);
  CHECK(a.incumbent.base == VariantBase::profiled);
  CHECK(a.incumbent.version == 0);

  // A saved trial is checked: bad samples name the field.
  doc["guard"]["running"] = {{"id", "x"},
                             {"shape", "main()"},
                             {"version", 1},
                             {"incumbent_ns", {5, 0}},
                             {"candidate_ns", json::array()}};
  auto bad = profile_from_json(doc);
  REQUIRE_FALSE(bad);
  CHECK_THAT(bad.error().describe(), Contains("guard.running.incumbent_ns[1]"));
  doc["guard"]["running"]["incumbent_ns"] = std::vector<int>(TrialCheckpoint::kMaxSamples + 1, 1);
  bad = profile_from_json(doc);
  REQUIRE_FALSE(bad);
  CHECK_THAT(bad.error().describe(), Contains("more than 1024"));
  doc["guard"]["running"]["incumbent_ns"] = {5, 6};
  auto good = profile_from_json(doc);
  REQUIRE(good);
  REQUIRE(good->guard.running);
  CHECK(good->guard.running->incumbent_ns == std::vector<std::uint64_t>{5, 6});
  CHECK(profile_digest(*good) == profile_digest(*old)); // bookkeeping
}
