#include "fakes.h"
#include "fdo/daemon/feedback_loop.h"

#include <catch2/catch.hpp>
#include <condition_variable>
#include <functional>
#include <future>
#include <utility>

using namespace fdo;
using namespace fdo::daemon;
using namespace fdo::daemon::testing;

namespace {

const std::string kPk(64, 'a');
const std::string kOtherPk(64, 'b');
constexpr std::uint64_t kHash = 0x1234;

PolicyConfig policy() {
  PolicyConfig p;
  p.cs_pgo_stages = 0; // the first round alone (cs_round_test.cpp has the CS round)
  p.min_stages = 3;
  p.min_counts = 100;
  p.drift_threshold = 0.10;
  return p;
}

// One instrumented stage of function "loop" with two counters.
StageReport stage(const std::string& pk, std::int64_t version, std::uint64_t taken,
                  std::uint64_t not_taken, std::int64_t number = 0) {
  StageReport r;
  r.pk = pk;
  r.program = std::string(64, 'c');
  r.owner = 1000;
  r.stage = number;
  r.profile_version = version;
  r.target_profile_version = version;
  edit_metadata(r, [](StageMetadata& m) {
    m.cfg_hashes["loop"] = kHash;
    m.compile.function_fingerprints["loop"] = "fp-loop";
  });
  r.feedback.exec_ns = 500;
  r.feedback.counts["loop"] = FunctionCounts{kHash, {taken, not_taken}};
  r.run.served_mode = CompileMode::instrumented;
  return r;
}

// An operator's request to count again (knobs.mode instrumented) on the
// current version: instrumented stages run under a profile that has counts,
// and the program's lifecycle counts them (docs/lifecycle.md); the next
// rewrite from counts clears the request.
void reinstrument(FakeFeedbackStore& store, const std::string& pk = kPk) {
  store.keys[pk].versions.back().doc.knobs.mode = CompileMode::instrumented;
}

// Version 1 of kPk ({900, 100}) with two stages' totals already stored
// ({2, 400}: far from the profile), as a daemon finds them after a restart;
// its stages count again (reinstrument).
void seed_v1_with_totals(FakeFeedbackStore& store) {
  store.keys[kPk].versions.push_back(ps::StoredProfile{});
  store.keys[kPk].versions.back().version = 1;
  store.keys[kPk].versions.back().doc.functions["loop"] =
      FunctionProfile{.cfg_hash = kHash, .counts = {900, 100}};
  reinstrument(store);
  ps::FeedbackTotals& t = store.totals[{kPk, 1}];
  t.stages = 2;
  t.function_counts["loop"] = {2, 400};
}

} // namespace

TEST_CASE("feedback loop: folds stages and writes the first profile when the policy says so",
          "[service][feedback]") {
  FakeFeedbackStore store;
  FeedbackLoop loop(store, "host-a");
  auto o1 = loop.fold(stage(kPk, 0, 90, 10, 0), policy());
  CHECK_FALSE(o1.rewritten);
  CHECK_THAT(o1.policy, Catch::Contains("waiting for stages (1 of 3)"));
  CHECK_FALSE(loop.fold(stage(kPk, 0, 90, 10, 1), policy()).rewritten);
  auto o3 = loop.fold(stage(kPk, 0, 90, 10, 2), policy());
  REQUIRE(o3.rewritten);
  CHECK(o3.rewritten->from == 0);
  CHECK(o3.rewritten->to == 1);
  CHECK(loop.rewrites() == 1);

  REQUIRE(store.keys[kPk].versions.size() == 1);
  const ps::StoredProfile& v1 = store.keys[kPk].versions[0];
  CHECK(v1.doc.functions.at("loop").counts == std::vector<std::uint64_t>{270, 30});
  CHECK(v1.doc.functions.at("loop").cfg_hash == kHash);
  CHECK(v1.doc.functions.at("loop").fingerprint == "fp-loop");
  CHECK(v1.host == "host-a");
  CHECK(v1.stage == 2);
  CHECK(v1.owner == 1000);
  // Version 0 has no history row: nothing queued for the store.
  CHECK(loop.pending_rows() == 0);
}

TEST_CASE("feedback loop: a flush while a stage reads its version's totals counts it once",
          "[service][feedback]") {
  FakeFeedbackStore store;
  FeedbackLoop loop(store, "h");
  for (int i = 0; i < 3; ++i)
    loop.fold(stage(kPk, 0, 90, 10, i), policy());
  REQUIRE(store.keys[kPk].versions.size() == 1);
  // The first stage of version 1 reads the store's totals for v1; the
  // periodic flush lands exactly then.
  store.on_feedback_read = [&] { REQUIRE(loop.flush()); };
  auto o = loop.fold(stage(kPk, 1, 90, 10, 3), policy());
  store.on_feedback_read = nullptr;
  CHECK_THAT(o.policy, Catch::Contains("(1 of 3)"));
  REQUIRE(loop.flush());
  CHECK(store.totals[{kPk, 1}].stages == 1);
  auto o2 = loop.fold(stage(kPk, 1, 90, 10, 4), policy());
  CHECK_THAT(o2.policy, Catch::Contains("(2 of 3)"));
}

TEST_CASE("feedback loop: stages under a profile version are queued and flushed in one call",
          "[service][feedback]") {
  FakeFeedbackStore store;
  FeedbackLoop loop(store, "h");
  for (int i = 0; i < 3; ++i)
    loop.fold(stage(kPk, 0, 90, 10, i), policy());
  REQUIRE(store.keys[kPk].versions.size() == 1);
  reinstrument(store); // v1's stages count
  loop.fold(stage(kPk, 1, 90, 10, 3), policy());
  loop.fold(stage(kPk, 1, 90, 10, 4), policy());
  CHECK(loop.pending_rows() == 2);
  REQUIRE(loop.flush());
  CHECK(loop.pending_rows() == 0);
  REQUIRE(store.appended.size() == 2);
  CHECK(store.appended[0].version == 1);
  CHECK(store.appended[0].function_counts.at("loop") == std::vector<std::uint64_t>{90, 10});
  CHECK(store.totals[{kPk, 1}].stages == 2);
}

TEST_CASE("feedback loop: a write conflict keeps the data for the next decision",
          "[service][feedback]") {
  FakeFeedbackStore store;
  store.conflicts_to_inject = 1;
  FeedbackLoop loop(store, "h");
  loop.fold(stage(kPk, 0, 90, 10), policy());
  loop.fold(stage(kPk, 0, 90, 10), policy());
  auto lost = loop.fold(stage(kPk, 0, 90, 10), policy());
  CHECK_FALSE(lost.rewritten);
  CHECK_THAT(lost.policy, Catch::Contains("rewrite skipped") && Catch::Contains("conflict"));
  CHECK(store.keys[kPk].versions.empty());
  // The fourth stage decides again over all four stages' counts.
  auto won = loop.fold(stage(kPk, 0, 90, 10), policy());
  REQUIRE(won.rewritten);
  CHECK(store.keys[kPk].versions.back().doc.functions.at("loop").counts ==
        std::vector<std::uint64_t>{360, 40});
}

TEST_CASE("feedback loop: a pinned profile is never rewritten", "[service][feedback]") {
  FakeFeedbackStore store;
  FeedbackLoop loop(store, "h");
  for (int i = 0; i < 3; ++i)
    loop.fold(stage(kPk, 0, 90, 10), policy());
  REQUIRE(store.keys[kPk].versions.size() == 1);
  store.keys[kPk].pinned = true;
  // A completely different distribution: drift 1.0, but the profile is pinned.
  for (int i = 0; i < 10; ++i) {
    auto o = loop.fold(stage(kPk, 1, 1, 500), policy());
    CHECK_FALSE(o.rewritten);
    CHECK_THAT(o.policy, Catch::Contains("pinned"));
  }
  CHECK(store.keys[kPk].versions.size() == 1);
  CHECK(store.writes == 1);
}

TEST_CASE("feedback loop: a pin that lands between decision and write is honoured",
          "[service][feedback]") {
  FakeFeedbackStore store;
  FeedbackLoop loop(store, "h");
  for (int i = 0; i < 3; ++i)
    loop.fold(stage(kPk, 0, 90, 10), policy());
  // Pinned in the store after current() was read: the policy decides to
  // rewrite, the store's write refuses (as the SQLite store does for feedback).
  reinstrument(store);
  store.keys[kPk].pinned = true;
  store.hide_pin_from_reads = true;
  FeedbackOutcome last;
  for (int i = 0; i < 3; ++i)
    last = loop.fold(stage(kPk, 1, 1, 500), policy());
  CHECK_FALSE(last.rewritten);
  CHECK_THAT(last.policy, Catch::Contains("rewrite skipped") && Catch::Contains("pinned"));
  CHECK(store.keys[kPk].versions.size() == 1);
}

TEST_CASE("feedback loop: a failed flush keeps every row for the next one", "[service][feedback]") {
  FakeFeedbackStore store;
  FeedbackLoop loop(store, "h");
  store.keys[kPk].versions.push_back(ps::StoredProfile{});
  store.keys[kPk].versions.back().version = 1;
  loop.fold(stage(kPk, 1, 1, 2), policy());
  loop.fold(stage(kPk, 1, 3, 4), policy());
  store.append_failures_to_inject = 1;
  auto failed = loop.flush();
  REQUIRE_FALSE(failed);
  CHECK(failed.error().code() == Errc::timeout);
  CHECK_THAT(failed.error().message(), Catch::Contains("flush feedback"));
  CHECK(loop.pending_rows() == 2);
  loop.fold(stage(kPk, 1, 5, 6), policy()); // newer row arrives meanwhile
  REQUIRE(loop.flush());
  CHECK(loop.pending_rows() == 0);
  REQUIRE(store.appended.size() == 3);
  // Order kept: the older rows first.
  CHECK(store.appended[0].function_counts.at("loop")[0] == 1);
  CHECK(store.appended[1].function_counts.at("loop")[0] == 3);
  CHECK(store.appended[2].function_counts.at("loop")[0] == 5);
}

TEST_CASE("feedback loop: totals already in the store count after a restart",
          "[service][feedback]") {
  FakeFeedbackStore store;
  seed_v1_with_totals(store);
  FeedbackLoop fresh(store, "h");
  // Stage 3 under v1 (with the two stored ones) reaches min_stages; the
  // distribution moved far from the profile's, so v2 is written.
  auto o = fresh.fold(stage(kPk, 1, 1, 200), policy());
  REQUIRE(o.rewritten);
  CHECK(o.rewritten->to == 2);
  CHECK(store.keys[kPk].versions.back().doc.functions.at("loop").counts ==
        std::vector<std::uint64_t>{3, 600});
}

TEST_CASE("feedback loop: a stage served by an older version waits for the tier-up",
          "[service][feedback]") {
  FakeFeedbackStore store;
  FeedbackLoop loop(store, "h");
  // v1 (counts) is current: its optimized build compiles in the background.
  for (int i = 0; i < 3; ++i)
    loop.fold(stage(kPk, 0, 90, 10, i), policy());
  REQUIRE(store.keys[kPk].versions.size() == 1);
  REQUIRE(loop.flush());
  const int reads = store.reads;
  // An earlier build still serves (here one labelled v1, while v2 is
  // current): not what the program needs now, so it decides nothing and
  // costs no store read; its row goes to the version it ran.
  StageReport r = stage(kPk, 1, 5, 5, 3);
  r.target_profile_version = 2;
  r.run.planned_digest = "v2 digest";
  r.run.served_digest = "v1 digest";
  r.run.compile = CompileState::under_way;
  auto o = loop.fold(r, policy());
  CHECK_FALSE(o.rewritten);
  CHECK(o.use.stale);
  CHECK_FALSE(o.use.current);
  CHECK_THAT(o.policy, Catch::Contains("tier-up pending"));
  CHECK_THAT(o.policy, Catch::Contains("compiles in the background"));
  CHECK(store.reads == reads);
  CHECK(loop.pending_rows() == 1); // its counts still belong to version 1
  REQUIRE(loop.flush());
  // An optimized v1 stage later: the version's own.
  StageReport now = stage(kPk, 1, 0, 0, 4);
  now.run.served_mode = CompileMode::optimized;
  now.feedback.counts.clear();
  auto ok = loop.fold(now, policy());
  CHECK_FALSE(ok.use.stale);
  CHECK(ok.use.current);
  CHECK(loop.pending_rows() == 1);
}

TEST_CASE("feedback loop: a rewrite is written without the key's lock - its stages go on",
          "[service][feedback]") {
  FakeFeedbackStore store;
  FeedbackLoop loop(store, "h");
  store.hold_writes_of = kPk;
  loop.fold(stage(kPk, 0, 90, 10, 0), policy());
  loop.fold(stage(kPk, 0, 90, 10, 1), policy());
  // The third stage decides to rewrite and waits in the store.
  auto slow =
      std::async(std::launch::async, [&] { return loop.fold(stage(kPk, 0, 90, 10, 2), policy()); });
  store.wait_until_write_held();
  // The same key's next stage folds meanwhile (with the lock held across the
  // write it would wait), and leaves the decision to the write under way.
  auto next =
      std::async(std::launch::async, [&] { return loop.fold(stage(kPk, 0, 90, 10, 3), policy()); });
  const bool finished = next.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  store.release_held_write();
  REQUIRE(finished);
  FeedbackOutcome meanwhile = next.get();
  CHECK_FALSE(meanwhile.rewritten);
  CHECK_THAT(meanwhile.policy, Catch::Contains("being written"));
  FeedbackOutcome o = slow.get();
  REQUIRE(o.rewritten);
  CHECK(o.rewritten->to == 1);
  CHECK(store.keys[kPk].versions.size() == 1); // one rewrite, not two
  // The next stage folds under the new version.
  FeedbackOutcome after = loop.fold(stage(kPk, 1, 90, 10, 4), policy());
  CHECK_FALSE(after.rewritten);
  CHECK_THAT(after.policy, Catch::Contains("waiting for stages (1 of 3)"));
}

TEST_CASE("feedback loop: a slow read of a version's totals does not hold up the key's stages",
          "[service][feedback]") {
  FakeFeedbackStore store;
  seed_v1_with_totals(store); // two stages stored for v1
  FeedbackLoop loop(store, "h");
  PolicyConfig p = policy();
  p.min_stages = 10;
  // The first totals read waits until released; later ones answer at once.
  FirstCallGate gate;
  store.on_feedback_read = [&] { gate(); };
  auto slow =
      std::async(std::launch::async, [&] { return loop.fold(stage(kPk, 1, 90, 10, 0), p); });
  gate.wait_until_held();
  // With the key's lock held across that read, this stage would wait for it.
  auto next =
      std::async(std::launch::async, [&] { return loop.fold(stage(kPk, 1, 90, 10, 1), p); });
  const bool finished = next.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  gate.release();
  REQUIRE(finished);
  // The stored two stages and this one; then the slow stage adds itself to
  // them (the totals it read are not loaded over the key's running totals).
  CHECK_THAT(next.get().policy, Catch::Contains("(3 of 10)"));
  CHECK_THAT(slow.get().policy, Catch::Contains("(4 of 10)"));
  store.on_feedback_read = nullptr;
  CHECK_THAT(loop.fold(stage(kPk, 1, 90, 10, 2), p).policy, Catch::Contains("(5 of 10)"));
}

TEST_CASE("feedback loop: a slow write of one key does not hold up another key",
          "[service][feedback]") {
  FakeFeedbackStore store;
  FeedbackLoop loop(store, "h");
  store.hold_writes_of = kPk;
  loop.fold(stage(kPk, 0, 90, 10), policy());
  loop.fold(stage(kPk, 0, 90, 10), policy());
  auto slow =
      std::async(std::launch::async, [&] { return loop.fold(stage(kPk, 0, 90, 10), policy()); });
  store.wait_until_write_held();
  // Key A's write is in progress; key B folds, decides, writes, and the rows
  // flush, all meanwhile.
  for (int i = 0; i < 3; ++i)
    loop.fold(stage(kOtherPk, 0, 90, 10), policy());
  CHECK(store.keys[kOtherPk].versions.size() == 1);
  loop.fold(stage(kOtherPk, 1, 90, 10), policy());
  CHECK(loop.flush());
  CHECK(slow.wait_for(std::chrono::milliseconds(0)) == std::future_status::timeout);
  store.release_held_write();
  auto o = slow.get();
  REQUIRE(o.rewritten);
  CHECK(o.rewritten->to == 1);
}

TEST_CASE("feedback loop: forget drops a key's running totals", "[service][feedback]") {
  FakeFeedbackStore store;
  FeedbackLoop loop(store, "h");
  loop.fold(stage(kPk, 0, 90, 10), policy());
  loop.fold(stage(kPk, 0, 90, 10), policy());
  loop.forget(kPk);
  auto o = loop.fold(stage(kPk, 0, 90, 10), policy());
  CHECK_FALSE(o.rewritten);
  CHECK_THAT(o.policy, Catch::Contains("waiting for stages (1 of 3)"));
}

TEST_CASE("feedback loop: stage feedback is read from a stage's observation",
          "[service][feedback]") {
  StageObservation obs;
  obs.exec_ns = 1234;
  perf::Measurement& m = obs.measurement.emplace();
  m.wall_ns = 1234;
  m.process_cpu_ns = 999;
  m.events.resize(2);
  m.events[0].name = "branch-misses";
  m.events[0].value = 7;
  m.events[1].name = "cycles";
  m.events[1].status = perf::EventStatus::not_supported;
  obs.counts = {{"loop", {1, 2}}, {"unknown", {3}}};
  StageFeedback fb = stage_feedback_from(obs, {{"loop", kHash}});
  CHECK(fb.exec_ns == 1234);
  CHECK(fb.cpu_ns == std::optional<std::uint64_t>(999));
  CHECK(fb.counters == std::map<std::string, std::uint64_t>{{"branch-misses", 7}});
  REQUIRE(fb.counts.size() == 1);
  CHECK(fb.counts.at("loop").cfg_hash == kHash);
  CHECK(fb.counts.at("loop").counts == std::vector<std::uint64_t>{1, 2});
  // An in-process batch: its wall time, no CPU time or counters.
  StageObservation batch;
  batch.exec_ns = 50;
  batch.counts = {{"loop", {4, 5}}};
  StageFeedback in_process = stage_feedback_from(batch, {{"loop", kHash}});
  CHECK(in_process.exec_ns == 50);
  CHECK_FALSE(in_process.cpu_ns);
  CHECK(in_process.counters.empty());
  CHECK(in_process.counts.at("loop").counts == std::vector<std::uint64_t>{4, 5});
}

TEST_CASE("feedback loop: value profiles and source names reach the written profile",
          "[service][feedback][value]") {
  // The observation's value profiles ...
  StageObservation obs;
  obs.exec_ns = 10;
  obs.counts = {{"loop", {90, 10}}};
  obs.values["loop"].indirect_calls = {{{0xaa, 9}, {0xbb, 1}}};
  obs.values["loop"].memop_sizes = {{{8, 5}}};
  obs.values["unknown"].memop_sizes = {{{1, 1}}};
  StageFeedback fb = stage_feedback_from(obs, {{"loop", kHash}});
  REQUIRE(fb.counts.size() == 1);
  CHECK(fb.counts.at("loop").indirect_calls == std::vector<ValueSite>{{{0xaa, 9}, {0xbb, 1}}});
  CHECK(fb.counts.at("loop").memop_sizes == std::vector<ValueSite>{{{8, 5}}});
  // Value profiles of a function without counts are not taken.
  obs.counts.erase("loop");
  CHECK(stage_feedback_from(obs, {{"loop", kHash}}).counts.empty());

  // ... are summed site by site across stages and written with the counts,
  // next to each function's source name.
  FakeFeedbackStore store;
  FeedbackLoop loop(store, "host-a");
  for (int i = 0; i < 3; ++i) {
    StageReport r = stage(kPk, 0, 90, 10, i);
    r.feedback.counts["loop"].indirect_calls = fb.counts.at("loop").indirect_calls;
    r.feedback.counts["loop"].memop_sizes = {{{8, 5}, {static_cast<std::uint64_t>(16 + i), 1}}};
    edit_metadata(r, [](StageMetadata& m) { m.compile.source_names["loop"] = "/src/loop.c:loop"; });
    loop.fold(r, policy());
  }
  REQUIRE(store.keys[kPk].versions.size() == 1);
  const FunctionProfile& f = store.keys[kPk].versions[0].doc.functions.at("loop");
  CHECK(f.counts == std::vector<std::uint64_t>{270, 30});
  CHECK(f.indirect_calls == std::vector<ValueSite>{{{0xaa, 27}, {0xbb, 3}}});
  CHECK(f.memop_sizes == std::vector<ValueSite>{{{8, 15}, {16, 1}, {17, 1}, {18, 1}}});
  CHECK(f.source_name == "/src/loop.c:loop");
}

TEST_CASE("feedback loop: sampled misses on one branch mark it !unpredictable once",
          "[service][feedback][blocks]") {
  FakeFeedbackStore store;
  FeedbackLoop loop(store, "h");
  for (int i = 0; i < 3; ++i)
    loop.fold(stage(kPk, 0, 500, 480, i), policy());
  REQUIRE(store.keys[kPk].versions.size() == 1);

  // Optimized stages of v1: no counts, clock samples, and branch misses on
  // branch 0 of "loop", whose profiled split is near even.
  auto optimized = [&](std::int64_t version, std::int64_t number) {
    StageReport r = stage(kPk, version, 0, 0, number);
    r.feedback.counts.clear();
    r.samples.present = true;
    r.samples.clock_event = "cpu-clock";
    r.samples.clock["loop"] = 10;
    r.samples.functions = {"loop"};
    r.blocks.branches["loop"][0]["branch-misses"] = 8;
    r.blocks.branches["loop"][1]["branch-misses"] = 1;
    r.blocks.blocks["cpu-clock"]["loop"][2] = 10;
    edit_metadata(r, [](StageMetadata& m) {
      m.branch_weights["loop"] = {BranchStat{0, 500, 480}, BranchStat{1, 980, 20}};
    });
    return r;
  };
  std::optional<Rewrite> marked;
  int stages = 0;
  while (!marked && stages < 10)
    marked = loop.fold(optimized(1, 10 + stages++), policy()).rewritten;
  REQUIRE(marked);
  CHECK(stages == 3); // 24 miss samples: past the default 20 at the third stage
  CHECK_THAT(marked->reason, Catch::Contains("loop branch 0 (24 miss samples"));
  const ProfileDoc& d2 = store.keys[kPk].versions.back().doc;
  CHECK(d2.functions.at("loop").unpredictable == std::vector<std::uint32_t>{0});
  const auto& rec = d2.hardware.at("sampling");
  CHECK(rec["branches"]["loop"]["0"]["misses"]["branch-misses"] == 24);
  CHECK(rec["branches"]["loop"]["0"]["taken"] == 500);
  CHECK(rec["branches"]["loop"]["1"]["misses"]["branch-misses"] == 3);
  CHECK(rec["blocks"]["cpu-clock"]["loop"]["2"] == 30);

  // The branch keeps missing under v2: already marked, so nothing is rewritten.
  for (int i = 0; i < 6; ++i)
    CHECK_FALSE(loop.fold(optimized(2, 20 + i), policy()).rewritten);
  CHECK(store.keys[kPk].versions.size() == 2);
}

TEST_CASE("feedback loop: branch statistics kept between stages follow new miss samples",
          "[service][feedback][blocks]") {
  // The served build's metadata is one object for every stage (as fdod keeps
  // it with the cached output): the statistics made from its weights are
  // kept, and must still take in the misses that later stages sample.
  FakeFeedbackStore store;
  FeedbackLoop loop(store, "h");
  for (int i = 0; i < 3; ++i)
    loop.fold(stage(kPk, 0, 500, 480, i), policy());
  REQUIRE(store.keys[kPk].versions.size() == 1);
  StageReport base = stage(kPk, 1, 0, 0);
  edit_metadata(base, [](StageMetadata& m) {
    m.branch_weights["loop"] = {BranchStat{0, 500, 480}, BranchStat{1, 980, 20}};
  });
  const StageMetadataRef shared = base.metadata;
  auto optimized = [&](std::int64_t number, std::uint64_t misses) {
    StageReport r = base;
    r.stage = number;
    r.metadata = shared;
    r.feedback.counts.clear();
    r.samples.present = true;
    r.samples.clock_event = "cpu-clock";
    r.samples.clock["loop"] = 10;
    r.samples.functions = {"loop"};
    if (misses != 0) r.blocks.branches["loop"][0]["branch-misses"] = misses;
    return r;
  };
  // Steady stages with no miss samples (past min_stages from the third):
  // nothing to mark, nothing written.
  for (int i = 0; i < 4; ++i) {
    FeedbackOutcome o = loop.fold(optimized(10 + i, 0), policy());
    CHECK_FALSE(o.rewritten);
    if (i >= 2) CHECK(o.policy == "no new information under an optimized build");
  }
  // Then misses on branch 0 (near even): 12 + 12 pass the default 20.
  CHECK_FALSE(loop.fold(optimized(20, 12), policy()).rewritten);
  std::optional<Rewrite> marked = loop.fold(optimized(21, 12), policy()).rewritten;
  REQUIRE(marked);
  CHECK_THAT(marked->reason, Catch::Contains("loop branch 0 (24 miss samples"));
  CHECK(store.keys[kPk].versions.back().doc.functions.at("loop").unpredictable ==
        std::vector<std::uint32_t>{0});
}

TEST_CASE("feedback loop: decides on the fleet's totals and names the contributing hosts",
          "[service][feedback][fleet]") {
  FakeFeedbackStore store;
  FeedbackLoop a(store, "host-a");
  for (int i = 0; i < 3; ++i)
    a.fold(stage(kPk, 0, 90, 10, i), policy());
  REQUIRE(store.keys[kPk].versions.size() == 1);
  reinstrument(store); // v1's stages count, on every host
  // Every row carries its host.
  a.fold(stage(kPk, 1, 10, 90, 3), policy());
  REQUIRE(a.flush());
  REQUIRE(store.appended.size() == 1);
  CHECK(store.appended[0].host == "host-a");

  // Host b has flushed two more stages of v1 with the same shift; host c
  // sees its first stage of v1: alone it would wait (1 of 3), with the
  // fleet's 3 stages + its own it rewrites.
  ps::FeedbackRow b;
  b.pk = kPk;
  b.version = 1;
  b.stages = 2;
  b.exec_ns = 1000;
  b.host = "host-b";
  b.function_counts["loop"] = {20, 180};
  REQUIRE(store.append_feedback(std::vector<ps::FeedbackRow>{b}, "batch-b"));
  FeedbackLoop c(store, "host-c");
  auto out = c.fold(stage(kPk, 1, 10, 90, 0), policy());
  REQUIRE(out.rewritten);
  CHECK(out.rewritten->to == 2);
  const ps::StoredProfile& v2 = store.keys[kPk].versions.back();
  // a's 1 + b's 2 flushed, c's 1 not flushed yet: all counted.
  CHECK(v2.doc.functions.at("loop").counts == std::vector<std::uint64_t>{40, 360});
  CHECK_THAT(v2.reason, Catch::Contains("evidence from hosts host-a (1 stage), host-b (2 "
                                        "stages), host-c (1 stage)"));
  CHECK(v2.host == "host-c");
}

TEST_CASE("feedback loop: a new version counts only its own stages, not the fleet totals of the "
          "one before",
          "[service][feedback][fleet]") {
  FakeFeedbackStore store;
  seed_v1_with_totals(store);
  FeedbackLoop loop(store, "h");
  // v1's stored totals (2 stages) + this one: v2 is written.
  auto o = loop.fold(stage(kPk, 1, 1, 200), policy());
  REQUIRE(o.rewritten);
  REQUIRE(o.rewritten->to == 2);
  reinstrument(store); // v2's stages count too
  // The first stage of v2, at once (well inside the fleet refresh interval):
  // one stage of three, whatever v1's rows held.
  auto first = loop.fold(stage(kPk, 2, 50, 50), policy());
  CHECK_FALSE(first.rewritten);
  CHECK_THAT(first.policy, Catch::Contains("waiting for stages (1 of 3)"));
  CHECK_FALSE(loop.fold(stage(kPk, 2, 50, 50), policy()).rewritten);
  auto third = loop.fold(stage(kPk, 2, 50, 50), policy());
  REQUIRE(third.rewritten);
  // v3 holds v2's three stages' counts alone.
  CHECK(store.keys[kPk].versions.back().doc.functions.at("loop").counts ==
        std::vector<std::uint64_t>{150, 150});
}

TEST_CASE("feedback loop: rows not yet flushed count per key and through a failed flush",
          "[service][feedback][fleet]") {
  FakeFeedbackStore store;
  for (const std::string& pk : {kPk, kOtherPk}) {
    store.keys[pk].versions.push_back(ps::StoredProfile{});
    store.keys[pk].versions.back().version = 1;
  }
  // Another host flushed one stage of v1 already.
  ps::FeedbackRow b;
  b.pk = kPk;
  b.version = 1;
  b.stages = 1;
  b.exec_ns = 500;
  b.host = "host-b";
  b.function_counts["loop"] = {20, 180};
  REQUIRE(store.append_feedback(std::vector<ps::FeedbackRow>{b}, "batch-b"));

  FeedbackLoop c(store, "host-c");
  CHECK_FALSE(c.fold(stage(kPk, 1, 10, 90, 0), policy()).rewritten);
  // Rows of another key sit in the same batch and must not count for kPk.
  for (int i = 0; i < 4; ++i)
    c.fold(stage(kOtherPk, 1, 1000, 1000, i), policy());
  CHECK(c.pending_rows() == 5);
  store.append_failures_to_inject = 1;
  REQUIRE_FALSE(c.flush());
  CHECK(c.pending_rows() == 5);
  CHECK(store.keys[kPk].versions.size() == 1);
  // b's 1 + c's 2 (one of them kept through the failed flush): the third stage.
  auto out = c.fold(stage(kPk, 1, 10, 90, 1), policy());
  REQUIRE(out.rewritten);
  CHECK(out.rewritten->to == 2);
  CHECK(store.keys[kPk].versions.back().doc.functions.at("loop").counts ==
        std::vector<std::uint64_t>{40, 360});
  CHECK_THAT(store.keys[kPk].versions.back().reason,
             Catch::Contains("host-b (1 stage), host-c (2 stages)"));
}

namespace {

// The fake store with a hook that runs right after a batch of rows is
// committed, before the loop's flush call returns: where a stage of another
// thread can run while the loop still holds the rows as in flight.
class CommitHookStore final : public FeedbackStore {
public:
  FakeFeedbackStore inner;
  std::function<void()> after_commit;

  Expected<ps::SharedProfile> current(std::string_view pk) override { return inner.current(pk); }
  Expected<std::optional<ps::StoredProfile>> version(std::string_view pk, std::int64_t v) override {
    return inner.version(pk, v);
  }
  Expected<std::optional<ps::FeedbackTotals>> feedback(std::string_view pk,
                                                       std::int64_t v) override {
    return inner.feedback(pk, v);
  }
  Expected<std::int64_t> write(std::string_view pk, std::int64_t expected, const ProfileDoc& doc,
                               const ps::WriteInfo& info) override {
    return inner.write(pk, expected, doc, info);
  }
  Status append_feedback(std::span<const ps::FeedbackRow> rows,
                         std::string_view batch_id) override {
    FDO_TRY_STATUS(inner.append_feedback(rows, batch_id));
    if (auto hook = std::exchange(after_commit, nullptr)) hook();
    return ok();
  }
};

PolicyConfig policy_of(int min_stages) {
  PolicyConfig p = policy();
  p.min_stages = min_stages;
  return p;
}

void seed_v1(FakeFeedbackStore& store) {
  store.keys[kPk].versions.push_back(ps::StoredProfile{});
  store.keys[kPk].versions.back().version = 1;
}

ps::FeedbackRow row_of(const std::string& host, std::uint64_t stages) {
  ps::FeedbackRow r;
  r.pk = kPk;
  r.version = 1;
  r.stages = stages;
  r.exec_ns = 500 * stages;
  r.host = host;
  r.function_counts["loop"] = {10 * stages, 90 * stages};
  return r;
}

} // namespace

TEST_CASE("feedback loop: a flush after the fleet totals were read still counts its rows once",
          "[service][feedback][fleet]") {
  CommitHookStore store;
  seed_v1(store.inner);
  REQUIRE(store.inner.append_feedback(std::vector<ps::FeedbackRow>{row_of("host-b", 2)}, "b"));
  FeedbackLoop a(store, "host-a");
  // Stage 1 reads the fleet's totals (host-b's 2 stages); its own row is pending.
  auto o1 = a.fold(stage(kPk, 1, 10, 90, 1), policy_of(4));
  CHECK_THAT(o1.policy, Catch::Contains("(3 of 4)"));
  // The row reaches the store; stage 2 comes well inside the fleet refresh
  // interval, so it decides on the snapshot read before the flush: the
  // flushed row is in neither the snapshot nor the pending rows, yet counts.
  REQUIRE(a.flush());
  auto o2 = a.fold(stage(kPk, 1, 10, 90, 2), policy_of(4));
  REQUIRE(o2.rewritten);
  CHECK(o2.rewritten->to == 2);
  const ps::StoredProfile& v2 = store.inner.keys[kPk].versions.back();
  CHECK(v2.doc.functions.at("loop").counts == std::vector<std::uint64_t>{40, 360});
  CHECK_THAT(v2.reason,
             Catch::Contains("evidence from hosts host-a (2 stages), host-b (2 stages)"));
}

TEST_CASE("feedback loop: totals read while a flush is committing count its rows once",
          "[service][feedback][fleet]") {
  CommitHookStore store;
  seed_v1(store.inner);
  FeedbackLoop a(store, "host-a");
  a.fold(stage(kPk, 1, 10, 90, 1), policy_of(3));
  a.forget(kPk); // the next stage of the key starts from the store's totals
  // The flush of stage 1's row commits; before the loop learns so, stage 2
  // (another thread in fdod) reads the version's totals, which now hold the
  // row the loop still has in flight.
  std::optional<FeedbackOutcome> during;
  store.after_commit = [&] { during = a.fold(stage(kPk, 1, 10, 90, 2), policy_of(3)); };
  REQUIRE(a.flush());
  REQUIRE(during);
  CHECK_FALSE(during->rewritten);
  CHECK_THAT(during->policy, Catch::Contains("(2 of 3)"));
  // Stage 3 makes three, each counted once: host-a (3 stages), not 4.
  auto o3 = a.fold(stage(kPk, 1, 10, 90, 3), policy_of(3));
  REQUIRE(o3.rewritten);
  const ps::StoredProfile& v2 = store.inner.keys[kPk].versions.back();
  CHECK(v2.doc.functions.at("loop").counts == std::vector<std::uint64_t>{30, 270});
  CHECK_THAT(v2.reason, Catch::Contains("evidence from host host-a (3 stages)"));
}
