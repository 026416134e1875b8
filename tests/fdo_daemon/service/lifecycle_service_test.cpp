// The program lifecycle through the whole service (docs/lifecycle.md): the
// Service composed over fake workers that behave like a two-phase program (its
// counts, context-sensitive counts, clock samples and CPU times depend on the
// phase it runs and on the build: the plain build shares time differently, as
// a build that inlines differently does), driven through random events --
// guard trials with noisy timings, phase changes, restarts, pins, stages that
// end with exit(n), optimized compiles that fail, phases that come back --
// with every mechanism on. After every stage the invariants are checked on
// what the service replied.
#include "service_harness.h"

#include <catch2/catch.hpp>
#include <map>
#include <random>
#include <set>
#include <sstream>

using namespace fdo;
using namespace fdo::daemon;
using namespace fdo::daemon::testing;
using fdo::test_support::TempDir;
using nlohmann::json;

namespace {

constexpr std::uint64_t kHashA = 0xa1, kHashB = 0xb2;

// What the fakes share with the test: the failures it injects.
struct World {
  std::atomic<bool> optimized_compiles_fail{false};
  std::atomic<std::uint64_t> seed{1};
  // The plain build runs faster than the profiled one: the guard keeps it,
  // and its stages (whose shares differ from the profile's) serve.
  std::atomic<bool> plain_faster{false};
};

// A compile worker for a program with functions phase_a and phase_b and the
// entry run(phase, exit): instrumented builds count both functions,
// cs_instrumented ones count phase_a after inlining; the object says its mode
// and whether it was compiled with context-sensitive counts.
FakeRunner::Fn compile_fn(World& world) {
  return [&world](const Message& req) -> Expected<Message> {
    Message out;
    const std::string op = job_op(req);
    if (op == "analyze") {
      out.header = {
          {"profile_key", blake3_hex(req.payload)},
          {"entries", {{{"name", "run"}, {"returns", "i64"}, {"params", {"i64", "i64"}}}}}};
      return out;
    }
    if (op != "compile") return make_error(Errc::invalid_argument, "unknown op " + op);
    FDO_TRY(CompileJobView job, compile_job_of(req));
    jit::CompileResult r;
    r.mode = job.job.mode;
    if (r.mode == CompileMode::optimized && world.optimized_compiles_fail)
      return make_error(Errc::compile, "LLVM ERROR: the optimizer fell over (injected)");
    r.profile_key = blake3_hex(job.program);
    r.entries.push_back(jit::EntryInfo{"run", "i64", {"i64", "i64"}, true});
    r.source_names = {{"phase_a", "phase_a"}, {"phase_b", "phase_b"}, {"run", "run"}};
    if (r.mode == CompileMode::instrumented) {
      r.counters_layout.push_back({"phase_a", kHashA, 2});
      r.counters_layout.push_back({"phase_b", kHashB, 2});
    }
    if (r.mode == CompileMode::cs_instrumented)
      r.counters_layout.push_back({"phase_a", kHashA | kCsHashFlag, 3});
    return compile_reply(r, "object:" + std::string(to_string(r.mode)));
  };
}

// An exec worker: slots[0] is the phase, slots[1] != 0 ends the entry with
// exit(0). Counts, samples and times follow the phase and the build.
FakeRunner::Fn exec_fn(World& world) {
  auto rng = std::make_shared<std::mt19937_64>(world.seed.load());
  auto mu = std::make_shared<std::mutex>();
  return [rng, mu, &world](const Message& req) -> Expected<Message> {
    FDO_TRY(FakeExecJob j, fake_exec_job(req));
    if (!j.job.object_size) return fake_exec_missing();
    const auto& slots = j.job.slots;
    const bool b = !slots.empty() && slots[0] != 0;
    const bool exits = slots.size() > 1 && slots[1] != 0;
    const std::string& object = j.object;
    const bool plain = object.starts_with("object:plain");
    double noise = 0;
    {
      std::lock_guard lk(*mu);
      noise = std::normal_distribution<double>(1.0, 0.05)(*rng);
    }
    // Instrumented builds are the slowest; the plain one slower than the
    // profiled one, or faster (plain_faster); noisy.
    const double base = object.starts_with("object:optimized") ? 1e6
                        : plain ? (world.plain_faster ? 0.8e6 : 1.3e6)
                                : 2e6;
    const auto cpu = static_cast<std::uint64_t>(base * std::max(0.5, noise));
    StageObservation obs;
    obs.ret = 7;
    obs.exec_ns = cpu;
    perf::Measurement& m = obs.measurement.emplace();
    m.wall_ns = cpu;
    m.process_cpu_ns = cpu;
    if (object.starts_with("object:instrumented")) {
      obs.counts["phase_a"] =
          b ? std::vector<std::uint64_t>{1, 10} : std::vector<std::uint64_t>{900, 100};
      obs.counts["phase_b"] =
          b ? std::vector<std::uint64_t>{100, 900} : std::vector<std::uint64_t>{1, 10};
    }
    if (object.starts_with("object:cs_instrumented")) obs.counts["phase_a"] = {30, 0, 70};
    // Clock samples: the hot phase's function, and the entry. The plain
    // build keeps more time in run (it inlines less), so its shares differ
    // from the profile's without any change of workload.
    const std::uint64_t hot = plain ? 55 : 90, cold = 5, in_run = plain ? 40 : 5;
    StageSampleReport& s = obs.samples.emplace();
    s.events.resize(1);
    s.events[0].name = "cpu-clock";
    s.events[0].status = perf::EventStatus::available;
    s.recorded = s.attributed = 100;
    s.functions["phase_a"]["cpu-clock"] = b ? cold : hot;
    s.functions["phase_b"]["cpu-clock"] = b ? hot : cold;
    s.functions["run"]["cpu-clock"] = in_run;
    s.outside_jit["cpu-clock"] = 0;
    obs.function_ranges = std::vector<jit::FunctionRange>{
        {"phase_a", 0x1000, 64}, {"phase_b", 0x2000, 64}, {"run", 0x3000, 64}};
    if (exits) obs.exited = 0;
    return fake_exec_ran(std::move(obs));
  };
}

Config soak_config() {
  Config c;
  c.tier_up = TierUp::sync;
  c.policy.min_stages = 3;
  c.policy.min_counts = 100;
  c.policy.cs_pgo_stages = 2;
  c.policy.time_share_window_stages = 3;
  c.policy.time_share_min_samples = 50;
  c.policy.time_share_drift_threshold = 0.3;
  c.policy.max_recompiles_per_hour = 12;
  c.sampling.frequency_hz = 250; // asks the (fake) worker to sample
  c.guard.min_stages = 6;
  c.guard.tune_min_stages = 40;
  c.guard.checkpoint_pairs = 4;
  return c;
}

struct Run {
  std::string log;
  int drift_reprofiles = 0, unchanged = 0, trials = 0, failures = 0, recoveries = 0;
  bool ok = true;
  void fail(const std::string& why) {
    ok = false;
    log += "VIOLATION: " + why + "\n";
  }
};

Run soak(std::uint64_t seed, int stages) {
  Run run;
  std::mt19937_64 rng(seed);
  auto chance = [&](double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; };
  World world;
  world.seed = seed;
  world.plain_faster = seed % 2 == 0;
  TempDir dir("fdo-lifecycle-soak");
  const Config config = soak_config();
  auto start = [&] {
    return std::make_unique<Harness>(config, exec_fn(world), nullptr, "soak-host",
                                     compile_fn(world), dir.str());
  };
  std::unique_ptr<Harness> h = start();
  auto reg = h->call("program.register", {{"ir", "two-phase program"}});
  REQUIRE(reg);
  const std::string id = (*reg)["program"], pk = (*reg)["profile_key"];

  int workload = 0;       // the phase the program runs now
  int profile_phase = -1; // the phase the current counts were made from
  // Whether the workload changed since the profile was last rewritten: a
  // served build's drift baseline may then be of another workload than the
  // profile's, and its drift a real one.
  bool moved_since_rewrite = false;
  bool pinned = false;
  int instrumented_run = 0, rewrites = 0, operator_rounds = 1;
  for (int i = 0; i < stages && run.ok; ++i) {
    // Random events.
    if (chance(0.015)) {
      workload = 1 - workload;
      moved_since_rewrite = true;
    }
    if (chance(0.006)) {
      h.reset(); // the daemon stops (a clean shutdown)
      h = start();
      run.log += "restart at " + std::to_string(i) + "\n";
    }
    if (rewrites > 0 && chance(0.006)) {
      pinned = !pinned;
      REQUIRE(h->call(pinned ? "profile.pin" : "profile.unpin", {{"profile_key", pk}}));
      if (!pinned) ++operator_rounds;
    }
    if (chance(0.01)) world.optimized_compiles_fail = true;
    if (chance(0.08)) world.optimized_compiles_fail = false;
    const bool exits = chance(0.1);

    auto r = h->call("execute",
                     {{"program", id}, {"entry", "run"}, {"args", {workload, exits ? 1 : 0}}});
    if (!r) {
      run.fail("stage " + std::to_string(i) + " failed");
      break;
    }
    const json& st = (*r)["stage"];
    if (exits && (*r)["exit_status"] != 0)
      run.fail("exit status lost at stage " + std::to_string(i));
    const std::string mode = st["mode"];
    const json& lc = st["lifecycle"];
    std::ostringstream line;
    line << i << " w" << workload << " " << mode << " v" << st["profile_version"] << " "
         << (lc.is_object() ? lc["phase"].get<std::string>() : "-") << " "
         << st["variant"]["role"].get<std::string>() << " | " << st["policy"].get<std::string>();
    if (lc.is_object())
      for (const json& t : lc["transitions"]) {
        line << " [" << t["from"].get<std::string>() << "->" << t["to"].get<std::string>() << " "
             << t["cause"].get<std::string>() << "]";
        const std::string cause = t["cause"];
        if (cause == "drift") {
          ++run.drift_reprofiles;
          if (t["from"] == "trial")
            run.fail("re-profiled from a trial at stage " + std::to_string(i));
          // A steady workload is never re-profiled: it is the profile's and
          // never moved since the profile was written.
          if (workload == profile_phase && !moved_since_rewrite)
            run.fail("re-profiled a steady workload at stage " + std::to_string(i));
        }
        if (cause == "counts_ready" || cause == "cs_counts_ready" || cause == "drift" ||
            cause == "reprofile_unchanged")
          moved_since_rewrite = false;
        if (cause == "counts_ready") profile_phase = workload;
        if (cause == "reprofile_unchanged") {
          ++run.unchanged;
          profile_phase = workload;
        }
        if (cause == "trial_started") ++run.trials;
        if (cause == "compile_failed") ++run.failures;
        if (cause == "compile_recovered") ++run.recoveries;
      }
    run.log += line.str() + "\n";
    // Sync tier-up: a stage never runs an earlier build.
    if (st["cache"]["outcome"] == "tier_up_pending")
      run.fail("a stale stage under sync tier-up at stage " + std::to_string(i));
    // Pinned is never rewritten.
    if (st["profile_rewritten"].is_object()) {
      ++rewrites;
      if (pinned) run.fail("a pinned profile was rewritten at stage " + std::to_string(i));
      // The new profile's optimized build may fail to compile for a while.
      if (chance(0.3)) world.optimized_compiles_fail = true;
    }
    // Progress: instrumented code does not run on and on.
    instrumented_run =
        !pinned && (mode == "instrumented" || mode == "cs_instrumented") ? instrumented_run + 1 : 0;
    if (instrumented_run > 12)
      run.fail("12 instrumented stages in a row at stage " + std::to_string(i));
  }
  // Rewrites within the run (all within an hour): the cap, plus the round of
  // the first profile and of each unpin that restarted one.
  if (rewrites > config.policy.max_recompiles_per_hour + 3 * operator_rounds)
    run.fail(std::to_string(rewrites) + " rewrites in an hour");
  return run;
}

} // namespace

TEST_CASE("lifecycle through the service: random events keep the invariants",
          "[service][lifecycle][model]") {
  int drift = 0, unchanged = 0, trials = 0, failures = 0, recoveries = 0;
  for (std::uint64_t seed = 1; seed <= 40; ++seed) {
    Run r = soak(seed, 260);
    INFO("seed " << seed << "\n" << r.log);
    REQUIRE(r.ok);
    drift += r.drift_reprofiles;
    unchanged += r.unchanged;
    trials += r.trials;
    failures += r.failures;
    recoveries += r.recoveries;
  }
  // The runs exercised what they are for.
  INFO(drift << " drift re-profiles, " << unchanged << " found unchanged, " << trials << " trials, "
             << failures << " compile failures, " << recoveries << " recoveries");
  CHECK(drift > 0);
  CHECK(unchanged > 0);
  CHECK(trials > 0);
  CHECK(failures > 0);
  CHECK(recoveries > 0);
}

TEST_CASE("lifecycle through the service: a plain build's trial stages cause no re-profile",
          "[service][lifecycle]") {
  // The failure this was built for: after a program settles, the guard's
  // trial of the plain build (which shares time differently) ran, its stages
  // went into the drift window, the program was re-profiled, the re-profile
  // counted the same counts and landed on an old instrumented object, and
  // every stage after was discarded as "tier-up pending".
  World world;
  world.plain_faster = true;
  TempDir dir("fdo-lifecycle-trial");
  Config c = soak_config();
  c.guard.tune_min_stages = 1000; // the plain build's trial alone
  Harness h(c, exec_fn(world), nullptr, "h", compile_fn(world), dir.str());
  auto reg = h.call("program.register", {{"ir", "steady program"}});
  REQUIRE(reg);
  const std::string id = (*reg)["program"];
  std::vector<std::string> phases, modes, roles;
  int rewrites = 0;
  for (int i = 0; i < 80; ++i) {
    auto r = h.call("execute", {{"program", id}, {"entry", "run"}, {"args", {0, 0}}});
    REQUIRE(r);
    const json& st = (*r)["stage"];
    phases.push_back(st["lifecycle"]["phase"]);
    modes.push_back(st["mode"]);
    roles.push_back(st["variant"]["role"]);
    if (st["profile_rewritten"].is_object()) ++rewrites;
    for (const json& t : st["lifecycle"]["transitions"])
      CHECK(t["cause"] != "drift");
  }
  // Optimized by stage 5 (3 instrumented, 2 context-sensitive), the plain
  // build won its trial and serves, and nothing went back to instrumented code.
  CHECK(modes[5] == "optimized");
  CHECK(std::count(phases.begin(), phases.end(), "trial") > 0);
  CHECK(modes.back() == "plain");
  for (std::size_t i = 5; i < modes.size(); ++i)
    CHECK(modes[i] != "instrumented");
  CHECK(rewrites == 2); // counts, then the context-sensitive round's
  auto ex = h.call("cache.explain", {{"program", id}});
  REQUIRE(ex);
  CHECK((*ex)["lifecycle"]["phase"] == "steady");
}

TEST_CASE("lifecycle through the service: the rate cap counts across a restart",
          "[service][lifecycle]") {
  World world;
  TempDir dir("fdo-lifecycle-cap");
  Config c = soak_config();
  c.guard.mode = GuardMode::off;
  // The first round takes 2 rewrites (counts, the CS round's); a re-profile's
  // round needs 3 more: past a cap of 4.
  c.policy.max_recompiles_per_hour = 4;
  auto start = [&] {
    return std::make_unique<Harness>(c, exec_fn(world), nullptr, "h", compile_fn(world), dir.str());
  };
  auto h = start();
  auto reg = h->call("program.register", {{"ir", "capped program"}});
  REQUIRE(reg);
  const std::string id = (*reg)["program"];
  auto run = [&](int phase) {
    auto r = h->call("execute", {{"program", id}, {"entry", "run"}, {"args", {phase, 0}}});
    REQUIRE(r);
    return (*r)["stage"];
  };
  for (int i = 0; i < 8; ++i)
    run(0);
  // Phase B: the drift is seen, but the hour has no room for its round.
  std::string policy;
  for (int i = 0; i < 6; ++i) {
    json st = run(1);
    CHECK(st["profile_rewritten"].is_null());
    policy = st["policy"];
  }
  CHECK_THAT(policy, Catch::Contains("rate cap") && Catch::Contains("2 rewrites in the last hour"));
  // A restarted daemon counts the same two rewrites from the profile's history.
  h.reset();
  h = start();
  for (int i = 0; i < 6; ++i) {
    json st = run(1);
    CHECK(st["profile_rewritten"].is_null());
    policy = st["policy"];
  }
  CHECK_THAT(policy, Catch::Contains("rate cap") && Catch::Contains("2 rewrites in the last hour"));
  auto ex = h->call("cache.explain", {{"program", id}});
  REQUIRE(ex);
  CHECK((*ex)["lifecycle"]["rewrites_last_hour"] == 2);
}
