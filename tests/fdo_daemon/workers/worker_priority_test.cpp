// A worker's CPU priority (`--nice N`, fdod's compile_nice): its threads, and
// those its jobs start, run under SCHED_BATCH at that nice value; without the
// flag nothing changes; a bad value stops the worker before its handshake.
#include "fdo/daemon/worker_loop.h"
#include "fdo/daemon/worker_pool.h"
#include "pool_test_util.h"

#include <catch2/catch.hpp>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

using namespace fdo;
using namespace fdo::daemon;
using namespace fdo::daemon::testing;

namespace {

// {"handler": {nice, policy}, "started": {nice, policy}} from the worker.
nlohmann::json priority_of(WorkerPool& pool) {
  auto r = pool.run(Message{{{"op", "priority"}}, {}});
  if (!r) FAIL(r.error().describe());
  return r->header;
}

} // namespace

TEST_CASE("worker priority: --nice is parsed and checked", "[worker_loop]") {
  {
    const char* argv[] = {"w", "--role", "compile", "--fd", "3"};
    auto nice = worker_nice_from_args(5, argv);
    REQUIRE(nice);
    CHECK(*nice == 0);
  }
  {
    const char* argv[] = {"w", "--nice", "19", "--fd", "3"};
    auto nice = worker_nice_from_args(5, argv);
    REQUIRE(nice);
    CHECK(*nice == 19);
  }
  for (const char* bad : {"20", "-1", "5x", ""}) {
    INFO(bad);
    const char* argv[] = {"w", "--nice", bad};
    auto nice = worker_nice_from_args(3, argv);
    REQUIRE_FALSE(nice);
    CHECK(nice.error().code() == Errc::invalid_argument);
    CHECK_THAT(nice.error().message(), Catch::Contains("not a nice value from 0 to 19"));
  }
  {
    const char* argv[] = {"w", "--nice"};
    CHECK_FALSE(worker_nice_from_args(2, argv));
  }
  CHECK(lower_cpu_priority(0)); // changes nothing, so safe in the test process
}

TEST_CASE("worker priority: a worker started with --nice runs its jobs below the daemon",
          "[worker_pool]") {
  auto o = test_options();
  o.worker_args = {"--role", "compile", "--nice", "7"};
  o.name = "compile";
  auto pool = make_pool(o);
  const nlohmann::json p = priority_of(*pool);
  INFO(p.dump());
  // Raising a priority needs privilege: where the tests already run above
  // nice 7 without it, the worker stays at their nice value.
  errno = 0;
  const int ours = ::getpriority(PRIO_PROCESS, 0);
  const int expected = ours > 7 && ::geteuid() != 0 ? ours : 7;
  for (const char* which : {"handler", "started"}) {
    CHECK(p[which]["nice"] == expected);
    CHECK(p[which]["policy"] == SCHED_BATCH);
  }
}

TEST_CASE("worker priority: without --nice a worker keeps the daemon's priority", "[worker_pool]") {
  auto pool = make_pool(test_options());
  const nlohmann::json p = priority_of(*pool);
  INFO(p.dump());
  errno = 0;
  const int ours = ::getpriority(PRIO_PROCESS, 0);
  for (const char* which : {"handler", "started"}) {
    CHECK(p[which]["nice"] == ours);
    CHECK(p[which]["policy"] == ::sched_getscheduler(0));
  }
}

TEST_CASE("worker priority: a bad --nice stops the worker before its handshake", "[worker_pool]") {
  auto o = test_options();
  o.worker_args = {"--role", "compile", "--nice", "high"};
  auto p = WorkerPool::create(o);
  REQUIRE_FALSE(p);
  CHECK(p.error().code() == Errc::unavailable);
  CHECK_THAT(p.error().message(), Catch::Contains("exited with status 64"));
}
