// Background jobs (job_runner.h, JobPriority): stopped while a foreground job
// of the same pool runs, continued when none does, their wall limit counting
// only the time they could run.
#include "fdo/daemon/worker_pool.h"
#include "pool_test_util.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>
#include <optional>
#include <string>
#include <sys/types.h>
#include <thread>

using namespace fdo;
using namespace fdo::daemon;
using namespace fdo::daemon::testing;
using namespace std::chrono_literals;

namespace {

JobOptions with(JobPriority priority, std::chrono::milliseconds wall = 20s) {
  JobOptions o;
  o.limits.wall = wall;
  o.priority = priority;
  return o;
}

Message job(nlohmann::json header) {
  return Message{std::move(header), {}};
}

// The state letter of /proc/PID/stat ('R', 'S', 'T' stopped, ...); 0 when gone.
char state_of(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return 0;
  auto close_paren = line.rfind(')');
  if (close_paren == std::string::npos || close_paren + 2 >= line.size()) return 0;
  return line[close_paren + 2];
}

template <class Pred> bool wait_until(Pred pred, std::chrono::milliseconds within = 5s) {
  const auto end = std::chrono::steady_clock::now() + within;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(2ms);
  }
  return pred();
}

// The pid of a busy worker other than `other` (0: none yet).
pid_t busy_worker(const WorkerPool& pool, pid_t other = 0) {
  for (const WorkerInfo& w : pool.stats().workers)
    if (w.state == WorkerState::busy && w.pid != other) return w.pid;
  return 0;
}

// One job on its own thread, and how long run() took (a job may be stopped
// before its handler starts, so the worker's own clock can miss the stop).
struct Running {
  Running(WorkerPool& pool, Message request, JobOptions options)
      : thread([&pool, request = std::move(request), options = std::move(options), this] {
          const auto t0 = std::chrono::steady_clock::now();
          result = pool.run(request, options, nullptr);
          finished = std::chrono::steady_clock::now();
          elapsed = finished - t0;
        }) {}
  Expected<Message> get() {
    thread.join();
    return std::move(*result);
  }
  std::chrono::milliseconds ms() const {
    return std::chrono::duration_cast<std::chrono::milliseconds>(elapsed);
  }
  std::optional<Expected<Message>> result;
  std::chrono::steady_clock::duration elapsed{};
  std::chrono::steady_clock::time_point finished{};
  std::thread thread;
};

} // namespace

TEST_CASE("background jobs: stopped while a foreground job runs, continued after",
          "[worker_pool][background]") {
  auto pool = make_pool(test_options(2));
  Running background(*pool, job({{"op", "cpu_ms"}, {"ms", 400}}), with(JobPriority::background));
  pid_t bg = 0;
  REQUIRE(wait_until([&] { return (bg = busy_worker(*pool)) != 0; }));
  CHECK(state_of(bg) != 'T');
  Running foreground(*pool, job({{"op", "sleep_ms"}, {"ms", 600}}), with(JobPriority::foreground));
  CHECK(wait_until([&] { return state_of(bg) == 'T'; }));
  CHECK(pool->stats().background_stops == 1);
  auto fg = foreground.get();
  REQUIRE(fg);
  CHECK(wait_until([&] { return state_of(bg) != 'T'; }));
  auto r = background.get();
  REQUIRE(r);
  CHECK(r->header["pid"].get<pid_t>() == bg);
  // 400 ms of CPU around a stop of most of the foreground job's 600 ms.
  CHECK(background.ms() >= 800ms);
  CHECK(pool->stats().background_stops == 1);
  CHECK(pool->stats().jobs == 2);

  SECTION("foreground jobs alone stop nothing") {
    Running a(*pool, job({{"op", "sleep_ms"}, {"ms", 200}}), with(JobPriority::foreground));
    Running b(*pool, job({{"op", "sleep_ms"}, {"ms", 200}}), with(JobPriority::foreground));
    REQUIRE(a.get());
    REQUIRE(b.get());
    CHECK(pool->stats().background_stops == 1);
  }
}

TEST_CASE("background jobs: the wall limit counts only the time a job could run",
          "[worker_pool][background]") {
  auto pool = make_pool(test_options(2));
  // 300 ms of CPU within a 2 s limit, stopped for the foreground job's 2.5 s.
  Running background(*pool, job({{"op", "cpu_ms"}, {"ms", 300}}),
                     with(JobPriority::background, 2000ms));
  pid_t bg = 0;
  REQUIRE(wait_until([&] { return (bg = busy_worker(*pool)) != 0; }));
  Running foreground(*pool, job({{"op", "sleep_ms"}, {"ms", 2500}}), with(JobPriority::foreground));
  CHECK(wait_until([&] { return state_of(bg) == 'T'; }));
  REQUIRE(foreground.get());
  auto r = background.get();
  REQUIRE(r);
  CHECK(background.ms() >= 2000ms);
  CHECK(pool->stats().failures.timeout == 0);

  SECTION("a background job that runs past its limit is still killed") {
    auto looped = pool->run(job({{"op", "loop"}}), with(JobPriority::background, 300ms), nullptr);
    REQUIRE_FALSE(looped);
    CHECK(looped.error().code() == Errc::timeout);
    CHECK(pool->stats().failures.timeout == 1);
  }
}

TEST_CASE("background jobs: one started beside a foreground job waits stopped - a failed "
          "foreground job continues it",
          "[worker_pool][background]") {
  auto pool = make_pool(test_options(2));
  // The foreground job loops until its 700 ms wall limit kills its worker.
  Running foreground(*pool, job({{"op", "loop"}}), with(JobPriority::foreground, 700ms));
  pid_t fg = 0;
  REQUIRE(wait_until([&] { return (fg = busy_worker(*pool)) != 0; }));
  Running background(*pool, job({{"op", "cpu_ms"}, {"ms", 100}}), with(JobPriority::background));
  pid_t bg = 0;
  REQUIRE(wait_until([&] { return (bg = busy_worker(*pool, fg)) != 0; }));
  CHECK(wait_until([&] { return state_of(bg) == 'T'; }));
  auto killed = foreground.get();
  REQUIRE_FALSE(killed);
  CHECK(killed.error().code() == Errc::timeout);
  auto r = background.get();
  REQUIRE(r);
  CHECK(r->header["pid"].get<pid_t>() == bg);
  CHECK(background.ms() < 5000ms);
  CHECK(pool->stats().background_stops == 1);
  // The pool is whole again: both workers take jobs, none left stopped.
  CHECK(wait_until([&] { return pool->stats().live == 2; }));
  for (const WorkerInfo& w : pool->stats().workers)
    CHECK(state_of(w.pid) != 'T');
  auto again = pool->run(job({{"op", "echo"}}), with(JobPriority::background), nullptr);
  CHECK(again);
}

TEST_CASE("background jobs: under a per-tenant cap, a tenant's background job does not hold "
          "back its foreground one, and counts against other background ones",
          "[worker_pool][background]") {
  PoolOptions o = test_options(2);
  o.max_running_per_tenant = 1;
  auto made = WorkerPool::create(o);
  REQUIRE(made);
  WorkerPool& pool = **made;
  JobOptions bg = with(JobPriority::background), fg = with(JobPriority::foreground);
  bg.tenant = fg.tenant = "uid:1000";
  Running background(pool, job({{"op", "cpu_ms"}, {"ms", 600}}), bg);
  pid_t bg_pid = 0;
  REQUIRE(wait_until([&] { return (bg_pid = busy_worker(pool)) != 0; }));

  // A second background job of the tenant waits for the first: the cap holds.
  Running second(pool, job({{"op", "cpu_ms"}, {"ms", 50}}), bg);
  std::this_thread::sleep_for(100ms);
  CHECK(busy_worker(pool, bg_pid) == 0);
  CHECK(pool.stats().waiting == 1);

  // Its foreground job, queued behind that one, starts at once on the other
  // worker; the first background job is stopped meanwhile.
  Running foreground(pool, job({{"op", "sleep_ms"}, {"ms", 400}}), fg);
  pid_t fg_pid = 0;
  CHECK(wait_until([&] { return (fg_pid = busy_worker(pool, bg_pid)) != 0; }, 1s));
  CHECK(wait_until([&] { return state_of(bg_pid) == 'T'; }, 1s));
  CHECK(pool.stats().waiting == 1); // the second background job still waits
  auto f = foreground.get();
  REQUIRE(f);
  CHECK(f->header["pid"].get<pid_t>() == fg_pid);
  auto b = background.get();
  REQUIRE(b);
  CHECK(b->header["pid"].get<pid_t>() == bg_pid);
  CHECK(background.ms() >= 900ms); // 600 ms of CPU, stopped for most of 400
  // Whatever the host's load: the foreground job ran while the first
  // background job was stopped, not after it.
  CHECK(foreground.finished < background.finished);
  REQUIRE(second.get());
  CHECK(pool.stats().background_stops == 1);
}

TEST_CASE("background jobs: with every worker busy, a foreground job takes a background job's "
          "worker - the background job runs again, nothing fails",
          "[worker_pool][background]") {
  auto pool = make_pool(test_options(1));
  Running background(*pool, job({{"op", "cpu_ms"}, {"ms", 1500}}), with(JobPriority::background));
  pid_t bg_pid = 0;
  REQUIRE(wait_until([&] { return (bg_pid = busy_worker(*pool)) != 0; }));
  std::this_thread::sleep_for(100ms);
  Running foreground(*pool, job({{"op", "echo"}}), with(JobPriority::foreground));
  auto f = foreground.get();
  REQUIRE(f);
  CHECK(f->header["pid"].get<pid_t>() != bg_pid); // a fresh worker, reserved for it
  auto b = background.get();
  REQUIRE(b); // sent again once the worker was free: its caller sees no failure
  CHECK(b->header["pid"].get<pid_t>() != bg_pid);
  CHECK(foreground.finished < background.finished);
  const PoolStats st = pool->stats();
  CHECK(st.preemptions == 1);
  CHECK(st.failures.total() == 0);
  CHECK(st.jobs == 3); // the preempted send, the foreground job, the background job again

  SECTION("a foreground job with a worker free preempts nothing") {
    Running again(*pool, job({{"op", "cpu_ms"}, {"ms", 300}}), with(JobPriority::background));
    REQUIRE(again.get());
    REQUIRE(pool->run(job({{"op", "echo"}}), with(JobPriority::foreground), nullptr));
    CHECK(pool->stats().preemptions == 1);
  }
}

TEST_CASE("background jobs: one preempted once runs again as a foreground job, so it is not "
          "preempted a second time",
          "[worker_pool][background]") {
  auto pool = make_pool(test_options(1));
  Running background(*pool, job({{"op", "cpu_ms"}, {"ms", 1000}}), with(JobPriority::background));
  pid_t bg_pid = 0;
  REQUIRE(wait_until([&] { return (bg_pid = busy_worker(*pool)) != 0; }));
  std::this_thread::sleep_for(100ms);
  Running first(*pool, job({{"op", "echo"}}), with(JobPriority::foreground));
  REQUIRE(first.get());
  // The background job is sent again on the replacement worker, now as a
  // foreground job: a second foreground caller waits for it.
  pid_t again_pid = 0;
  REQUIRE(wait_until([&] { return (again_pid = busy_worker(*pool)) != 0; }));
  std::this_thread::sleep_for(100ms);
  Running second(*pool, job({{"op", "echo"}}), with(JobPriority::foreground));
  REQUIRE(second.get());
  auto b = background.get();
  REQUIRE(b);
  CHECK(b->header["pid"].get<pid_t>() == again_pid);
  CHECK(background.finished < second.finished);
  const PoolStats st = pool->stats();
  CHECK(st.preemptions == 1);
  CHECK(st.failures.total() == 0);
}

TEST_CASE("background jobs: one stopped for background_max_stopped in all runs on as a "
          "foreground one",
          "[worker_pool][background]") {
  PoolOptions o = test_options(2);
  o.background_max_stopped = 300ms;
  auto pool = make_pool(o);
  Running background(*pool, job({{"op", "cpu_ms"}, {"ms", 400}}), with(JobPriority::background));
  pid_t bg_pid = 0;
  REQUIRE(wait_until([&] { return (bg_pid = busy_worker(*pool)) != 0; }));
  Running foreground(*pool, job({{"op", "sleep_ms"}, {"ms", 2500}}), with(JobPriority::foreground));
  REQUIRE(wait_until([&] { return state_of(bg_pid) == 'T'; }, 1s));
  // Continued once it has been stopped for 300 ms, while the foreground job
  // still runs: it ends first.
  CHECK(wait_until([&] { return state_of(bg_pid) != 'T'; }, 2s));
  auto b = background.get();
  REQUIRE(b);
  CHECK(b->header["pid"].get<pid_t>() == bg_pid);
  REQUIRE(foreground.get());
  CHECK(background.finished < foreground.finished);
  const PoolStats st = pool->stats();
  CHECK(st.promotions == 1);
  CHECK(st.background_stops == 1);

  SECTION("a later background job is stopped as before") {
    Running fg(*pool, job({{"op", "sleep_ms"}, {"ms", 1000}}), with(JobPriority::foreground));
    REQUIRE(wait_until([&] { return busy_worker(*pool) != 0; }));
    Running bg(*pool, job({{"op", "cpu_ms"}, {"ms", 50}}), with(JobPriority::background));
    CHECK(wait_until([&] { return pool->stats().background_stops == 2; }, 1s));
    REQUIRE(bg.get());
    REQUIRE(fg.get());
  }
}

TEST_CASE("background jobs: raised while running (a caller now waits for it), a stopped job is "
          "continued and runs on as a foreground one",
          "[worker_pool][background]") {
  auto pool = make_pool(test_options(2));
  JobOptions bg = with(JobPriority::background);
  bg.urgency = std::make_shared<Urgency>();
  Running background(*pool, job({{"op", "cpu_ms"}, {"ms", 400}}), bg);
  pid_t bg_pid = 0;
  REQUIRE(wait_until([&] { return (bg_pid = busy_worker(*pool)) != 0; }));
  Running foreground(*pool, job({{"op", "sleep_ms"}, {"ms", 2500}}), with(JobPriority::foreground));
  REQUIRE(wait_until([&] { return state_of(bg_pid) == 'T'; }, 1s));
  bg.urgency->raise();
  CHECK(state_of(bg_pid) != 'T'); // continued by the raise itself
  auto b = background.get();
  REQUIRE(b);
  CHECK(b->header["pid"].get<pid_t>() == bg_pid);
  REQUIRE(foreground.get());
  CHECK(background.finished < foreground.finished);
  CHECK(pool->stats().promotions == 1);
  CHECK(pool->stats().background_stops == 1);
}

TEST_CASE("background jobs: raised while waiting for a worker (or before), a job starts as a "
          "foreground one",
          "[worker_pool][background]") {
  auto pool = make_pool(test_options(2));
  Running long_fg(*pool, job({{"op", "sleep_ms"}, {"ms", 2000}}), with(JobPriority::foreground));
  pid_t long_pid = 0;
  REQUIRE(wait_until([&] { return (long_pid = busy_worker(*pool)) != 0; }));
  JobOptions bg = with(JobPriority::background);
  bg.urgency = std::make_shared<Urgency>();
  SECTION("raised while it waits") {
    Running short_fg(*pool, job({{"op", "sleep_ms"}, {"ms", 300}}), with(JobPriority::foreground));
    REQUIRE(wait_until([&] { return busy_worker(*pool, long_pid) != 0; }));
    Running background(*pool, job({{"op", "cpu_ms"}, {"ms", 300}}), bg);
    REQUIRE(wait_until([&] { return pool->stats().waiting == 1; }));
    bg.urgency->raise();
    REQUIRE(short_fg.get());
    REQUIRE(background.get());
    REQUIRE(long_fg.get());
    CHECK(background.finished < long_fg.finished); // never stopped behind it
  }
  SECTION("raised before it was sent") {
    bg.urgency->raise();
    Running background(*pool, job({{"op", "cpu_ms"}, {"ms", 300}}), bg);
    REQUIRE(background.get());
    REQUIRE(long_fg.get());
    CHECK(background.finished < long_fg.finished);
  }
  CHECK(pool->stats().background_stops == 0);
  CHECK(pool->stats().promotions == 0); // foreground from the start
}
