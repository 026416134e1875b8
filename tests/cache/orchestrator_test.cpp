// The patent's stage processes (WO2023234952A1 FIG. 3-6), step by step, with a
// fake compiler and the in-memory key store, both counting calls.
#include "fakes.h"
#include "fdo/cache/keys.h"
#include "fdo/cache/memory_key_store.h"
#include "fdo/cache/orchestrator.h"

#include <catch2/catch.hpp>
#include <fstream>
#include <sys/wait.h>

using namespace fdo;
using namespace fdo::cache;
using namespace fdo::cache::testing;
namespace fs = std::filesystem;

namespace {

Config memory_only(TierUp t = TierUp::sync) {
  Config c;
  c.tier_up = t;
  c.memory_budget_bytes = 64 << 20;
  return c;
}

Config with_disk(const TempDir& dir, TierUp t = TierUp::sync) {
  Config c = memory_only(t);
  c.state_dir = dir.str();
  c.disk_durability = Durability::none; // the kill test covers fsync; keep these fast
  return c;
}

std::unique_ptr<Orchestrator> make(Config c, KeyStore& keys, Compiler& compiler) {
  auto o = Orchestrator::create(std::move(c), keys, compiler);
  REQUIRE(o);
  return std::move(*o);
}

StageOutput stage(Orchestrator& o, const std::string& bytes) {
  auto r = o.prepare(as_program(bytes));
  if (!r) FAIL("prepare failed: " << r.error().describe());
  return std::move(*r);
}

// The object the fake compiler produces names identity, PK, version and mode.
bool compiled_with(const StageOutput& s, const std::string& identity, std::int64_t version,
                   CompileMode mode) {
  return s.entry->object.starts_with("OBJ|" + identity + "|" + s.pk + "|v" +
                                     std::to_string(version) + "|" + std::string(to_string(mode)) +
                                     "|");
}

// The guard's plain build of PK as a variant of its profile (version 1).
ProfileRef plain_variant(const std::string& pk) {
  ProfileDoc plain;
  plain.knobs.mode = CompileMode::plain;
  ProfileRef variant;
  variant.pk = pk;
  variant.version = 1;
  variant.digest = profile_digest(plain);
  variant.doc = std::make_shared<const ProfileDoc>(plain);
  return variant;
}

} // namespace

TEST_CASE("stage 1 goes through VK and records IK->PK and CK->VK", "[cache][orchestrator]") {
  MemoryKeyStore keys;
  FakeCompiler compiler;
  auto o = make(memory_only(), keys, compiler);
  std::string a = program("a");

  StageOutput s = stage(*o, a);
  // FIG. 4 step 404 / FIG. 5 steps 504-508: IK has no PK yet, so a VK is used.
  CHECK(s.ik == initial_key("", a, compiler.identity()));
  CHECK(s.vk == virtual_key(s.ik));
  CHECK(s.storage_key == s.vk);
  CHECK(s.outcome == Outcome::compiled);
  CHECK(s.compiled);
  CHECK(s.explanation.reason == Reason::new_program);
  // The compile learned PK; no profile existed, so the first output is instrumented.
  CHECK(s.pk == FakeCompiler::pk_of(a));
  CHECK(s.profile_version == 0);
  CHECK(s.profile_digest == no_profile_digest());
  CHECK(s.mode == CompileMode::instrumented);
  CHECK(s.ck == cache_key(s.ik, no_profile_digest(), CompileMode::instrumented));
  CHECK(compiled_with(s, compiler.identity(), 0, CompileMode::instrumented));
  CHECK(s.entry->key == s.vk);
  CHECK(s.entry->info.ck == s.ck);
  CHECK(s.entry->metadata == "{\"mode\":\"instrumented\",\"version\":0}");
  // FIG. 6 steps 610 and 616.
  CHECK(keys.profile_keys() == std::map<std::string, std::string>{{s.ik, s.pk}});
  CHECK(keys.virtual_keys() == std::map<std::string, std::string>{{s.ck, s.vk}});
  CHECK(compiler.compiles() == 1);
  CHECK(compiler.identifies() == 1);
  auto calls = keys.calls();
  CHECK(calls.lookup_profile_key == 1);
  CHECK(calls.put_profile_key == 1);
  CHECK(calls.put_virtual_key == 1);
  CHECK(calls.current_profile == 1);

  auto log = o->explain(s.ik);
  REQUIRE(log.size() == 1);
  CHECK(log[0].outcome == Outcome::compiled);
  CHECK(log[0].reason == Reason::new_program);
  CHECK(log[0].storage_key == s.vk);
  CHECK(log[0].from_version == -1);
  CHECK(log[0].to_version == 0);
  CHECK(log[0].sequence == s.explain_sequence);
  CHECK_FALSE(log[0].exec_ns); // not executed yet
  o->record_execution(s.ik, s.explain_sequence, 12345);
  CHECK(o->explain(s.ik)[0].exec_ns == std::optional<std::uint64_t>(12345));
  CHECK(o->explain(s.ik)[0].variant_role.empty()); // no variant said yet
  o->record_variant(s.ik, s.explain_sequence, "candidate", "plain O3");
  CHECK(o->explain(s.ik)[0].variant_role == "candidate");
  CHECK(o->explain(s.ik)[0].variant_name == "plain O3");
  CHECK(to_json(o->explain(s.ik)[0])["variant"] ==
        nlohmann::json{{"role", "candidate"}, {"name", "plain O3"}});
  o->record_variant(s.ik, s.explain_sequence + 100, "incumbent", "x"); // no such record: ignored
  CHECK(o->explain(s.ik)[0].variant_role == "candidate");
  auto stats = o->stats();
  CHECK(stats.compiles == 1);
  CHECK(stats.recompiles == 0);
  CHECK(stats.memory_misses == 1);
}

TEST_CASE("stage 2 hits through the virtual key mapping without compiling",
          "[cache][orchestrator]") {
  MemoryKeyStore keys;
  FakeCompiler compiler;
  auto o = make(memory_only(), keys, compiler);
  std::string a = program("a");
  StageOutput first = stage(*o, a);
  StageOutput second = stage(*o, a);
  // FIG. 5 steps 510-518: PK found, profile read, CK made, CK -> VK found.
  CHECK(second.outcome == Outcome::memory_hit);
  CHECK(second.explanation.reason == Reason::virtual_key_mapping);
  CHECK_FALSE(second.compiled);
  CHECK(second.ck == first.ck);
  CHECK(second.vk == first.vk);
  CHECK(second.storage_key == first.vk);
  CHECK(second.entry.get() == first.entry.get());
  CHECK(compiler.compiles() == 1);
  CHECK(compiler.identifies() == 1); // later stages never parse the program
  CHECK(keys.calls().lookup_virtual_key == 1);
  CHECK(keys.calls().put_profile_key == 1);
  auto stats = o->stats();
  CHECK(stats.memory_hits == 1);
  auto log = o->explain(first.ik);
  REQUIRE(log.size() == 2);
  CHECK(log[1].outcome == Outcome::memory_hit);
  CHECK(log[1].reason == Reason::virtual_key_mapping);
  CHECK(log[1].sequence > log[0].sequence);
}

TEST_CASE("a profile rewrite changes CK - misses and compiles once (sync tier-up)",
          "[cache][orchestrator]") {
  MemoryKeyStore keys;
  FakeCompiler compiler;
  auto o = make(memory_only(TierUp::sync), keys, compiler);
  std::string a = program("a");
  StageOutput s1 = stage(*o, a);
  std::int64_t v1 = keys.set_profile(s1.pk, profile_with_counts(100));
  REQUIRE(v1 == 1);

  StageOutput s2 = stage(*o, a);
  CHECK(s2.ck != s1.ck);
  CHECK(s2.ck.starts_with(s1.ik + "-"));
  CHECK(s2.outcome == Outcome::compiled);
  CHECK(s2.explanation.reason == Reason::profile_rewritten);
  CHECK(s2.storage_key == s2.ck); // stored under CK, not VK
  CHECK(s2.vk.empty());
  CHECK(s2.profile_version == 1);
  CHECK(s2.target_profile_version == 1);
  CHECK(s2.mode == CompileMode::optimized);
  CHECK(compiled_with(s2, compiler.identity(), 1, CompileMode::optimized));
  REQUIRE(compiler.calls().size() == 2);
  CHECK(compiler.calls()[1].version == 1);
  CHECK(compiler.calls()[1].mode == CompileMode::optimized);
  CHECK(keys.virtual_keys().size() == 1); // FIG. 6 ends at step 604 for a CK compile

  StageOutput s3 = stage(*o, a);
  CHECK(s3.outcome == Outcome::memory_hit);
  CHECK(s3.explanation.reason == Reason::cache_key);
  CHECK(s3.storage_key == s2.ck);
  CHECK(compiler.compiles() == 2);

  // Bookkeeping-only rewrites keep the digest, so they never recompile.
  ProfileDoc same = profile_with_counts(100);
  same.provenance.reason = "feedback";
  same.provenance.stage = 7;
  CHECK(keys.set_profile(s1.pk, same) == 2);
  StageOutput s4 = stage(*o, a);
  CHECK(s4.outcome == Outcome::memory_hit);
  CHECK(s4.ck == s2.ck);
  CHECK(compiler.compiles() == 2);

  auto log = o->explain(s1.ik);
  REQUIRE(log.size() == 4);
  CHECK(log[1].reason == Reason::profile_rewritten);
  CHECK(log[1].from_version == 0);
  CHECK(log[1].to_version == 1);
  CHECK(log[1].from_digest == no_profile_digest());
  CHECK(log[1].text.find("changed from no profile") != std::string::npos);
  auto stats = o->stats();
  CHECK(stats.compiles == 2);
  CHECK(stats.recompiles == 1);
}

TEST_CASE("async tier-up serves the old output - compiles in the background - then hits",
          "[cache][orchestrator]") {
  MemoryKeyStore keys;
  FakeCompiler compiler;
  auto o = make(memory_only(TierUp::async), keys, compiler);
  std::string a = program("a");
  StageOutput s1 = stage(*o, a);
  keys.set_profile(s1.pk, profile_with_counts(50));

  // Hold the background compile: these stages must not wait for it.
  compiler.close_gate();
  StageOutput s2 = stage(*o, a);
  CHECK(s2.outcome == Outcome::tier_up_pending);
  CHECK(s2.explanation.reason == Reason::profile_rewritten);
  CHECK(s2.entry.get() == s1.entry.get());
  CHECK(s2.storage_key == s1.vk);
  CHECK(s2.profile_version == 0);
  CHECK(s2.target_profile_version == 1);
  CHECK(s2.mode == CompileMode::instrumented);
  REQUIRE(eventually([&] { return compiler.blocked() == 1; }));
  StageOutput s3 = stage(*o, a); // still compiling: serve the old one again, no second job
  CHECK(s3.outcome == Outcome::tier_up_pending);
  CHECK(s3.explanation.reason == Reason::profile_rewritten);
  CHECK(o->stats().tier_ups_started == 1);
  CHECK(o->stats().tier_ups_queued == 1);
  compiler.open_gate();
  o->wait_idle();

  StageOutput s4 = stage(*o, a);
  CHECK(s4.outcome == Outcome::memory_hit);
  CHECK(s4.explanation.reason == Reason::cache_key);
  CHECK(s4.profile_version == 1);
  CHECK(s4.mode == CompileMode::optimized);
  CHECK(compiled_with(s4, compiler.identity(), 1, CompileMode::optimized));
  CHECK(compiler.compiles() == 2);
  auto stats = o->stats();
  CHECK(stats.tier_ups_installed == 1);
  CHECK(stats.stale_serves == 2);
  CHECK(stats.tier_ups_queued == 0);
  bool background_recorded = false;
  for (const ExplainRecord& r : o->explain(s1.ik))
    background_recorded |= r.outcome == Outcome::background_compiled && r.to_version == 1;
  CHECK(background_recorded);

  // A per-call sync override waits.
  keys.set_profile(s1.pk, profile_with_counts(5000));
  auto s5 = o->prepare(as_program(a), TierUp::sync);
  REQUIRE(s5);
  CHECK(s5->outcome == Outcome::compiled);
  CHECK(s5->profile_version == 2);
}

TEST_CASE("async tier-up failure keeps serving the old output and retries later",
          "[cache][orchestrator]") {
  MemoryKeyStore keys;
  FakeCompiler compiler;
  Config c = memory_only(TierUp::async);
  c.tier_up_retry_after = std::chrono::milliseconds(0);
  auto o = make(c, keys, compiler);
  std::string a = program("a");
  StageOutput s1 = stage(*o, a);
  keys.set_profile(s1.pk, profile_with_counts(9));
  compiler.fail_next(1);
  CHECK(stage(*o, a).outcome == Outcome::tier_up_pending);
  o->wait_idle();
  CHECK(o->stats().tier_ups_failed == 1);
  bool failure_recorded = false;
  for (const ExplainRecord& r : o->explain(s1.ik))
    failure_recorded |= r.outcome == Outcome::failed && !r.error.empty();
  CHECK(failure_recorded);
  CHECK(stage(*o, a).outcome == Outcome::tier_up_pending); // schedules a retry
  o->wait_idle();
  StageOutput s = stage(*o, a);
  CHECK(s.outcome == Outcome::memory_hit);
  CHECK(s.profile_version == 1);
  CHECK(compiler.compiles() == 3);
}

TEST_CASE("a version with an earlier version's digest is served that output as its own",
          "[cache][orchestrator]") {
  // A re-profile that counted exactly what v1 held writes v3 with v1's
  // digest: its stages hit v1's object, and that object is v3's output (its
  // version is v3's), not an earlier version's pending a tier-up.
  MemoryKeyStore keys;
  FakeCompiler compiler;
  auto o = make(memory_only(TierUp::sync), keys, compiler);
  std::string a = program("a");
  StageOutput s1 = stage(*o, a);
  keys.set_profile(s1.pk, profile_with_counts(100)); // v1
  StageOutput s2 = stage(*o, a);
  CHECK(s2.profile_version == 1);
  keys.set_profile(s1.pk, profile_with_counts(7)); // v2: another profile
  CHECK(stage(*o, a).profile_version == 2);
  keys.set_profile(s1.pk, profile_with_counts(100)); // v3: v1's content again
  StageOutput s4 = stage(*o, a);
  CHECK(s4.outcome == Outcome::memory_hit);
  CHECK(s4.storage_key == s2.storage_key);
  CHECK(s4.profile_version == 3);
  CHECK(s4.target_profile_version == 3);
  CHECK(s4.profile_digest == s4.target_profile_digest);
  CHECK(s4.tier_up == TierUpState::none);
  CHECK(compiler.compiles() == 3);
}

TEST_CASE("a stale stage says whether its compile is under way or held off",
          "[cache][orchestrator]") {
  MemoryKeyStore keys;
  FakeCompiler compiler;
  Config c = memory_only(TierUp::async);
  c.tier_up_retry_after = std::chrono::hours(1);
  auto o = make(c, keys, compiler);
  std::string a = program("a");
  StageOutput s1 = stage(*o, a);
  CHECK(s1.tier_up == TierUpState::none);
  keys.set_profile(s1.pk, profile_with_counts(9));
  compiler.close_gate();
  StageOutput queued = stage(*o, a);
  CHECK(queued.outcome == Outcome::tier_up_pending);
  CHECK(queued.tier_up == TierUpState::scheduled);
  CHECK(queued.profile_digest != queued.target_profile_digest);
  REQUIRE(eventually([&] { return compiler.blocked() == 1; }));
  CHECK(stage(*o, a).tier_up == TierUpState::scheduled); // already under way
  compiler.fail_next(1);
  compiler.open_gate();
  o->wait_idle();
  REQUIRE(o->stats().tier_ups_failed == 1);
  // Failed, not retried for an hour: held off.
  StageOutput held = stage(*o, a);
  CHECK(held.outcome == Outcome::tier_up_pending);
  CHECK(held.tier_up == TierUpState::held_off);
  CHECK_THAT(held.explanation.text, Catch::Contains("failed recently"));
  // A stage that waits (sync) compiles it.
  StageOutput waited = *o->prepare(as_program(a), TierUp::sync);
  CHECK(waited.outcome == Outcome::compiled);
  CHECK(waited.tier_up == TierUpState::none);
}

TEST_CASE("a caller-chosen variant of the profile is an ordinary entry under its own CK",
          "[cache][orchestrator]") {
  MemoryKeyStore keys;
  FakeCompiler compiler;
  auto o = make(memory_only(TierUp::async), keys, compiler);
  std::string a = program("a");
  StageOutput s1 = stage(*o, a);
  // First stage (PK not known yet): the variant is ignored, the stage is plain prepare().
  ProfileRef variant = plain_variant(s1.pk);
  keys.set_profile(s1.pk, profile_with_counts(100));
  o->wait_idle();

  // Async: the variant compiles in the background while the previous output serves.
  compiler.close_gate();
  auto pending = o->prepare(as_program(a), TierUp::async, variant);
  REQUIRE(pending);
  CHECK(pending->outcome == Outcome::tier_up_pending);
  CHECK(pending->profile_digest != variant.digest); // what ran is not the variant yet
  compiler.open_gate();
  o->wait_idle();
  auto hit = o->prepare(as_program(a), TierUp::async, variant);
  REQUIRE(hit);
  CHECK(hit->outcome == Outcome::memory_hit);
  CHECK(hit->mode == CompileMode::plain);
  CHECK(hit->profile_digest == variant.digest);
  CHECK(hit->ck == cache_key(s1.ik, variant.digest, CompileMode::plain));
  CHECK(compiled_with(*hit, compiler.identity(), 1, CompileMode::plain));

  // The current profile's own output is another entry; both stay cached.
  auto cur = o->prepare(as_program(a), TierUp::sync);
  REQUIRE(cur);
  CHECK(cur->outcome == Outcome::compiled);
  CHECK(cur->mode == CompileMode::optimized);
  CHECK(cur->ck != hit->ck);
  auto again = o->prepare(as_program(a), TierUp::sync, variant);
  REQUIRE(again);
  CHECK(again->outcome == Outcome::memory_hit);
  CHECK(again->storage_key == hit->ck);

  // A variant for another PK is not used.
  ProfileRef other = variant;
  other.pk = "another-pk";
  auto ignored = o->prepare(as_program(a), TierUp::sync, other);
  REQUIRE(ignored);
  CHECK(ignored->mode == CompileMode::optimized);
  // A variant without a digest is refused like a bad key-store answer.
  ProfileRef broken = variant;
  broken.digest.clear();
  auto bad = o->prepare(as_program(a), TierUp::sync, broken);
  REQUIRE_FALSE(bad);
  CHECK(bad.error().code() == Errc::internal);
}

TEST_CASE("a queued compile keeps the caller's shared program - the Program forms copy it",
          "[cache][orchestrator][tier_up]") {
  MemoryKeyStore keys;
  FakeCompiler compiler;
  Config c = memory_only(TierUp::sync);
  c.tier_up_threads = 1;
  auto o = make(c, keys, compiler);
  std::string a = program("a");
  StageOutput s1 = stage(*o, a);
  keys.set_profile(s1.pk, profile_with_counts(100));

  // Stamped with its IK, as the daemon's program records are: the job holds
  // the caller's object while it waits, and the compiler is handed it.
  Program stamped = as_program(a);
  o->stamp_initial_key(stamped);
  auto shared = std::make_shared<const Program>(stamped);
  compiler.close_gate();
  REQUIRE(o->tier_up_current(shared).value() == Precompiled::queued);
  REQUIRE(eventually([&] { return compiler.blocked() == 1; }));
  CHECK(shared.use_count() == 2);
  compiler.open_gate();
  o->wait_idle();
  REQUIRE(compiler.calls().size() == 2);
  CHECK(compiler.calls()[1].program == shared.get());
  CHECK(compiler.calls()[1].ik == s1.ik);
  CHECK(eventually([&] { return shared.use_count() == 1; })); // let go once it ran

  // Without the stage's IK the job keeps a copy with the IK filled in; so
  // does the Program& form.
  keys.set_profile(s1.pk, profile_with_counts(200));
  auto unstamped = std::make_shared<const Program>(as_program(a));
  compiler.close_gate();
  REQUIRE(o->tier_up_current(unstamped).value() == Precompiled::queued);
  REQUIRE(eventually([&] { return compiler.blocked() == 1; }));
  CHECK(unstamped.use_count() == 1);
  compiler.open_gate();
  o->wait_idle();
  keys.set_profile(s1.pk, profile_with_counts(300));
  REQUIRE(o->tier_up_current(stamped).value() == Precompiled::queued);
  o->wait_idle();
  REQUIRE(compiler.calls().size() == 4);
  CHECK(compiler.calls()[2].program != unstamped.get());
  CHECK(compiler.calls()[2].ik == s1.ik);
  CHECK(compiler.calls()[3].program != &stamped);
  CHECK(compiler.calls()[3].bytes == a);

  // An async stage's tier-up keeps it as well.
  keys.set_profile(s1.pk, profile_with_counts(400));
  compiler.close_gate();
  auto served = o->prepare(shared, TierUp::async);
  REQUIRE(served);
  REQUIRE(eventually([&] { return compiler.blocked() == 1; }));
  CHECK(shared.use_count() == 2);
  compiler.open_gate();
  o->wait_idle();
  REQUIRE(compiler.calls().size() == 5);
  CHECK(compiler.calls()[4].program == shared.get());
}

TEST_CASE("a rewritten profile's build queues ahead of a precompile - a sync stage joins it",
          "[cache][orchestrator][tier_up]") {
  MemoryKeyStore keys;
  FakeCompiler compiler;
  Config c = memory_only(TierUp::sync);
  c.tier_up_threads = 1; // the daemon's default: one build at a time in the background
  auto o = make(c, keys, compiler);
  std::string a = program("a");
  StageOutput s1 = stage(*o, a);

  // Before the program's PK is known there is nothing to build.
  auto unknown = o->tier_up_current(as_program(program("b")));
  REQUIRE_FALSE(unknown);
  CHECK(unknown.error().code() == Errc::invalid_argument);

  keys.set_profile(s1.pk, profile_with_counts(100));
  ProfileRef variant = plain_variant(s1.pk);

  // The one background thread is busy with an earlier build; behind it, the
  // guard's plain build is asked for ahead of need first, then the rewrite's.
  compiler.close_gate();
  ProfileRef earlier = variant;
  earlier.version = 2;
  ProfileDoc other = *variant.doc;
  other.knobs.text_offset = 16;
  earlier.digest = profile_digest(other);
  earlier.doc = std::make_shared<const ProfileDoc>(other);
  REQUIRE(o->precompile(as_program(a), earlier).value() == Precompiled::queued);
  REQUIRE(eventually([&] { return compiler.blocked() == 1; }));
  REQUIRE(o->precompile(as_program(a), variant).value() == Precompiled::queued);
  auto current = o->tier_up_current(as_program(a));
  REQUIRE(current);
  CHECK(*current == Precompiled::queued);
  CHECK(o->tier_up_current(as_program(a)).value() == Precompiled::already_queued);
  compiler.open_gate();
  o->wait_idle();
  REQUIRE(compiler.calls().size() == 4);
  CHECK(compiler.calls()[2].mode == CompileMode::optimized); // the rewrite's build first
  CHECK(compiler.calls()[2].version == 1);
  CHECK(compiler.calls()[3].mode == CompileMode::plain);
  CHECK(compiler.calls()[3].digest == variant.digest);
  // The stage's own compile and the rewrite's tier-up are what stages run:
  // stage priority. Builds ahead of need are background ones (a compiler may
  // let them yield: fdod stops their workers while stage compiles run).
  CHECK(compiler.calls()[0].priority == CompilePriority::stage);
  CHECK(compiler.calls()[1].priority == CompilePriority::background);
  CHECK(compiler.calls()[2].priority == CompilePriority::stage);
  CHECK(compiler.calls()[3].priority == CompilePriority::background);
  CHECK(o->tier_up_current(as_program(a)).value() == Precompiled::stored);

  // The next sync stage finds it built: no compile of its own.
  StageOutput s2 = stage(*o, a);
  CHECK(s2.outcome == Outcome::memory_hit);
  CHECK(s2.mode == CompileMode::optimized);
  CHECK(compiler.compiles() == 4);

  // A sync stage that arrives while the rewrite's build compiles waits for
  // that compile instead of starting another.
  keys.set_profile(s1.pk, profile_with_counts(5000));
  compiler.close_gate();
  REQUIRE(o->tier_up_current(as_program(a)).value() == Precompiled::queued);
  REQUIRE(eventually([&] { return compiler.blocked() == 1; }));
  std::optional<StageOutput> s3;
  std::thread waiter([&] { s3 = stage(*o, a); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(compiler.blocked() == 1);
  compiler.open_gate();
  waiter.join();
  o->wait_idle();
  REQUIRE(s3);
  CHECK(s3->profile_version == 2);
  CHECK(s3->outcome == Outcome::joined);
  CHECK(s3->mode == CompileMode::optimized);
  CHECK(compiler.compiles() == 5);
  CHECK(compiler.calls()[4].priority == CompilePriority::stage);

  // A sync stage's own compile is a stage one.
  keys.set_profile(s1.pk, profile_with_counts(90000));
  StageOutput s4 = stage(*o, a);
  CHECK(s4.outcome == Outcome::compiled);
  REQUIRE(compiler.calls().size() == 6);
  CHECK(compiler.calls()[5].priority == CompilePriority::stage);
}

TEST_CASE("a stage that comes to wait for a build ahead of need raises it - the compiler hears "
          "of it while the build compiles or before it starts",
          "[cache][orchestrator][tier_up]") {
  MemoryKeyStore keys;
  FakeCompiler compiler;
  Config c = memory_only(TierUp::sync);
  c.tier_up_threads = 1;
  auto o = make(c, keys, compiler);
  std::string a = program("a");
  StageOutput s1 = stage(*o, a);
  keys.set_profile(s1.pk, profile_with_counts(100));
  ProfileRef variant = plain_variant(s1.pk);

  SECTION("a stage joins the build while it compiles") {
    compiler.close_gate();
    REQUIRE(o->precompile(as_program(a), variant).value() == Precompiled::queued);
    REQUIRE(eventually([&] { return compiler.blocked() == 1; }));
    REQUIRE(compiler.calls().size() == 2);
    const CompileCall ahead = compiler.calls()[1];
    CHECK(ahead.priority == CompilePriority::background);
    REQUIRE(ahead.urgency != nullptr);
    CHECK_FALSE(ahead.urgency->raised());
    // The guard's trial stage of the plain build, under sync: it joins.
    std::optional<Expected<StageOutput>> trial;
    std::thread waiter([&] { trial = o->prepare(as_program(a), TierUp::sync, variant); });
    CHECK(eventually([&] { return ahead.urgency->raised(); }));
    compiler.open_gate();
    waiter.join();
    o->wait_idle();
    REQUIRE(trial);
    REQUIRE(*trial);
    CHECK((*trial)->outcome == Outcome::joined);
    CHECK(compiler.compiles() == 2);
  }
  SECTION("a stage asks for the build while it is queued: it compiles as the stage's") {
    // The one background thread is busy with another build.
    compiler.close_gate();
    ProfileRef other = variant;
    ProfileDoc doc = *variant.doc;
    doc.knobs.text_offset = 16;
    other.digest = profile_digest(doc);
    other.doc = std::make_shared<const ProfileDoc>(doc);
    REQUIRE(o->precompile(as_program(a), other).value() == Precompiled::queued);
    REQUIRE(eventually([&] { return compiler.blocked() == 1; }));
    REQUIRE(o->precompile(as_program(a), variant).value() == Precompiled::queued);
    auto pending = o->prepare(as_program(a), TierUp::async, variant);
    REQUIRE(pending);
    compiler.open_gate();
    o->wait_idle();
    REQUIRE(compiler.calls().size() == 3);
    CHECK(compiler.calls()[2].digest == variant.digest);
    CHECK(compiler.calls()[2].priority == CompilePriority::stage);
    CHECK(compiler.calls()[2].urgency == nullptr);
  }
  SECTION("a build nobody asks for stays a background one") {
    REQUIRE(o->precompile(as_program(a), variant).value() == Precompiled::queued);
    o->wait_idle();
    REQUIRE(compiler.calls().size() == 2);
    REQUIRE(compiler.calls()[1].urgency != nullptr);
    CHECK_FALSE(compiler.calls()[1].urgency->raised());
  }
}

TEST_CASE("evicting a program reaches its compiles - running ones and queued ones leave nothing",
          "[cache][orchestrator][tier_up][disk]") {
  TempDir dir;
  MemoryKeyStore keys;
  FakeCompiler compiler;
  Config c = with_disk(dir);
  c.tier_up_threads = 1;
  auto o = make(c, keys, compiler);
  std::string a = program("a"), b = program("b");
  StageOutput sa = stage(*o, a), sb = stage(*o, b);
  const std::string ia = sa.ik, ib = sb.ik;
  keys.set_profile(sa.pk, profile_with_counts(100));
  keys.set_profile(sb.pk, profile_with_counts(100));
  auto on_disk = [&](const std::string& ik) {
    int n = 0;
    for (const auto& f : fs::recursive_directory_iterator(dir.path()))
      if (f.is_regular_file() && f.path().filename().string().starts_with(ik)) n++;
    return n;
  };
  REQUIRE(on_disk(ia) == 1);

  // a's rewritten build compiles on the one background thread (held at the
  // gate); b's waits behind it, then a second build of a behind that.
  compiler.close_gate();
  REQUIRE(o->tier_up_current(as_program(a)).value() == Precompiled::queued);
  REQUIRE(eventually([&] { return compiler.blocked() == 1; }));
  REQUIRE(o->tier_up_current(as_program(b)).value() == Precompiled::queued);
  ProfileRef variant = plain_variant(sa.pk);
  REQUIRE(o->precompile(as_program(a), variant).value() == Precompiled::queued);

  // a is deleted meanwhile: its files go, its queued build is dropped, and its
  // running build, once done, leaves nothing behind in either tier.
  CHECK(o->evict(ia) >= 1);
  CHECK(on_disk(ia) == 0);
  compiler.open_gate();
  o->wait_idle();
  CHECK(compiler.compiles() == 4); // a, b, a's rewrite, b's rewrite: not a's plain build
  CHECK(on_disk(ia) == 0);
  CHECK(o->stats().dropped_after_evict == 1);
  CHECK(o->stats().queued_dropped_by_evict == 1);
  CHECK(o->tier_up_current(as_program(a)).value() == Precompiled::queued); // nothing stored
  o->wait_idle();
  CHECK(on_disk(ia) == 1); // compiled after the evict: kept as usual
  // b was not evicted: its build stored and serves.
  CHECK(on_disk(ib) == 2);
  StageOutput b2 = stage(*o, b);
  CHECK(b2.outcome == Outcome::memory_hit);
  CHECK(b2.profile_version == 1);
  CHECK(to_json(o->stats())["tier_up"]["dropped_after_evict"] == 1);
}

TEST_CASE("an evicted VK entry recompiles and is stored under CK", "[cache][orchestrator]") {
  MemoryKeyStore keys;
  FakeCompiler compiler;
  compiler.set_object_size(10000);
  Config c = memory_only();
  c.memory_budget_bytes = 25000; // two entries
  auto o = make(c, keys, compiler);
  std::string a = program("a");
  StageOutput s1 = stage(*o, a);
  std::string vk = s1.vk, ck = s1.ck;
  s1 = {}; // the stage finished: its reference is released
  for (auto other : {"b", "c", "d"})
    stage(*o, program(other));
  REQUIRE_FALSE(o->memory_tier().contains(vk));

  StageOutput s2 = stage(*o, a);
  CHECK(s2.outcome == Outcome::compiled);
  CHECK(s2.explanation.reason == Reason::evicted);
  CHECK(s2.vk == vk); // the mapping CK -> VK still exists
  CHECK(s2.ck == ck);
  CHECK(s2.storage_key == ck);
  CHECK(compiler.compiles() == 5);
  StageOutput s3 = stage(*o, a);
  CHECK(s3.outcome == Outcome::memory_hit);
  CHECK(s3.explanation.reason == Reason::cache_key);
  CHECK(compiler.compiles() == 5);

  // An operator's evict(IK) drops the program from every tier.
  std::string ik = s3.ik;
  s2 = {};
  s3 = {};
  CHECK(o->evict(ik) >= 1);
  StageOutput s4 = stage(*o, a);
  CHECK(s4.outcome == Outcome::compiled);
  CHECK(s4.explanation.reason == Reason::evicted);
  CHECK(o->stats().memory_evictions >= 2);
}

TEST_CASE("two programs with the same canonical IR share one PK and one profile",
          "[cache][orchestrator]") {
  MemoryKeyStore keys;
  FakeCompiler compiler;
  auto o = make(memory_only(), keys, compiler);
  std::string a = program("f", "built by runtime A");
  std::string b = program("f", "built by runtime B");
  REQUIRE(a != b);
  StageOutput sa = stage(*o, a);
  keys.set_profile(sa.pk, profile_with_counts(77)); // A's feedback

  StageOutput sb = stage(*o, b); // B's first stage finds A's profile through PK
  CHECK(sb.ik != sa.ik);
  CHECK(sb.pk == sa.pk);
  CHECK(sb.outcome == Outcome::compiled);
  CHECK(sb.explanation.reason == Reason::new_program);
  CHECK(sb.explanation.text.find("shared") != std::string::npos);
  CHECK(sb.profile_version == 1);
  CHECK(sb.mode == CompileMode::optimized);
  CHECK(sb.storage_key == sb.vk);
  CHECK(keys.profile_keys().at(sa.ik) == keys.profile_keys().at(sb.ik));
  CHECK(keys.virtual_keys().at(sb.ck) == sb.vk);

  // B's feedback rewrites the shared profile: A's next stage recompiles with it.
  keys.set_profile(sb.pk, profile_with_counts(9000));
  StageOutput sa2 = stage(*o, a);
  CHECK(sa2.outcome == Outcome::compiled);
  CHECK(sa2.explanation.reason == Reason::profile_rewritten);
  CHECK(sa2.profile_version == 2);
  StageOutput sb2 = stage(*o, b);
  CHECK(sb2.profile_version == 2);
  CHECK(sb2.ck != sa2.ck); // one profile, but outputs stay per program
}

TEST_CASE("a changed compiler identity never returns an old output", "[cache][orchestrator]") {
  MemoryKeyStore keys;
  FakeCompiler compiler("llvm-16.0.6;fdo-0.1");
  auto o = make(memory_only(), keys, compiler);
  std::string a = program("a");
  StageOutput old1 = stage(*o, a);
  CHECK(stage(*o, a).outcome == Outcome::memory_hit);

  compiler.set_identity("llvm-17.0.1;fdo-0.2");
  StageOutput s = stage(*o, a);
  CHECK(s.ik != old1.ik);
  CHECK(s.ik == o->initial_key_for(as_program(a)));
  CHECK(s.outcome == Outcome::compiled);
  CHECK(s.explanation.reason == Reason::compiler_identity_changed);
  CHECK(s.explanation.text.find("llvm-16.0.6;fdo-0.1") != std::string::npos);
  CHECK(s.entry->info.compiler_identity == "llvm-17.0.1;fdo-0.2");
  CHECK(compiled_with(s, "llvm-17.0.1;fdo-0.2", 0, CompileMode::instrumented));
  CHECK(s.pk == old1.pk); // same canonical IR: the profile carries over, outputs do not
  CHECK(compiler.compiles() == 2);
  StageOutput again = stage(*o, a);
  CHECK(again.outcome == Outcome::memory_hit);
  CHECK(again.entry->info.compiler_identity == "llvm-17.0.1;fdo-0.2");

  // Back to the old compiler: its own outputs are valid for it.
  compiler.set_identity("llvm-16.0.6;fdo-0.1");
  StageOutput back = stage(*o, a);
  CHECK(back.ik == old1.ik);
  CHECK(back.entry->info.compiler_identity == "llvm-16.0.6;fdo-0.1");
}

TEST_CASE("a stamped initial key is used only under the identity it was computed for",
          "[cache][orchestrator]") {
  MemoryKeyStore keys;
  FakeCompiler compiler("llvm-16.0.6;fdo-0.1");
  auto o = make(memory_only(), keys, compiler);
  std::string a = program("a");
  Program p = as_program(a);
  const std::string ik16 = o->stamp_initial_key(p);
  CHECK(p.ik == ik16);
  CHECK(p.ik_identity == "llvm-16.0.6;fdo-0.1");
  CHECK(ik16 == o->initial_key_for(as_program(a)));
  REQUIRE(o->prepare(p));
  auto hit = o->prepare(p);
  REQUIRE(hit);
  CHECK(hit->ik == ik16);
  CHECK(hit->outcome == Outcome::memory_hit);

  // The stamp is trusted as it is under its own identity (a stamp naming
  // other bytes' key would be served that key: only the orchestrator stamps).
  Program forged = p;
  forged.ik = std::string(64, 'e');
  auto taken = o->prepare(forged);
  REQUIRE(taken);
  CHECK(taken->ik == forged.ik);

  // Under a new identity the stamp is stale: the IK is computed again.
  compiler.set_identity("llvm-17.0.1;fdo-0.2");
  auto fresh = o->prepare(p);
  REQUIRE(fresh);
  CHECK(fresh->ik != ik16);
  CHECK(fresh->ik == o->initial_key_for(as_program(a)));
  CHECK(fresh->outcome == Outcome::compiled);
  CHECK(fresh->explanation.reason == Reason::compiler_identity_changed);
}

TEST_CASE("a compiler upgrade across a restart is detected from the state dir",
          "[cache][orchestrator]") {
  TempDir dir;
  MemoryKeyStore keys;
  std::string a = program("a");
  std::string old_ik;
  {
    FakeCompiler old_compiler("llvm-16;fdo-0.1");
    auto o = make(with_disk(dir), keys, old_compiler);
    old_ik = stage(*o, a).ik;
  }
  FakeCompiler new_compiler("llvm-17;fdo-0.2");
  auto o = make(with_disk(dir), keys, new_compiler);
  StageOutput s = stage(*o, a);
  CHECK(s.ik != old_ik);
  CHECK(s.outcome == Outcome::compiled);
  CHECK(s.explanation.reason == Reason::compiler_identity_changed);
  CHECK(s.entry->info.compiler_identity == "llvm-17;fdo-0.2");
  CHECK(new_compiler.compiles() == 1);
  // The old compiler's file is still there for a rollback, but under its own IK.
  CHECK(o->disk_tier()->contains(virtual_key(old_ik)));
}

TEST_CASE("first stage whose mappings were lost is served from VK and the mappings repaired",
          "[cache][orchestrator]") {
  // A key store that loses writes while `broken` is set (e.g. SQLite busy).
  struct FlakyKeys : MemoryKeyStore {
    bool broken = false;
    Status put_profile_key(const std::string& ik, const std::string& pk) override {
      if (broken) return make_error(Errc::unavailable, "database is locked");
      return MemoryKeyStore::put_profile_key(ik, pk);
    }
    Status put_virtual_key(const std::string& ck, const std::string& vk) override {
      if (broken) return make_error(Errc::unavailable, "database is locked");
      return MemoryKeyStore::put_virtual_key(ck, vk);
    }
  } keys;
  FakeCompiler compiler;
  auto o = make(memory_only(), keys, compiler);
  keys.broken = true;
  std::string a = program("a");
  StageOutput s1 = stage(*o, a); // the stage itself succeeds
  CHECK(s1.outcome == Outcome::compiled);
  CHECK(s1.explanation.text.find("database is locked") != std::string::npos);
  CHECK(o->stats().key_store_errors == 2);
  CHECK(keys.profile_keys().empty());

  keys.broken = false;
  StageOutput s2 = stage(*o, a); // FIG. 4 step 408 on a VK: found, no compile
  CHECK(s2.outcome == Outcome::memory_hit);
  CHECK(s2.explanation.reason == Reason::virtual_first_stage);
  CHECK(compiler.compiles() == 1);
  CHECK(keys.profile_keys().at(s2.ik) == s2.pk);
  CHECK(keys.virtual_keys().at(s2.ck) == s2.vk);
  CHECK(stage(*o, a).explanation.reason == Reason::virtual_key_mapping);
}

TEST_CASE("compile and identify failures are errors - recorded - and never cached",
          "[cache][orchestrator]") {
  MemoryKeyStore keys;
  FakeCompiler compiler;
  auto o = make(memory_only(), keys, compiler);

  auto bad = o->prepare(as_program("garbage, not IR"));
  REQUIRE_FALSE(bad);
  CHECK(bad.error().code() == Errc::parse);
  CHECK(bad.error().message().find("identify") != std::string::npos);
  auto bad_log = o->explain(o->initial_key_for(as_program("garbage, not IR")));
  REQUIRE(bad_log.size() == 1);
  CHECK(bad_log[0].outcome == Outcome::failed);
  CHECK(bad_log[0].error.find("fake parse error") != std::string::npos);

  std::string a = program("a");
  compiler.fail_next(1);
  auto failed = o->prepare(as_program(a));
  REQUIRE_FALSE(failed);
  CHECK(failed.error().code() == Errc::compile);
  CHECK(keys.profile_keys().empty());  // nothing recorded for a failed compile
  auto ok = o->prepare(as_program(a)); // retried, not a cached failure
  REQUIRE(ok);
  CHECK(ok->outcome == Outcome::compiled);
  CHECK(compiler.compiles() == 2);
  auto stats = o->stats();
  CHECK(stats.failures == 2);
  CHECK(stats.compile_failures == 1);
}

TEST_CASE("disk: flipped byte - truncation or garbage is a miss - counted - and recompiled",
          "[cache][orchestrator][disk]") {
  for (std::string damage : {"flip", "truncate", "garbage"}) {
    INFO(damage);
    TempDir dir;
    MemoryKeyStore keys;
    FakeCompiler compiler;
    compiler.set_object_size(4096);
    std::string a = program("a");
    std::string path;
    {
      auto o = make(with_disk(dir), keys, compiler);
      StageOutput s = stage(*o, a);
      path = o->disk_tier()->path_for(s.storage_key);
    }
    REQUIRE(fs::exists(path));
    std::string bytes = *read_file(path);
    if (damage == "flip")
      bytes[bytes.size() - 100] ^= 0x04;
    else if (damage == "truncate")
      bytes.resize(bytes.size() / 2);
    else
      bytes = std::string(bytes.size(), '\xab');
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;

    auto o = make(with_disk(dir), keys, compiler); // a fresh process: empty memory tier
    StageOutput s = stage(*o, a);
    CHECK(s.outcome == Outcome::compiled);
    CHECK(s.explanation.reason == Reason::corrupt_on_disk);
    CHECK(s.storage_key == s.ck);
    CHECK(compiled_with(s, compiler.identity(), 0, CompileMode::instrumented));
    CHECK_FALSE(fs::exists(path)); // removed, never loaded
    CHECK(o->stats().corrupt_entries == 1);
    CHECK(compiler.compiles() == 2);
    auto log = o->explain(s.ik);
    REQUIRE_FALSE(log.empty());
    CHECK(log.back().reason == Reason::corrupt_on_disk);
  }
}

TEST_CASE("restart: a new orchestrator over the same state dir serves from disk",
          "[cache][orchestrator][disk]") {
  TempDir dir;
  MemoryKeyStore keys;
  FakeCompiler compiler;
  std::vector<std::string> programs;
  for (int i = 0; i < 6; ++i)
    programs.push_back(program(numbered("p", i)));
  {
    auto o = make(with_disk(dir), keys, compiler);
    for (const auto& p : programs)
      stage(*o, p);
    // Half of them move on to a rewritten profile (stored under CK).
    for (int i = 0; i < 3; ++i) {
      keys.set_profile(FakeCompiler::pk_of(programs[i]), profile_with_counts(10 + i));
      CHECK(stage(*o, programs[i]).storage_key.size() == kCacheKeyLength);
    }
  }
  REQUIRE(compiler.compiles() == 9);

  SECTION("a new object in this process") {
    FakeCompiler fresh;
    auto o = make(with_disk(dir), keys, fresh);
    for (const auto& p : programs) {
      StageOutput s = stage(*o, p);
      CHECK(s.outcome == Outcome::disk_hit);
      CHECK(stage(*o, p).outcome == Outcome::memory_hit);
    }
    CHECK(fresh.compiles() == 0);
    CHECK(o->stats().disk_hits == 6);
  }
  SECTION("a second process") {
    ::fflush(nullptr);
    pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      // Only async-signal-safe reporting: the exit code says what went wrong.
      FakeCompiler fresh;
      auto o = Orchestrator::create(with_disk(dir), keys, fresh);
      if (!o) ::_exit(10);
      for (const auto& p : programs) {
        auto s = (*o)->prepare(as_program(p));
        if (!s) ::_exit(11);
        if (s->outcome != Outcome::disk_hit) ::_exit(12);
      }
      ::_exit(fresh.compiles() == 0 ? 0 : 13);
    }
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
}

TEST_CASE("budget 0 turns a tier off: memory off serves every stage from disk - disk off "
          "recompiles after a restart",
          "[cache][orchestrator][disk]") {
  TempDir dir;
  MemoryKeyStore keys;
  FakeCompiler compiler;
  const std::string p = program("budget-zero");
  SECTION("memory tier off") {
    Config c = with_disk(dir);
    c.memory_budget_bytes = 0;
    auto o = make(c, keys, compiler);
    CHECK(stage(*o, p).outcome == Outcome::compiled);
    CHECK(stage(*o, p).outcome == Outcome::disk_hit);
    CHECK(stage(*o, p).outcome == Outcome::disk_hit);
    CHECK(compiler.compiles() == 1);
    CHECK(o->stats().memory_entries == 0);
  }
  SECTION("disk tier off") {
    Config c = with_disk(dir);
    c.disk_budget_bytes = 0;
    {
      auto o = make(c, keys, compiler);
      CHECK(stage(*o, p).outcome == Outcome::compiled);
      CHECK(stage(*o, p).outcome == Outcome::memory_hit);
      CHECK(o->stats().disk_entries == 0);
    }
    auto o = make(c, keys, compiler);
    CHECK(stage(*o, p).outcome == Outcome::compiled);
    CHECK(compiler.compiles() == 2);
  }
}

TEST_CASE("restart after a profile rewrite tiers up from the newest file on disk",
          "[cache][orchestrator][disk]") {
  TempDir dir;
  MemoryKeyStore keys;
  FakeCompiler compiler;
  std::string a = program("a");
  std::string pk;
  {
    auto o = make(with_disk(dir, TierUp::async), keys, compiler);
    pk = stage(*o, a).pk;
  }
  keys.set_profile(pk, profile_with_counts(3)); // written while the daemon was down
  auto o = make(with_disk(dir, TierUp::async), keys, compiler);
  StageOutput s = stage(*o, a);
  CHECK(s.outcome == Outcome::tier_up_pending);
  CHECK(s.profile_version == 0);
  CHECK(s.target_profile_version == 1);
  o->wait_idle();
  StageOutput next = stage(*o, a);
  CHECK(next.outcome == Outcome::memory_hit);
  CHECK(next.profile_version == 1);
}

TEST_CASE("explain keeps a bounded log per IK (newest last) and stats serialise",
          "[cache][orchestrator]") {
  MemoryKeyStore keys;
  FakeCompiler compiler;
  Config c = memory_only();
  c.explain_records_per_program = 4;
  auto o = make(c, keys, compiler);
  std::string a = program("a");
  for (int i = 0; i < 10; ++i)
    stage(*o, a);
  auto log = o->explain(o->initial_key_for(as_program(a)));
  REQUIRE(log.size() == 4);
  for (std::size_t i = 1; i < log.size(); ++i)
    CHECK(log[i].sequence > log[i - 1].sequence);
  CHECK(log.back().outcome == Outcome::memory_hit);
  nlohmann::json j = to_json(log.back());
  CHECK(j["outcome"] == "memory_hit");
  CHECK(j["reason"] == "virtual_key_mapping");
  CHECK(j["ik"] == log.back().ik);
  CHECK(o->explain(std::string(64, '0')).empty());

  nlohmann::json s = to_json(o->stats());
  CHECK(s["prepares"] == 10);
  CHECK(s["memory"]["hits"] == 9);
  CHECK(s["compiles"] == 1);
  CHECK(s.contains("disk"));
  CHECK(s["tier_up"].contains("installed"));
}

TEST_CASE("config is validated", "[cache][orchestrator]") {
  MemoryKeyStore keys;
  FakeCompiler compiler;
  Config t;
  t.tier_up_threads = 0;
  CHECK_FALSE(Orchestrator::create(t, keys, compiler));
  Config bad_dir;
  bad_dir.state_dir = "/proc/definitely/not/writable";
  auto d = Orchestrator::create(bad_dir, keys, compiler);
  REQUIRE_FALSE(d);
  CHECK(d.error().message().find("disk tier") != std::string::npos);
  CHECK(parse_tier_up("sync").value() == TierUp::sync);
  CHECK_FALSE(parse_tier_up("later"));
}

TEST_CASE("adapter bugs (profile without digest - empty object) are clear errors",
          "[cache][orchestrator]") {
  struct BadProfiles : MemoryKeyStore {
    Expected<ProfileRef> current_profile(const std::string& pk) override {
      ProfileRef r;
      r.pk = pk;
      return r; // no digest
    }
  } bad_keys;
  FakeCompiler compiler;
  auto o = make(memory_only(), bad_keys, compiler);
  auto r = o->prepare(as_program(program("a")));
  REQUIRE_FALSE(r);
  CHECK(r.error().code() == Errc::internal);
  CHECK(r.error().message().find("without a digest") != std::string::npos);
  CHECK(compiler.compiles() == 0);

  struct EmptyObject : FakeCompiler {
    Expected<CompiledOutput> compile(const Program&, const ProfileRef&, CompileMode,
                                     CompilePriority, const std::shared_ptr<Urgency>&) override {
      return CompiledOutput{};
    }
  } empty;
  MemoryKeyStore keys;
  auto o2 = make(memory_only(), keys, empty);
  auto e = o2->prepare(as_program(program("a")));
  REQUIRE_FALSE(e);
  CHECK(e.error().code() == Errc::compile);
  CHECK(e.error().message().find("empty object") != std::string::npos);
  CHECK(o2->memory_tier().stats().entries == 0);
}
