#include "fakes.h"
#include "fdo/daemon/feedback_loop.h"
#include "fdo/daemon/time_share.h"

#include <catch2/catch.hpp>

using namespace fdo;
using namespace fdo::daemon;
using namespace fdo::daemon::testing;

namespace {
using EventCounts = std::map<std::string, std::map<std::string, std::uint64_t>>;

// A sampled stage's observation as the exec worker builds it (stage_sampling.h).
// `extra_events`: event -> function -> samples.
StageObservation reply_with(std::uint64_t in_a, std::uint64_t in_b, std::uint64_t outside,
                            const EventCounts& extra_events = {}) {
  StageObservation obs;
  StageSampleReport& s = obs.samples.emplace();
  s.events.resize(2);
  s.events[0].name = "cpu-clock";
  s.events[0].status = perf::EventStatus::available;
  s.events[1].name = "branch-misses";
  s.events[1].status = perf::EventStatus::available;
  s.recorded = s.attributed = in_a + in_b + outside;
  if (in_a != 0) s.functions["phase_a"]["cpu-clock"] = in_a;
  if (in_b != 0) s.functions["phase_b"]["cpu-clock"] = in_b;
  for (const auto& [event, per_fn] : extra_events)
    for (const auto& [fn, n] : per_fn)
      s.functions[fn][event] = n;
  s.outside_jit["cpu-clock"] = outside;
  obs.function_ranges = std::vector<jit::FunctionRange>{
      {"phase_a", 0x1000, 64}, {"phase_b", 0x2000, 64}, {"main", 0x3000, 64}};
  return obs;
}

const std::map<std::string, std::string> kNames = {
    {"phase_a", "phase_a"}, {"phase_b", "phase_b"}, {"main", "main"}};
} // namespace

TEST_CASE("stage samples: clock per function, misses per event, outside counted",
          "[service][time_share]") {
  const StageObservation r = reply_with(30, 10, 5, {{"branch-misses", {{"phase_b", 7}}}});
  StageSamples s = stage_samples_from(r, kNames);
  REQUIRE(s.present);
  CHECK(s.clock_event == "cpu-clock");
  CHECK(s.clock.at("phase_a") == 30);
  CHECK(s.clock.at("phase_b") == 10);
  CHECK(s.clock_outside == 5);
  CHECK(s.misses.at("branch-misses").at("phase_b") == 7);
  CHECK(s.functions == std::set<std::string>{"phase_a", "phase_b", "main"});

  // A local function's symbol maps to its PGO name ("<file>:<symbol>").
  StageSamples local = stage_samples_from(
      r, PgoNames(std::map<std::string, std::string>{
             {"prog.ll:phase_a", "helper.c:phase_a"}, {"phase_b", "phase_b"}, {"main", "main"}}));
  CHECK(local.clock.count("prog.ll:phase_a") == 1);

  // Without function ranges in the reply (the daemon did not ask for them
  // again), the functions with code are the ones it already knew.
  StageObservation no_ranges = r;
  no_ranges.function_ranges.reset();
  const std::set<std::string> known = {"phase_a", "phase_b", "main", "other"};
  CHECK(stage_samples_from(no_ranges, kNames, &known).functions == known);
  CHECK(stage_samples_from(no_ranges, kNames).functions.empty());
  // The reply's ranges win over what was known.
  CHECK(stage_samples_from(r, kNames, &known).functions ==
        std::set<std::string>{"phase_a", "phase_b", "main"});

  // No clock available (or no sampling at all): nothing to judge by.
  StageObservation no_clock = r;
  no_clock.samples->events[0].status = perf::EventStatus::not_permitted;
  CHECK_FALSE(stage_samples_from(no_clock, kNames).present);
  CHECK_FALSE(stage_samples_from(StageObservation{}, kNames).present);
  StageObservation failed;
  failed.samples.emplace().error = "x";
  CHECK_FALSE(stage_samples_from(failed, kNames).present);
}

TEST_CASE("PGO names of loaded symbols: exact names first, then the first local name",
          "[service][time_share]") {
  const PgoNames names(std::map<std::string, std::string>{{"a.c:f", "f"},
                                                          {"b.c:f", "f"},
                                                          {"g", "g"},
                                                          {"x.c:g", "g"},
                                                          {"dir:sub.c:h", "h"},
                                                          {"z.c:", ""}});
  CHECK(names.of("f") == "a.c:f");       // the first "<file>:f" in order
  CHECK(names.of("g") == "g");           // a PGO name itself wins over "x.c:g"
  CHECK(names.of("h") == "dir:sub.c:h"); // after any ':'
  CHECK(names.of("sub.c:h") == "dir:sub.c:h");
  CHECK(names.of("a.c:f") == "a.c:f");
  CHECK(names.of("unknown") == "unknown"); // not a program function: kept as is
  CHECK(names.of(":f") == ":f");           // no prefix before the ':' in a PGO name
  CHECK(PgoNames().of("f") == "f");
  // The two bodies of a specialized function are that function.
  CHECK(names.of("f.fdo.spec") == "a.c:f");
  CHECK(names.of("g.fdo.general") == "g");
  CHECK(names.of("unknown.fdo.spec") == "unknown.fdo.spec");
  CHECK(names.of(".fdo.spec") == ".fdo.spec");
}

TEST_CASE("time-share drift: distance over the functions that have code now",
          "[service][time_share]") {
  std::set<std::string> both = {"a", "b"};
  CHECK(time_share_drift({{"a", 0.9}, {"b", 0.1}}, {{"a", 0.9}, {"b", 0.1}}, both) == 0.0);
  CHECK(time_share_drift({{"a", 1.0}}, {{"b", 1.0}}, both) == Approx(1.0));
  CHECK(time_share_drift({{"a", 0.8}, {"b", 0.2}}, {{"a", 0.2}, {"b", 0.8}}, both) == Approx(0.6));
  // "c" was inlined away in the optimized code: not a shift of the workload.
  CHECK(time_share_drift({{"a", 0.5}, {"c", 0.5}}, {{"a", 1.0}}, both) == 0.0);
  CHECK(time_share_drift({}, {{"a", 1.0}}, both) == 0.0);
}

namespace {
const std::string kPk(64, 'd');
constexpr std::uint64_t kHash = 0x77;

PolicyConfig drift_policy() {
  PolicyConfig p;
  p.cs_pgo_stages = 0; // the first round alone (cs_round_test.cpp has the CS round)
  p.min_stages = 2;
  p.min_counts = 10;
  p.time_share_drift_threshold = 0.30;
  p.time_share_window_stages = 3;
  p.time_share_min_samples = 50;
  return p;
}

// One stage of a two-phase program: instrumented stages carry counts; every
// stage carries a recorded sample stream (phase A or phase B hot).
StageReport phase_stage(std::int64_t version, bool instrumented, std::uint64_t in_a,
                        std::uint64_t in_b, std::int64_t number) {
  StageReport r;
  r.pk = kPk;
  r.program = std::string(64, 'e');
  r.stage = number;
  r.profile_version = version;
  r.target_profile_version = version;
  edit_metadata(r, [&](StageMetadata& m) {
    m.compile.source_names = kNames;
    if (instrumented)
      for (const char* fn : {"phase_a", "phase_b"})
        m.cfg_hashes[fn] = kHash;
  });
  if (instrumented) {
    r.feedback.counts["phase_a"] = FunctionCounts{kHash, {in_a, 1}};
    r.feedback.counts["phase_b"] = FunctionCounts{kHash, {in_b, 1}};
  }
  r.samples = stage_samples_from(reply_with(in_a, in_b, 4), kNames);
  r.run.served_mode = instrumented ? CompileMode::instrumented : CompileMode::optimized;
  return r;
}
} // namespace

TEST_CASE("drift: a workload shift re-profiles within a bounded number of stages, then settles",
          "[service][time_share][drift]") {
  FakeFeedbackStore store;
  FeedbackLoop loop(store, "h");
  const PolicyConfig p = drift_policy();
  std::int64_t n = 0;

  // Phase A, instrumented: v1 records A's time shares.
  loop.fold(phase_stage(0, true, 90, 10, n++), p);
  auto v1 = loop.fold(phase_stage(0, true, 90, 10, n++), p);
  REQUIRE(v1.rewritten);
  const ProfileDoc& d1 = store.keys[kPk].versions.back().doc;
  auto rec1 = recorded_time_shares(d1);
  REQUIRE(rec1);
  CHECK(rec1->at("phase_a") == Approx(0.9));
  CHECK(choose_mode(&d1) == CompileMode::optimized);

  // Phase A, optimized: same shares, no churn however long it runs.
  for (int i = 0; i < 6; ++i) {
    auto o = loop.fold(phase_stage(1, false, 88, 12, n++), p);
    CHECK_FALSE(o.rewritten);
    if (i >= 2) CHECK_THAT(o.policy, Catch::Contains("below threshold"));
  }

  // Phase B: the window fills with B's shares and the program is re-profiled.
  std::optional<Rewrite> reprofiled;
  int stages_to_reprofile = 0;
  while (!reprofiled && stages_to_reprofile < 10) {
    ++stages_to_reprofile;
    reprofiled = loop.fold(phase_stage(1, false, 10, 90, n++), p).rewritten;
  }
  REQUIRE(reprofiled);
  CHECK(stages_to_reprofile <= p.time_share_window_stages);
  CHECK_THAT(reprofiled->reason, Catch::Contains("time-share drift"));
  CHECK_THAT(reprofiled->reason, Catch::Contains("re-profiling"));
  const ProfileDoc& d2 = store.keys[kPk].versions.back().doc;
  CHECK(choose_mode(&d2) == CompileMode::instrumented); // the next compile counts again
  CHECK(d2.functions.at("phase_a").cfg_hash == kHash);

  // Instrumented stages under v2 write v3 from B's counts and shares.
  loop.fold(phase_stage(2, true, 10, 90, n++), p);
  auto v3 = loop.fold(phase_stage(2, true, 10, 90, n++), p);
  REQUIRE(v3.rewritten);
  CHECK(v3.rewritten->to == 3);
  const ProfileDoc& d3 = store.keys[kPk].versions.back().doc;
  CHECK(choose_mode(&d3) == CompileMode::optimized);
  CHECK(recorded_time_shares(d3)->at("phase_b") == Approx(0.9));
  CHECK(d3.functions.at("phase_b").counts == std::vector<std::uint64_t>{180, 2});

  // Phase B goes on, then wobbles a little: below the threshold, no churn.
  for (int i = 0; i < 6; ++i)
    CHECK_FALSE(
        loop.fold(phase_stage(3, false, 20 + i % 2 * 10, 80 - i % 2 * 10, n++), p).rewritten);
  CHECK(store.keys[kPk].versions.size() == 3);
}

TEST_CASE("drift: a re-profile drops every count of the old workload - context-sensitive ones too",
          "[service][time_share][drift]") {
  ProfileDoc cur;
  FunctionProfile f;
  f.cfg_hash = kHash;
  f.counts = {90, 10};
  f.layout = FunctionLayout::hot;
  cur.functions["phase_a"] = f;
  FunctionProfile cs = f;
  cs.cfg_hash = kHash | kCsHashFlag;
  cur.cs_functions["phase_a"] = cs;
  cur.knobs.unroll = false;
  for (CompileMode m : {CompileMode::optimized, CompileMode::cs_instrumented}) {
    cur.knobs.mode = m;
    ProfileDoc d = reprofile_doc(cur);
    CHECK(d.functions.at("phase_a").counts.empty());
    CHECK(d.functions.at("phase_a").cfg_hash == kHash);
    CHECK(d.functions.at("phase_a").layout == FunctionLayout::hot);
    CHECK(d.cs_functions.empty());
    CHECK_FALSE(d.knobs.mode.has_value());
    CHECK_FALSE(d.knobs.unroll); // tuned knobs carry over
    CHECK(choose_mode(&d) == CompileMode::instrumented);
  }
}

TEST_CASE("drift: pins, the rate cap and unsampled stages hold re-profiling back",
          "[service][time_share][drift]") {
  FakeFeedbackStore store;
  FeedbackLoop loop(store, "h");
  PolicyConfig p = drift_policy();
  std::int64_t n = 0;
  loop.fold(phase_stage(0, true, 90, 10, n++), p);
  REQUIRE(loop.fold(phase_stage(0, true, 90, 10, n++), p).rewritten);

  SECTION("stages without samples never judge drift") {
    for (int i = 0; i < 5; ++i) {
      StageReport r = phase_stage(1, false, 10, 90, n++);
      r.samples = StageSamples{};
      CHECK_FALSE(loop.fold(r, p).rewritten);
    }
  }
  SECTION("too few samples: waiting, said so") {
    auto o = loop.fold(phase_stage(1, false, 1, 9, n++), p);
    CHECK_FALSE(o.rewritten);
    CHECK_THAT(o.policy, Catch::Contains("waiting for samples"));
  }
  SECTION("a pinned profile is never re-profiled") {
    store.keys[kPk].pinned = true;
    for (int i = 0; i < 5; ++i)
      CHECK_FALSE(loop.fold(phase_stage(1, false, 10, 90, n++), p).rewritten);
  }
  SECTION("the recompile cap defers it, and says so") {
    p.max_recompiles_per_hour = 1; // the first rewrite used it
    std::string last;
    for (int i = 0; i < 5; ++i) {
      auto o = loop.fold(phase_stage(1, false, 10, 90, n++), p);
      CHECK_FALSE(o.rewritten);
      last = o.policy;
    }
    CHECK_THAT(last, Catch::Contains("rate cap"));
  }
  SECTION("threshold 1 turns drift re-profiling off") {
    p.time_share_drift_threshold = 1.0;
    for (int i = 0; i < 5; ++i)
      CHECK_FALSE(loop.fold(phase_stage(1, false, 0, 100, n++), p).rewritten);
  }
  CHECK(store.keys[kPk].versions.size() == 1);
}

TEST_CASE("drift: the window survives a restart through the version's feedback rows",
          "[service][time_share][drift]") {
  FakeFeedbackStore store;
  PolicyConfig p = drift_policy();
  p.time_share_window_stages = 4;
  std::int64_t n = 0;
  {
    FeedbackLoop loop(store, "h");
    loop.fold(phase_stage(0, true, 90, 10, n++), p);
    REQUIRE(loop.fold(phase_stage(0, true, 90, 10, n++), p).rewritten);
    // Phase B starts under v1: two sampled stages, the window is not full.
    for (int i = 0; i < 2; ++i) {
      auto o = loop.fold(phase_stage(1, false, 10, 90, n++), p);
      CHECK_FALSE(o.rewritten);
      CHECK_THAT(o.policy, Catch::Contains("waiting for samples (" + std::to_string(i + 1)));
    }
    REQUIRE(loop.flush());
  } // the daemon stops

  // The rows carry the sampled stages; the store sums them per version.
  auto totals = store.feedback(kPk, 1);
  REQUIRE(totals);
  REQUIRE(*totals);
  CHECK((*totals)->counters.at("sampled|stages") == 2);
  CHECK((*totals)->counters.at("sampled|cpu-clock|phase_b") == 180);

  // A new daemon: its window starts from those two stages, so the third
  // sampled stage is judged with three, and the fourth re-profiles.
  FeedbackLoop restarted(store, "h");
  auto third = restarted.fold(phase_stage(1, false, 10, 90, n++), p);
  CHECK_FALSE(third.rewritten);
  CHECK_THAT(third.policy, Catch::Contains("waiting for samples (3 of 4 stages"));
  auto fourth = restarted.fold(phase_stage(1, false, 10, 90, n++), p);
  REQUIRE(fourth.rewritten);
  CHECK_THAT(fourth.rewritten->reason, Catch::Contains("over 4 sampled stages: re-profiling"));
  CHECK(choose_mode(&store.keys[kPk].versions.back().doc) == CompileMode::instrumented);
}

TEST_CASE("drift: sampled totals as counters, and rows without them", "[service][time_share]") {
  StageSamples s =
      stage_samples_from(reply_with(30, 10, 5, {{"branch-misses", {{"phase_b", 7}}}}), kNames);
  REQUIRE(s.present);
  std::map<std::string, std::uint64_t> counters{{"instructions", 1000}};
  add_sample_counters(s, counters);
  add_sample_counters(s, counters);
  // The keys as rows hold them in the store (older rows are read back).
  CHECK(counters.at("sampled|stages") == 2);
  CHECK(counters.at("sampled|outside|cpu-clock") == 10);
  CHECK(counters.at("sampled|code|phase_a") == 2);
  CHECK(counters.at("sampled|code|main") == 2);
  CHECK(counters.at("sampled|cpu-clock|phase_a") == 60);
  CHECK(counters.at("sampled|branch-misses|phase_b") == 14);
  CHECK(counters.size() == 9); // with "instructions"
  auto totals = take_sample_counters(counters);
  REQUIRE(totals);
  CHECK(counters == std::map<std::string, std::uint64_t>{{"instructions", 1000}});
  CHECK(totals->stages == 2);
  CHECK(totals->sum.clock_event == "cpu-clock");
  CHECK(totals->sum.clock.at("phase_a") == 60);
  CHECK(totals->sum.clock_outside == 10);
  CHECK(totals->sum.misses.at("branch-misses").at("phase_b") == 14);
  CHECK(totals->sum.functions == std::set<std::string>{"phase_a", "phase_b", "main"});

  TimeShareWindow w;
  w.restore(totals->sum, totals->stages);
  CHECK(w.stages() == 2);
  CHECK(w.shares().at("phase_a") == Approx(0.75));
  w.add(s, 3);
  CHECK(w.stages() == 3);
  w.add(s, 3); // the two newest alone do not make 3: the sum stays
  CHECK(w.stages() == 4);
  w.add(s, 3);
  CHECK(w.stages() == 3); // now they do: the sum is dropped

  // Rows written before sampled keys existed (or unsampled stages): nothing.
  std::map<std::string, std::uint64_t> old{{"instructions", 5}, {"branch-misses", 1}};
  CHECK_FALSE(take_sample_counters(old));
  CHECK(old.size() == 2);
  // Malformed keys are dropped, never taken for events.
  std::map<std::string, std::uint64_t> odd{{"sampled|", 1}, {"sampled|x", 2}};
  CHECK_FALSE(take_sample_counters(odd));
  CHECK(odd.empty());
}
