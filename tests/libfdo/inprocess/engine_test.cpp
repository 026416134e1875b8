// The in-process engine over a fake daemon: program.lease hands out objects
// compiled here (a memfd, as fdod does), feedback.submit records what the
// engine reports and says when the test has "rewritten the profile". Checks
// linking and calling, the batches a flush sends, and the swap to a new
// generation while other threads keep calling (run it under TSan with
// tools/test.sh --sanitize=thread).
#include "engine.h"
#include "fake_daemon.h"
#include "fdo/jit/compiler.h"

#include <catch2/catch.hpp>
#include <mutex>
#include <sys/mman.h>
#include <thread>
#include <unistd.h>

using namespace fdo;
using namespace fdo::inprocess;
using nlohmann::json;

namespace {

using fdo::inprocess::testing::compiled;
using fdo::inprocess::testing::FakeDaemon;
using fdo::inprocess::testing::inc;
using fdo::inprocess::testing::options;

} // namespace

TEST_CASE("engine: links the leased object, counts calls and submits the counters", "[inprocess]") {
  auto daemon = std::make_shared<FakeDaemon>();
  daemon->current = compiled(CompileMode::instrumented, "key-a", 0);
  auto e = Engine::open(daemon, options(Flushing::manual));
  REQUIRE(e);
  Engine& engine = **e;
  CHECK(engine.generation() == 1);
  CHECK(engine.lease() == 1);
  CHECK(engine.entry_index("inc") == 0);
  CHECK_FALSE(engine.entry_index("dec"));
  CHECK(engine.entry_info(0).param_types == std::vector<std::string>{"i64"});
  for (std::uint64_t x = 0; x < 100; ++x)
    REQUIRE(inc(engine, x) == x + 1);
  auto f = engine.flush();
  REQUIRE(f);
  CHECK(f->batches == 1);
  CHECK_FALSE(f->stale);
  CHECK(daemon->calls == 100);
  CHECK(daemon->counted >= 100); // each call passes at least one counted edge
  // Nothing new: nothing sent.
  auto idle = engine.flush();
  REQUIRE(idle);
  CHECK(idle->batches == 0);
  CHECK(daemon->submits == 1);
  // Only what changed since the last flush goes out.
  const std::uint64_t before = daemon->counted;
  for (std::uint64_t x = 0; x < 10; ++x)
    inc(engine, x);
  REQUIRE(engine.flush());
  CHECK(daemon->calls == 110);
  CHECK(daemon->counted - before >= 10);
  CHECK(daemon->counted - before < 100);
  CHECK(engine.calls_submitted() == 110);
}

TEST_CASE("engine: a lease reply without the object fd is an error that gives the lease back",
          "[inprocess]") {
  auto daemon = std::make_shared<FakeDaemon>();
  daemon->current = compiled(CompileMode::plain, "key-a", 0);
  daemon->withhold_fd = true;
  auto e = Engine::open(daemon, options(Flushing::manual));
  REQUIRE_FALSE(e);
  CHECK(e.error().code() == Errc::corrupt);
  CHECK(daemon->released == std::vector<std::uint64_t>{1});
}

TEST_CASE("engine: a rewritten profile swaps in the new generation under concurrent calls",
          "[inprocess]") {
  auto daemon = std::make_shared<FakeDaemon>();
  daemon->current = compiled(CompileMode::instrumented, "key-a", 0);
  const bool background = GENERATE(false, true);
  auto e = Engine::open(daemon, options(background ? Flushing::background : Flushing::manual));
  REQUIRE(e);
  Engine& engine = **e;
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> wrong{0}, made{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 4; ++t)
    callers.emplace_back([&, t] {
      std::uint64_t x = static_cast<std::uint64_t>(t) * 1000;
      while (!stop.load(std::memory_order_relaxed)) {
        if (inc(engine, x) != x + 1) ++wrong;
        ++x;
        ++made;
      }
    });
  while (made.load() < 1000)
    std::this_thread::yield();
  if (!background) REQUIRE(engine.flush());
  {
    std::lock_guard lk(daemon->mu);
    daemon->current = compiled(CompileMode::plain, "key-b", 1);
  }
  // The next flush learns the profile moved on and swaps.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (engine.generation() != 2 && std::chrono::steady_clock::now() < until) {
    if (!background) {
      auto f = engine.flush();
      REQUIRE(f);
      if (f->swapped) CHECK(f->generation == 2);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  REQUIRE(engine.generation() == 2);
  CHECK(engine.storage_key() == "key-b");
  const std::uint64_t at_swap = made.load();
  while (made.load() < at_swap + 1000)
    std::this_thread::yield();
  stop = true;
  for (auto& t : callers)
    t.join();
  CHECK(wrong.load() == 0);
  // After this flush (serialised with the background one) the swap is done:
  // the old lease is released and the old code unloaded.
  REQUIRE(engine.flush());
  CHECK(engine.generations_loaded() == 1);
  {
    std::lock_guard lk(daemon->mu);
    CHECK(daemon->released == std::vector<std::uint64_t>{1});
  }
  CHECK(engine.last_error().empty());
  // Every call is reported, those still inside the old generation at the
  // swap included (the swap waits for them before its last batch).
  std::lock_guard lk(daemon->mu);
  CHECK(daemon->calls == made.load());
}

TEST_CASE("engine: a hold keeps its generation across a swap and reports its calls on release",
          "[inprocess]") {
  auto daemon = std::make_shared<FakeDaemon>();
  daemon->current = compiled(CompileMode::instrumented, "key-a", 0);
  auto e = Engine::open(daemon, options(Flushing::manual));
  REQUIRE(e);
  Engine& engine = **e;
  {
    Hold hold = engine.hold();
    for (std::uint64_t x = 0; x < 100; ++x) {
      std::uint64_t a = x, ret = 0;
      hold.call(0, &a, &ret);
      REQUIRE(ret == x + 1);
    }
    // Not handed over yet: nothing to send.
    auto f = engine.flush();
    REQUIRE(f);
    CHECK(f->batches == 0);
  }
  REQUIRE(engine.flush());
  CHECK(daemon->calls == 100);

  Hold old = engine.hold();
  {
    std::lock_guard lk(daemon->mu);
    daemon->current = compiled(CompileMode::plain, "key-b", 1);
  }
  inc(engine, 1); // a call to report, so the flush hears the news
  auto f = engine.flush();
  REQUIRE(f);
  CHECK(f->swapped);
  CHECK(engine.generation() == 2);
  // The hold still runs generation 1's code, which stays linked for it.
  CHECK(old.generation() == 1);
  CHECK(engine.generations_loaded() == 2);
  std::uint64_t a = 41, ret = 0;
  old.call(0, &a, &ret);
  CHECK(ret == 42);
  old = engine.hold(); // released at a safe point: the next hold runs the new code
  CHECK(old.generation() == 2);
  CHECK(engine.generations_loaded() == 1);
}

TEST_CASE("engine: reports its threads and code ranges where fdod samples", "[inprocess]") {
  auto daemon = std::make_shared<FakeDaemon>();
  daemon->current = compiled(CompileMode::instrumented, "key-a", 0);
  daemon->sampling = true;
  auto e = Engine::open(daemon, options(Flushing::manual));
  REQUIRE(e);
  Engine& engine = **e;
  CHECK(engine.mode() == "instrumented");
  CHECK(engine.profile_version() == 0);
  const json self = static_cast<std::int64_t>(::gettid());
  {
    std::lock_guard lk(daemon->mu);
    REQUIRE(daemon->samples.size() == 1);
    const json& first = daemon->samples[0];
    CHECK(first["lease"] == 1);
    CHECK(first["pid"] == ::getpid());
    CHECK(first["threads"] == json::array({self}));
    bool inc_range = false;
    for (const json& r : first["ranges"])
      inc_range = inc_range || (r["name"] == "inc" && r["size"].get<std::uint64_t>() > 0 &&
                                r["start"].get<std::uint64_t>() != 0);
    CHECK(inc_range);
  }
  // A thread that calls is told at the next flush, without the ranges again.
  json other;
  std::thread([&] {
    other = static_cast<std::int64_t>(::gettid());
    inc(engine, 1);
  }).join();
  inc(engine, 2); // a known thread adds nothing
  REQUIRE(engine.flush());
  {
    std::lock_guard lk(daemon->mu);
    REQUIRE(daemon->samples.size() == 2);
    CHECK(daemon->samples[1]["threads"] == json::array({self, other}));
    CHECK_FALSE(daemon->samples[1].contains("ranges"));
  }
  json state = engine.sampling();
  CHECK(state["available"] == true);
  CHECK(state["threads"] == 2);
  CHECK(state["last_submit"]["attributed"] == 1);
  // Nothing new: no program.sample.
  inc(engine, 3);
  REQUIRE(engine.flush());
  CHECK(daemon->samples.size() == 2);

  // A new generation's lease gets the threads and its own ranges.
  {
    std::lock_guard lk(daemon->mu);
    daemon->current = compiled(CompileMode::plain, "key-b", 1);
  }
  inc(engine, 4);
  auto f = engine.flush();
  REQUIRE(f);
  REQUIRE(f->swapped);
  CHECK(engine.mode() == "plain");
  CHECK(engine.profile_version() == 1);
  std::lock_guard lk(daemon->mu);
  REQUIRE(daemon->samples.size() == 3);
  CHECK(daemon->samples[2]["lease"] == 2);
  CHECK(daemon->samples[2]["threads"].size() == 2);
  CHECK(daemon->samples[2].contains("ranges"));
}

TEST_CASE("engine: where fdod does not sample, nothing is reported and the reason is kept",
          "[inprocess]") {
  auto daemon = std::make_shared<FakeDaemon>();
  daemon->current = compiled(CompileMode::instrumented, "key-a", 0);
  auto e = Engine::open(daemon, options(Flushing::manual));
  REQUIRE(e);
  std::thread([&] { inc(**e, 1); }).join();
  REQUIRE((*e)->flush());
  CHECK(daemon->samples.empty());
  json state = (*e)->sampling();
  CHECK(state["available"] == false);
  CHECK(state["reason"] == "fake sampling");
}
