// Native entries (engine.h, CallerThread) over the fake daemon: typed
// function pointers per thread, counts handed over at quiescent points, swaps
// picked up there under concurrent callers, and a thread that never reaches
// one: it keeps the older code linked and is reported, and nothing is
// unloaded under it (run under TSan with tools/test.sh --sanitize=thread).
#include "engine.h"
#include "fake_daemon.h"

#include <catch2/catch.hpp>
#include <condition_variable>
#include <llvm/Support/MD5.h>
#include <thread>

using namespace fdo;
using namespace fdo::inprocess;
using fdo::inprocess::testing::compiled;
using fdo::inprocess::testing::compiled_ir;
using fdo::inprocess::testing::FakeDaemon;
using fdo::inprocess::testing::inc;
using fdo::inprocess::testing::options;
using nlohmann::json;

namespace {

using IncFn = std::int64_t (*)(std::int64_t);

IncFn typed(const CallerThread& t) {
  return reinterpret_cast<IncFn>(t.entry(0));
}

void rewrite(FakeDaemon& d, const char* key, std::int64_t version) {
  std::lock_guard lk(d.mu);
  d.current = compiled(CompileMode::plain, key, version);
}

std::uint64_t reported_calls(FakeDaemon& d) {
  std::lock_guard lk(d.mu);
  return d.calls;
}

} // namespace

TEST_CASE(
    "native entries: a typed pointer runs the entry, its counts reach fdod at quiescent points",
    "[inprocess][native]") {
  auto daemon = std::make_shared<FakeDaemon>();
  daemon->current = compiled(CompileMode::instrumented, "key-a", 0);
  auto e = Engine::open(daemon, options(Flushing::manual));
  REQUIRE(e);
  Engine& engine = **e;
  auto t = engine.attach();
  REQUIRE(t);
  CallerThread& thread = **t;
  CHECK(thread.entry_count() == 1);
  CHECK(thread.generation() == 1);
  CHECK(thread.mode() == "instrumented");
  CHECK(thread.profile_version() == 0);
  IncFn f = typed(thread);
  REQUIRE(f != nullptr);
  for (std::int64_t x = -50; x < 50; ++x)
    REQUIRE(f(x) == x + 1);
  thread.count(0, 100, 2, 500);
  // Kept by the thread until its quiescent point.
  auto before = engine.flush();
  REQUIRE(before);
  CHECK(before->batches == 0);
  CHECK_FALSE(thread.quiescent()); // nothing swapped: the same pointers
  CHECK(typed(thread) == f);
  auto after = engine.flush();
  REQUIRE(after);
  CHECK(after->batches == 1);
  CHECK(reported_calls(*daemon) == 100);
  CHECK(daemon->counted >= 100); // the instrumented code counted its own edges

  // The per-call form counts each call itself; a thread's counts are handed
  // over when it is closed.
  for (std::int64_t x = 0; x < 10; ++x)
    REQUIRE(reinterpret_cast<IncFn>(thread.next(0))(x) == x + 1);
  std::uint64_t a = 41, ret = 0;
  thread.call(0, &a, &ret); // the thunk ABI through the same thread
  CHECK(ret == 42);
  t->reset();
  REQUIRE(engine.flush());
  CHECK(reported_calls(*daemon) == 111);
  CHECK(engine.lagging().threads == 0);
}

TEST_CASE("native entries: four threads pick up swaps at their quiescent points",
          "[inprocess][native]") {
  auto daemon = std::make_shared<FakeDaemon>();
  daemon->current = compiled(CompileMode::instrumented, "key-a", 0);
  auto e = Engine::open(daemon, options(Flushing::manual));
  REQUIRE(e);
  Engine& engine = **e;
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> wrong{0}, made{0}, switched{0};
  std::atomic<std::uint64_t> newest_seen{1};
  std::vector<std::thread> callers;
  for (int i = 0; i < 4; ++i)
    callers.emplace_back([&, i] {
      auto t = engine.attach();
      if (!t) {
        ++wrong;
        return;
      }
      CallerThread& thread = **t;
      IncFn f = typed(thread);
      std::int64_t x = i * 100000;
      const bool per_call = i % 2 == 1; // two threads batch, two call through next()
      while (!stop.load(std::memory_order_relaxed)) {
        if (per_call) {
          for (int k = 0; k < 100; ++k, ++x)
            if (reinterpret_cast<IncFn>(thread.next(0))(x) != x + 1) ++wrong;
        } else {
          for (int k = 0; k < 100; ++k, ++x)
            if (f(x) != x + 1) ++wrong;
          thread.count(0, 100, 0, 0);
          if (thread.quiescent()) {
            f = typed(thread);
            ++switched;
          }
        }
        made += 100;
        std::uint64_t g = thread.generation(), seen = newest_seen.load();
        while (g > seen && !newest_seen.compare_exchange_weak(seen, g)) {
        }
      }
    });
  const char* keys[] = {"key-b", "key-c", "key-d"};
  for (std::int64_t v = 1; v <= 3; ++v) {
    const std::uint64_t at = made.load();
    while (made.load() < at + 2000)
      std::this_thread::yield();
    rewrite(*daemon, keys[v - 1], v);
    auto f = engine.flush();
    REQUIRE(f);
    REQUIRE(f->swapped);
    CHECK(f->generation == static_cast<std::uint64_t>(v + 1));
  }
  // Every thread reaches the newest code at its next quiescent point.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while ((engine.lagging().threads != 0 || engine.generations_loaded() != 1) &&
         std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK(engine.lagging().threads == 0);
  CHECK(engine.generations_loaded() == 1); // every older generation unloaded
  CHECK(newest_seen.load() == 4);
  stop = true;
  for (auto& t : callers)
    t.join();
  CHECK(wrong.load() == 0);
  CHECK(switched.load() >= 2); // each batching thread saw at least one swap
  REQUIRE(engine.flush());
  // Calls are never counted twice; those of a generation made after its
  // last submit (its 50 ms grace) may be missing.
  CHECK(reported_calls(*daemon) <= made.load());
  CHECK(reported_calls(*daemon) > 0);
  std::lock_guard lk(daemon->mu);
  CHECK(daemon->released == std::vector<std::uint64_t>{1, 2, 3});
}

TEST_CASE("native entries: a thread that never reaches a quiescent point only delays unloading",
          "[inprocess][native]") {
  auto daemon = std::make_shared<FakeDaemon>();
  daemon->current = compiled(CompileMode::instrumented, "key-a", 0);
  EngineOptions o = options(Flushing::manual);
  o.lag_warning = std::chrono::milliseconds(0);
  auto e = Engine::open(daemon, o);
  REQUIRE(e);
  Engine& engine = **e;

  std::mutex mu;
  std::condition_variable cv;
  enum class Step { attached, swapped, called, quiesce, done } step = Step::attached;
  bool ready = false;
  std::int64_t old_result = 0;
  bool switched = false;
  std::uint64_t generation_after = 0;
  auto attached = engine.attach(); // handed to the thread, which alone uses it
  REQUIRE(attached);
  std::thread stuck([&, t = std::move(*attached)] {
    IncFn f = typed(*t);
    {
      std::unique_lock lk(mu);
      ready = true;
      cv.notify_all();
      cv.wait(lk, [&] { return step == Step::swapped; });
    }
    old_result = f(99); // the older code, still linked
    {
      std::unique_lock lk(mu);
      step = Step::called;
      cv.notify_all();
      cv.wait(lk, [&] { return step == Step::quiesce; });
    }
    switched = t->quiescent();
    generation_after = t->generation();
    std::unique_lock lk(mu);
    step = Step::done;
    cv.notify_all();
    cv.wait(lk, [&] { return step == Step::attached; }); // closed by the main thread's say
  });
  {
    std::unique_lock lk(mu);
    cv.wait(lk, [&] { return ready; });
  }
  inc(engine, 1); // a call to report, so the flush hears the news
  rewrite(*daemon, "key-b", 1);
  auto f = engine.flush();
  REQUIRE(f);
  REQUIRE(f->swapped);
  // The thread has not passed a quiescent point: generation 1 stays linked
  // for it, and the report says so.
  CHECK(engine.generations_loaded() == 2);
  CHECK(f->lagging.threads == 1);
  CHECK(f->lagging.generations_held == 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  LagReport lag = engine.lagging();
  CHECK(lag.threads == 1);
  CHECK(lag.oldest >= std::chrono::milliseconds(20));
  {
    std::unique_lock lk(mu);
    step = Step::swapped;
    cv.notify_all();
    cv.wait(lk, [&] { return step == Step::called; });
  }
  CHECK(old_result == 100);
  CHECK(engine.generations_loaded() == 2);
  {
    std::unique_lock lk(mu);
    step = Step::quiesce;
    cv.notify_all();
    cv.wait(lk, [&] { return step == Step::done; });
  }
  CHECK(switched);
  CHECK(generation_after == 2);
  CHECK(engine.generations_loaded() == 1); // unloaded at that quiescent point
  CHECK(engine.lagging().threads == 0);
  {
    std::unique_lock lk(mu);
    step = Step::attached;
    cv.notify_all();
  }
  stuck.join();
}

namespace {

// An indirect call whose target the first argument picks.
constexpr const char* kApplyIr = R"(
define i64 @twice(i64 %x) {
  %r = mul i64 %x, 2
  ret i64 %r
}
define i64 @thrice(i64 %x) {
  %r = mul i64 %x, 3
  ret i64 %r
}
define i64 @apply(i64 %sel, i64 %x) {
entry:
  %c = icmp eq i64 %sel, 0
  %f = select i1 %c, ptr @twice, ptr @thrice
  %r = call i64 %f(i64 %x)
  ret i64 %r
}
)";

std::string md5_hex(const char* name) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx",
                static_cast<unsigned long long>(llvm::MD5Hash(llvm::StringRef(name))));
  return buf;
}

} // namespace

TEST_CASE("in-process value profiles: each flush submits what the tables counted since the last",
          "[inprocess][native][values]") {
  auto daemon = std::make_shared<FakeDaemon>();
  daemon->current = compiled_ir(kApplyIr, CompileMode::instrumented, "key-a", 0);
  auto e = Engine::open(
      daemon,
      EngineOptions{"program-id", {"apply"}, Flushing::manual, std::chrono::milliseconds(5), 4});
  REQUIRE(e);
  auto t = (*e)->attach();
  REQUIRE(t);
  using ApplyFn = std::int64_t (*)(std::int64_t, std::int64_t);
  auto apply = reinterpret_cast<ApplyFn>((*t)->entry(0));
  for (std::int64_t x = 0; x < 100; ++x)
    REQUIRE(apply(0, x) == 2 * x);
  for (std::int64_t x = 0; x < 10; ++x)
    REQUIRE(apply(1, x) == 3 * x);
  (*t)->count(0, 110, 0, 0);
  (*t)->quiescent();
  REQUIRE((*e)->flush());
  const std::string twice = md5_hex("twice"), thrice = md5_hex("thrice");
  json first, second;
  {
    std::lock_guard lk(daemon->mu);
    REQUIRE(daemon->batches.size() == 1);
    first = daemon->batches.back();
  }
  INFO(first.dump());
  REQUIRE(first.contains("values"));
  const json& site = first["values"]["apply"]["indirect_calls"].at(0);
  CHECK(site.size() == 2);
  CHECK(std::count(site.begin(), site.end(), json::array({twice, 100})) == 1);
  CHECK(std::count(site.begin(), site.end(), json::array({thrice, 10})) == 1);
  // The selector's values, where the build profiles its arguments.
  if (first["values"]["apply"].contains("arg_values")) {
    const json& args = first["values"]["apply"]["arg_values"];
    for (const json& a : args)
      if (a["arg"] == 0) {
        CHECK(std::count(a["values"].begin(), a["values"].end(), json::array({0, 100})) == 1);
        CHECK(std::count(a["values"].begin(), a["values"].end(), json::array({1, 10})) == 1);
      }
  }

  // The next flush carries only what was counted since.
  for (std::int64_t x = 0; x < 50; ++x)
    REQUIRE(apply(0, x) == 2 * x);
  (*t)->count(0, 50, 0, 0);
  (*t)->quiescent();
  REQUIRE((*e)->flush());
  {
    std::lock_guard lk(daemon->mu);
    REQUIRE(daemon->batches.size() == 2);
    second = daemon->batches.back();
  }
  INFO(second.dump());
  CHECK(second["values"]["apply"]["indirect_calls"] ==
        json::array({json::array({json::array({twice, 50})})}));
  // Nothing called: nothing sent, values included.
  REQUIRE((*e)->flush());
  std::lock_guard lk(daemon->mu);
  CHECK(daemon->batches.size() == 2);
}
