// Guarded leases (engine.h, Guarding) over the fake daemon: each lease is a
// stage fdod's guard planned; the engine leases again when told to renew,
// switches between a trial's two arms without linking either twice, keeps
// only the arms a running trial needs, and tells which variant runs. Calls
// from several threads through native entries across those switches are all
// counted, each under the lease of the code that ran them (run under TSan
// with tools/test.sh --sanitize=thread).
#include "engine.h"
#include "fake_daemon.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <thread>

using namespace fdo;
using namespace fdo::inprocess;
using fdo::inprocess::testing::compiled;
using fdo::inprocess::testing::FakeDaemon;
using fdo::inprocess::testing::inc;
using fdo::inprocess::testing::options;
using nlohmann::json;

namespace {

using IncFn = std::int64_t (*)(std::int64_t);

json arm(const char* role, const char* name) {
  return {{"role", role},
          {"name", name},
          {"reason", std::string("fake trial: ") + name},
          {"counted", false},
          {"trial", nullptr}};
}

// A trial between the plain build (incumbent, "key-plain") and a profile's
// optimized build (candidate, "key-opt") in the order I C C I, then its
// verdict: the incumbent kept, served without renewing.
void script_trial(FakeDaemon& d) {
  const auto plain = compiled(CompileMode::plain, "key-plain", 3);
  const auto opt = compiled(CompileMode::plain, "key-opt", 3);
  std::lock_guard lk(d.mu);
  d.current = plain;
  d.plans = {{plain, arm("incumbent", "plain O2"), true},
             {opt, arm("candidate", "v3 profiled O2"), true},
             {opt, arm("candidate", "v3 profiled O2"), true},
             {plain, arm("incumbent", "plain O2"), true},
             {plain, arm("incumbent", "plain O2"), false}};
}

std::vector<std::string> loaded_of(const json& params) {
  std::vector<std::string> out;
  for (const json& k : params.value("loaded", json::array()))
    out.push_back(k);
  return out;
}

} // namespace

TEST_CASE("guarded lease: a trial's arms are switched per stage, each linked once, and "
          "only while the trial runs",
          "[inprocess][guarded]") {
  auto daemon = std::make_shared<FakeDaemon>();
  script_trial(*daemon);
  auto e = Engine::open(daemon, options(Flushing::manual));
  REQUIRE(e);
  Engine& engine = **e;
  CHECK(engine.generation() == 1);
  CHECK(engine.variant()["guarded"] == true);
  CHECK(engine.variant()["role"] == "incumbent");
  CHECK(engine.variant()["name"] == "plain O2");
  CHECK(daemon->lease_params.at(0)["guard"] == true);

  struct Step {
    std::uint64_t generation;
    const char* role;
    std::size_t kept;
    int loaded; // generations linked after the flush
  };
  // After each flush: the second plan (candidate, newly linked), the third
  // (the same code under a new lease), the fourth (the incumbent again, not
  // linked again), the verdict (the trial's other arm goes).
  const Step steps[] = {{2, "candidate", 1, 2},
                        {2, "candidate", 1, 2},
                        {1, "incumbent", 1, 2},
                        {1, "incumbent", 0, 1}};
  std::uint64_t calls = 0;
  for (const Step& step : steps) {
    for (std::uint64_t x = 0; x < 25; ++x, ++calls)
      REQUIRE(inc(engine, x) == x + 1);
    auto f = engine.flush();
    REQUIRE(f);
    CHECK(f->batches == 1);
    CHECK(f->renewed);
    CHECK(f->generation == step.generation);
    CHECK(engine.generation() == step.generation);
    CHECK(engine.variant()["role"] == step.role);
    CHECK(engine.arms_kept() == step.kept);
    CHECK(engine.generations_loaded() == step.loaded);
    CHECK(f->lagging.generations_held == 0); // kept arms are not "held"
  }
  // The leases asked for the objects already linked, by storage key.
  REQUIRE(daemon->lease_params.size() == 5);
  CHECK(loaded_of(daemon->lease_params[1]) == std::vector<std::string>{"key-plain"});
  CHECK(loaded_of(daemon->lease_params[2]) == std::vector<std::string>{"key-opt", "key-plain"});
  CHECK(loaded_of(daemon->lease_params[3]) == std::vector<std::string>{"key-opt", "key-plain"});
  // Every lease but the one running now was given back, in order; each lease
  // was submitted to, once per stage.
  CHECK(daemon->released == std::vector<std::uint64_t>{1, 2, 3, 4});
  CHECK(daemon->submitted_leases == std::vector<std::uint64_t>{1, 2, 3, 4});
  CHECK(engine.lease() == 5);
  CHECK(daemon->calls == calls);

  // Serving (no renew): a flush submits and keeps its lease.
  for (std::uint64_t x = 0; x < 5; ++x)
    REQUIRE(inc(engine, x) == x + 1);
  auto f = engine.flush();
  REQUIRE(f);
  CHECK_FALSE(f->renewed);
  CHECK(engine.lease() == 5);
  CHECK(daemon->lease_params.size() == 5);
}

TEST_CASE("guarded lease: an unchanged reply naming code the engine has not linked is an "
          "error that gives the lease back",
          "[inprocess][guarded]") {
  auto daemon = std::make_shared<FakeDaemon>();
  script_trial(*daemon);
  auto e = Engine::open(daemon, options(Flushing::manual));
  REQUIRE(e);
  Engine& engine = **e;
  REQUIRE(inc(engine, 1) == 2);
  {
    // The next plan (the candidate) is claimed loaded, and no object is sent.
    std::lock_guard lk(daemon->mu);
    daemon->claim_unchanged = true;
  }
  auto bad = engine.flush();
  REQUIRE_FALSE(bad);
  CHECK(bad.error().code() == Errc::corrupt);
  CHECK(bad.error().message().find("key-opt") != std::string::npos);
  CHECK(engine.generation() == 1); // the incumbent runs on, under its lease
  CHECK(engine.lease() == 1);
  REQUIRE(inc(engine, 2) == 3);
  std::lock_guard lk(daemon->mu);
  CHECK(daemon->released == std::vector<std::uint64_t>{2});
  CHECK(daemon->leases.size() == 1);
}

TEST_CASE("guarded lease: four threads with native entries across arm switches, every call "
          "counted",
          "[inprocess][guarded][native]") {
  auto daemon = std::make_shared<FakeDaemon>();
  {
    const auto a = compiled(CompileMode::plain, "key-a", 1);
    const auto b = compiled(CompileMode::instrumented, "key-b", 1);
    std::lock_guard lk(daemon->mu);
    daemon->current = a;
    // Forty stages alternating in blocks (I C C I), then served.
    for (int i = 0; i < 40; ++i) {
      const bool cand = (i % 4 == 1 || i % 4 == 2);
      daemon->plans.push_back(
          {cand ? b : a, cand ? arm("candidate", "b") : arm("incumbent", "a"), true});
    }
  }
  auto e = Engine::open(daemon, options(Flushing::manual));
  REQUIRE(e);
  Engine& engine = **e;
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> made{0}, wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      auto ct = engine.attach();
      if (!ct) {
        ++wrong;
        return;
      }
      CallerThread& me = **ct;
      std::int64_t x = t;
      std::uint64_t mine = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        for (int i = 0; i < 64; ++i, ++x, ++mine)
          if (reinterpret_cast<IncFn>(me.next(0))(x) != x + 1) ++wrong;
        me.quiescent();
      }
      made += mine;
    });
  std::uint64_t switches = 0;
  for (int i = 0; i < 40; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    auto f = engine.flush();
    REQUIRE(f);
    switches += f->swapped ? 1 : 0;
    CHECK(engine.generations_loaded() <= 3);
  }
  stop = true;
  for (std::thread& t : threads)
    t.join();
  REQUIRE(engine.flush());
  CHECK(wrong == 0);
  CHECK(switches >= 10);
  // Two objects linked in all, however often they were switched.
  CHECK(engine.generation() <= 2);
  std::lock_guard lk(daemon->mu);
  CHECK(daemon->calls == made.load());
}

TEST_CASE("guarded lease: every new lease of linked code is told to fdod's samplers",
          "[inprocess][guarded]") {
  auto daemon = std::make_shared<FakeDaemon>();
  script_trial(*daemon); // I C C I: new code, the same code, code linked already
  {
    std::lock_guard lk(daemon->mu);
    daemon->sampling = true;
  }
  auto e = Engine::open(daemon, options(Flushing::manual));
  REQUIRE(e);
  Engine& engine = **e;
  for (int stage = 0; stage < 3; ++stage) {
    REQUIRE(inc(engine, 5) == 6);
    REQUIRE(engine.flush());
  }
  std::lock_guard lk(daemon->mu);
  std::vector<std::uint64_t> told;
  for (const json& s : daemon->samples) {
    CHECK(s.contains("ranges")); // where the code of that lease lies
    told.push_back(s["lease"]);
  }
  CHECK(told == std::vector<std::uint64_t>{1, 2, 3, 4});
}
