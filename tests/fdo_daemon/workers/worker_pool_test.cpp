// WorkerPool against real worker processes (fdo_test_worker): every failure
// kind gives the right Errc and a message naming what happened, the pool
// replaces dead workers and keeps serving, and nothing is left behind.
#include "fdo/daemon/worker_pool.h"
#include "pool_test_util.h"
#include "support/sanitizer.h"
#include "support/skip.h"
#include "support/temp_dir.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

using namespace fdo;
using namespace fdo::daemon;
using namespace fdo::daemon::testing;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

Message job(nlohmann::json header, std::string payload = {}) {
  return Message{std::move(header), std::move(payload)};
}

long echo_pid(WorkerPool& pool) {
  auto r = pool.run(job({{"op", "echo"}}, "ping"));
  if (!r) FAIL(r.error().describe());
  CHECK(r->payload == "ping");
  return r->header["pid"].get<long>();
}

JobLimits limits_with(std::chrono::milliseconds wall, std::uint64_t address_space = 0) {
  JobLimits l;
  l.wall = wall;
  l.address_space_bytes = address_space;
  return l;
}

// Gone, or a zombie waiting for someone else (init) to reap it.
bool process_gone(pid_t pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  auto close_paren = line.rfind(')');
  return close_paren != std::string::npos && close_paren + 2 < line.size() &&
         line[close_paren + 2] == 'Z';
}

bool eventually_gone(pid_t pid) {
  for (int i = 0; i < 500; ++i) {
    if (process_gone(pid)) return true;
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

// True when this process has no children at all, alive or zombie.
bool no_children() {
  return ::waitpid(-1, nullptr, WNOHANG) == -1 && errno == ECHILD;
}

template <class Pred> bool wait_until(Pred pred) {
  for (int i = 0; i < 1000; ++i) {
    if (pred()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return false;
}

struct TempDir : fdo::test_support::TempDir {
  TempDir() : fdo::test_support::TempDir("fdo-worker-test") {}
};

} // namespace

TEST_CASE("worker_pool: echo round trip through a worker process", "[worker_pool]") {
  auto pool = make_pool(test_options(2));
  std::string payload("\0\x01\x02binary\xff", 10);
  auto r = pool->run(job({{"op", "echo"}, {"k", "v"}}, payload));
  REQUIRE(r);
  CHECK(r->header["op"] == "echo");
  CHECK(r->header["role"] == "exec");
  CHECK(r->header["request"]["k"] == "v");
  CHECK(r->payload == payload);
  long pid = r->header["pid"].get<long>();
  CHECK(pid != ::getpid());
  auto s = pool->stats();
  CHECK(s.size == 2);
  CHECK(s.live == 2);
  CHECK(s.jobs == 1);
  CHECK(s.succeeded == 1);
  std::set<long> pids;
  for (const auto& w : s.workers)
    pids.insert(w.pid);
  CHECK(pids.count(pid) == 1);
  CHECK(pids.size() == 2);
}

TEST_CASE("worker_pool: handler errors come back unchanged and keep the worker", "[worker_pool]") {
  auto pool = make_pool(test_options());
  long before = echo_pid(*pool);
  auto r = pool->run(job({{"op", "fail"}, {"code", "not_found"}, {"message", "no program abc"}}));
  REQUIRE_FALSE(r);
  CHECK(r.error().code() == Errc::not_found);
  CHECK(r.error().message() == "no program abc");
  auto t = pool->run(job({{"op", "throw"}}));
  REQUIRE_FALSE(t);
  CHECK(t.error().code() == Errc::internal);
  CHECK_THAT(t.error().message(), Catch::Contains("boom from the test worker"));
  CHECK(echo_pid(*pool) == before);
  auto s = pool->stats();
  CHECK(s.failures.handler_error == 2);
  CHECK(s.restarts == 0);
}

TEST_CASE("worker_pool: crashes name the signal and the worker is replaced", "[worker_pool]") {
  struct Case {
    const char* op;
    Errc code;
    const char* text;
  };
  const Case cases[] = {
      {"segv", Errc::crashed, "program crashed: SIGSEGV (segmentation fault)"},
      {"abort", Errc::crashed, "program crashed: SIGABRT (aborted)"},
      {"fpe", Errc::crashed, "program crashed: SIGFPE (arithmetic exception"},
      {"trap", Errc::crashed, "program crashed: SIGILL (illegal instruction)"},
      {"exit", Errc::crashed, "exec worker exited unexpectedly with status 3"},
  };
  auto pool = make_pool(test_options());
  std::uint64_t restarts = 0;
  for (const auto& c : cases) {
    INFO(c.op);
    long before = echo_pid(*pool);
    auto r = pool->run(job({{"op", c.op}}));
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == c.code);
    CHECK_THAT(r.error().message(), Catch::Contains(c.text));
    CHECK_THAT(r.error().message(), Catch::Contains("pid " + std::to_string(before)));
    long after = echo_pid(*pool); // waits for the replacement
    CHECK(after != before);
    CHECK(process_gone(static_cast<pid_t>(before)));
    ++restarts;
    CHECK(pool->stats().restarts == restarts);
  }
  auto s = pool->stats();
  CHECK(s.failures.crashed == 4);
  CHECK(s.failures.exited == 1);
  CHECK(s.live == 1);
}

TEST_CASE("worker_pool: a worker that died while idle is replaced without failing a job",
          "[worker_pool]") {
  auto pool = make_pool(test_options());
  long before = echo_pid(*pool);
  REQUIRE(::kill(static_cast<pid_t>(before), SIGKILL) == 0);
  REQUIRE(eventually_gone(static_cast<pid_t>(before))); // a zombie, not yet reaped
  long after = echo_pid(*pool);
  CHECK(after != before);
  auto s = pool->stats();
  CHECK(s.idle_deaths == 1);
  CHECK(s.failures.total() == 0);
  CHECK(s.jobs == 2);
}

TEST_CASE("worker_pool: the wall-time limit kills a looping job", "[worker_pool]") {
  auto pool = make_pool(test_options());
  long before = echo_pid(*pool);
  auto start = std::chrono::steady_clock::now();
  auto r = pool->run(job({{"op", "loop"}}), limits_with(300ms));
  auto elapsed = std::chrono::steady_clock::now() - start;
  REQUIRE_FALSE(r);
  CHECK(r.error().code() == Errc::timeout);
  CHECK(r.error().message() == "exec worker exceeded the wall-time limit of 300 ms (killed)");
  CHECK(elapsed >= 300ms);
  CHECK(elapsed < 300ms + 5s); // killed, not left running
  CHECK(process_gone(static_cast<pid_t>(before)));
  CHECK(echo_pid(*pool) != before);
  CHECK(pool->stats().failures.timeout == 1);
}

TEST_CASE("worker_pool: RLIMIT_CPU backs up the wall limit", "[worker_pool]") {
  auto pool = make_pool(test_options());
  JobLimits l = limits_with(30s);
  l.cpu_seconds = 1;
  auto r = pool->run(job({{"op", "loop"}}), l);
  REQUIRE_FALSE(r);
  CHECK(r.error().code() == Errc::timeout);
  CHECK_THAT(r.error().message(), Catch::Contains("exceeded the CPU-time limit of 1 s (SIGXCPU"));
  CHECK(pool->stats().failures.cpu_limit == 1);
  echo_pid(*pool);
}

TEST_CASE("worker_pool: memory-hungry jobs report the memory limit", "[worker_pool]") {
  if (fdo::test_support::sanitizer_build()) {
    // RLIMIT_AS cannot limit a sanitizer build: its shadow memory reserves
    // terabytes of address space, and its allocator aborts instead of failing.
    FDO_SKIP("skipped in a sanitizer build: RLIMIT_AS memory limits do not apply there");
  }
  auto pool = make_pool(test_options());
  SECTION("allocation failure caught in the worker: the worker survives") {
    long before = echo_pid(*pool);
    auto r = pool->run(job({{"op", "alloc"}, {"mode", "new"}}), limits_with(20s, 64 * kMiB));
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::resource_exhausted);
    CHECK(r.error().message() == "exceeded the memory limit of 64 MiB (allocation failed)");
    CHECK(echo_pid(*pool) == before);
  }
  SECTION("unchecked malloc dies of SIGSEGV at the limit: reported as memory, replaced") {
    long before = echo_pid(*pool);
    auto r = pool->run(job({{"op", "alloc"}, {"mode", "malloc"}}), limits_with(20s, 64 * kMiB));
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::resource_exhausted);
    CHECK_THAT(r.error().message(),
               Catch::Contains("program exceeded the memory limit of 64 MiB in the exec worker"));
    CHECK_THAT(r.error().message(), Catch::Contains("SIGSEGV"));
    CHECK(echo_pid(*pool) != before);
    CHECK(pool->stats().failures.memory == 1);
  }
  SECTION("a crash far below the limit is still a crash") {
    auto r = pool->run(job({{"op", "segv"}}), limits_with(20s, 64 * kMiB));
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::crashed);
  }
}

TEST_CASE("worker_pool: output limits hold on both sides of the channel", "[worker_pool]") {
  auto pool = make_pool(test_options());
  long before = echo_pid(*pool);
  JobLimits l = limits_with(20s);
  l.max_output_bytes = 1 * kMiB;
  SECTION("the worker refuses to send too much and stays") {
    auto r = pool->run(job({{"op", "big_output"}, {"bytes", 2 * kMiB}}), l);
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::resource_exhausted);
    CHECK_THAT(r.error().message(), Catch::Contains("exceeds the limit of 1 MiB"));
    CHECK(echo_pid(*pool) == before);
    auto fits = pool->run(job({{"op", "big_output"}, {"bytes", 512 * kKiB}}), l);
    REQUIRE(fits);
    CHECK(fits->payload.size() == 512 * kKiB);
  }
  SECTION("a worker claiming a huge answer is killed before anything is allocated") {
    auto r = pool->run(job({{"op", "lie"}}), l);
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::resource_exhausted);
    CHECK_THAT(r.error().message(), Catch::Contains("exceeds the output limit of 1 MiB"));
    CHECK(echo_pid(*pool) != before);
    CHECK(pool->stats().failures.output_too_large == 1);
  }
  SECTION("garbage on the channel is a protocol error") {
    auto r = pool->run(job({{"op", "garbage"}}), l);
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::internal);
    CHECK_THAT(r.error().message(), Catch::Contains("broke the protocol"));
    CHECK_THAT(r.error().message(), Catch::Contains("bad message magic"));
    CHECK(echo_pid(*pool) != before);
    CHECK(pool->stats().failures.protocol == 1);
  }
  SECTION("bytes after a reply: the reply stands, the worker is replaced") {
    auto r = pool->run(job({{"op", "trailing"}}), l);
    REQUIRE(r);
    CHECK(r->header["op"] == "trailing");
    CHECK(r->payload == "done");
    CHECK(echo_pid(*pool) != before);
    CHECK(pool->stats().retired == 1);
    CHECK(pool->stats().failures.protocol == 0);
  }
  SECTION("a header nested a million deep is refused before decoding") {
    auto r = pool->run(job({{"op", "evil_header"}, {"kind", "deep"}}), l);
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::internal);
    CHECK_THAT(r.error().message(), Catch::Contains("broke the protocol"));
    CHECK_THAT(r.error().message(), Catch::Contains("nests deeper than 64 levels"));
    CHECK(echo_pid(*pool) != before);
    CHECK(pool->stats().failures.protocol == 1);
  }
  SECTION("a header string longer than the header is refused") {
    auto r = pool->run(job({{"op", "evil_header"}, {"kind", "long_string"}}), l);
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::internal);
    CHECK_THAT(r.error().message(), Catch::Contains("broke the protocol"));
    CHECK_THAT(r.error().message(), Catch::Contains("text string runs past the end"));
    CHECK(echo_pid(*pool) != before);
    CHECK(pool->stats().failures.protocol == 1);
  }
}

TEST_CASE("worker_pool: a reply its caller's check refuses is a protocol error - the worker goes",
          "[worker_pool]") {
  auto pool = make_pool(test_options());
  long before = echo_pid(*pool);
  JobOptions o;
  o.limits = limits_with(20s);
  int checked = 0;
  o.check_reply = [&](const Message& m) -> Status {
    ++checked;
    if (m.payload == "good") return ok();
    return make_error(Errc::corrupt, "exec reply: truncated: a u32 needs 4 byte(s), 2 left");
  };
  // A reply the check accepts: the worker stays.
  auto fine = pool->run(job({{"op", "echo"}}, "good"), o, nullptr);
  REQUIRE(fine);
  CHECK(checked == 1);
  CHECK(echo_pid(*pool) == before);
  // One it refuses: the job fails as the worker's protocol violation, and the
  // worker is killed and replaced, never given another job.
  auto r = pool->run(job({{"op", "echo"}}, "bad"), o, nullptr);
  REQUIRE_FALSE(r);
  CHECK(checked == 2);
  CHECK(r.error().code() == Errc::internal);
  CHECK_THAT(r.error().message(), Catch::Contains("broke the protocol") &&
                                      Catch::Contains("its reply: exec reply: truncated"));
  CHECK(pool->stats().failures.protocol == 1);
  CHECK(echo_pid(*pool) != before);
}

TEST_CASE("worker_pool: a job header too deep to encode is refused - the worker stays",
          "[worker_pool]") {
  auto pool = make_pool(test_options());
  long before = echo_pid(*pool);
  nlohmann::json deep = nlohmann::json::array();
  for (std::size_t i = 0; i < kMaxHeaderDepth; ++i)
    deep = nlohmann::json::array({std::move(deep)});
  auto r = pool->run(job({{"op", "echo"}, {"deep", deep}}));
  REQUIRE_FALSE(r);
  CHECK(r.error().code() == Errc::invalid_argument);
  CHECK_THAT(r.error().message(), Catch::Contains("nests deeper than 64 levels"));
  CHECK(echo_pid(*pool) == before);
  auto stats = pool->stats();
  CHECK(stats.failures.protocol == 0);
  CHECK(stats.failures.crashed == 0);
  CHECK(stats.failures.handler_error == 1);
}

TEST_CASE("worker_pool: 8 threads x 20 jobs on 2 workers all succeed", "[worker_pool]") {
  auto pool = make_pool(test_options(2));
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        // Built by appending: GCC 12 warns falsely (-Wrestrict) on "lit" + std::string.
        std::string payload("t");
        payload += std::to_string(t);
        payload += "-j";
        payload += std::to_string(i);
        payload.append(static_cast<std::size_t>(t * 1000 + i), 'z');
        auto r = pool->run(job({{"op", "echo"}, {"t", t}, {"i", i}}, payload));
        if (r && r->payload == payload && r->header["request"]["t"] == t &&
            r->header["request"]["i"] == i)
          ++ok;
      }
    });
  }
  for (auto& th : threads)
    th.join();
  CHECK(ok == 160);
  auto s = pool->stats();
  CHECK(s.jobs == 160);
  CHECK(s.succeeded == 160);
  CHECK(s.failures.total() == 0);
  CHECK(s.restarts == 0);
  CHECK(s.workers[0].jobs + s.workers[1].jobs == 160);
}

TEST_CASE("worker_pool: failures under concurrency do not disturb other callers", "[worker_pool]") {
  auto pool = make_pool(test_options(2));
  std::atomic<int> echo_ok{0}, crash_ok{0};
  std::thread crasher([&] {
    for (int i = 0; i < 5; ++i) {
      auto r = pool->run(job({{"op", "segv"}}));
      if (!r && r.error().code() == Errc::crashed) ++crash_ok;
    }
  });
  std::vector<std::thread> good;
  for (int t = 0; t < 3; ++t)
    good.emplace_back([&] {
      for (int i = 0; i < 20; ++i) {
        auto r = pool->run(job({{"op", "echo"}}, "x"));
        if (r && r->payload == "x") ++echo_ok;
      }
    });
  crasher.join();
  for (auto& th : good)
    th.join();
  CHECK(crash_ok == 5);
  CHECK(echo_ok == 60);
  CHECK(wait_until([&] { return pool->stats().restarts == 5 && pool->stats().live == 2; }));
}

TEST_CASE("worker_pool: the wait queue is bounded and waiting is bounded", "[worker_pool]") {
  auto o = test_options(1);
  o.max_waiting = 1;
  o.queue_timeout = 1000ms;
  auto pool = make_pool(o);
  // Catch's assertions are not thread-safe: threads keep results, the test checks them.
  std::atomic<bool> busy_ok{false};
  std::thread busy([&] {
    busy_ok = pool->run(job({{"op", "sleep_ms"}, {"ms", 2500}})).has_value();
  });
  REQUIRE(wait_until([&] { return pool->stats().workers[0].state == WorkerState::busy; }));

  // One caller may wait; it times out after queue_timeout.
  std::optional<Expected<Message>> waited;
  std::thread waiter([&] { waited = pool->run(job({{"op", "echo"}})); });
  REQUIRE(wait_until([&] { return pool->stats().waiting == 1; }));
  // A second waiting caller is refused at once.
  auto refused = pool->run(job({{"op", "echo"}}));
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code() == Errc::resource_exhausted);
  CHECK_THAT(refused.error().message(), Catch::Contains("queue is full"));
  waiter.join();
  REQUIRE(waited.has_value());
  REQUIRE_FALSE(*waited);
  CHECK(waited->error().code() == Errc::timeout);
  CHECK_THAT(waited->error().message(),
             Catch::Contains("no exec worker became free within 1000 ms"));
  busy.join();
  CHECK(busy_ok);
  auto s = pool->stats();
  CHECK(s.failures.queue_full == 1);
  CHECK(s.failures.queue_timeout == 1);
  echo_pid(*pool);
}

TEST_CASE("worker_pool: invalid limits are refused without using a worker", "[worker_pool]") {
  auto pool = make_pool(test_options());
  auto r = pool->run(job({{"op", "echo"}}), limits_with(0ms));
  REQUIRE_FALSE(r);
  CHECK(r.error().code() == Errc::invalid_argument);
  CHECK(pool->stats().jobs == 0);
}

TEST_CASE("worker_pool: workers inherit no stray descriptors and get per-job limits",
          "[worker_pool]") {
  // Descriptors the daemon might hold without CLOEXEC: a pipe and a socket.
  int leak[2];
  REQUIRE(::pipe(leak) == 0);
  int leaky_socket = ::socket(AF_UNIX, SOCK_STREAM, 0);
  REQUIRE(leaky_socket >= 0);
  auto pool = make_pool(test_options());
  auto r = pool->run(job({{"op", "fds"}}));
  REQUIRE(r);
  // stdin, stdout, stderr, the channel, and the daemon's log for the worker's own lines;
  // then only what the worker loop opened itself: /proc/self/statm and /proc/self/task,
  // kept open for its per-job checks.
  CHECK(r->header["fds"] == nlohmann::json::array({0, 1, 2, 3, 4, 5, 6}));
  const std::string own = "/proc/" + r->header["pid"].dump();
  CHECK(r->header["targets"][5] == own + "/statm");
  CHECK(r->header["targets"][6] == own + "/task");

  rlimit mine{};
  ::getrlimit(RLIMIT_AS, &mine);
  auto l = pool->run(job({{"op", "limits"}}), limits_with(5s, 128 * kMiB));
  REQUIRE(l);
  CHECK(l->header["core_soft"] == 0);
  CHECK(l->header["as_soft"].get<std::uint64_t>() > 128 * kMiB);
  CHECK(l->header["as_hard"].get<std::uint64_t>() == std::uint64_t(mine.rlim_max));
  CHECK(l->header["parent_pid_env"] == false); // consumed by the loop
  ::close(leak[0]);
  ::close(leak[1]);
  ::close(leaky_socket);
}

TEST_CASE("worker_pool: create fails clearly and leaves no process behind", "[worker_pool]") {
  SECTION("missing program") {
    auto o = test_options();
    o.worker_path = "/nonexistent/fdo-worker";
    auto p = WorkerPool::create(o);
    REQUIRE_FALSE(p);
    CHECK(p.error().code() == Errc::not_found);
    CHECK_THAT(p.error().message(), Catch::Contains("/nonexistent/fdo-worker"));
  }
  SECTION("bad size") {
    auto o = test_options();
    o.size = 0;
    auto p = WorkerPool::create(o);
    REQUIRE_FALSE(p);
    CHECK(p.error().code() == Errc::invalid_argument);
  }
  SECTION("a program that does not speak the protocol") {
    auto o = test_options();
    o.worker_path = "/bin/true";
    auto p = WorkerPool::create(o);
    REQUIRE_FALSE(p);
    CHECK(p.error().code() == Errc::unavailable);
    CHECK_THAT(p.error().message(),
               Catch::Contains("exited with status 0 before completing its handshake"));
  }
  SECTION("a program that never answers") {
    TempDir dir;
    auto script = dir.path() / "silent-worker";
    std::ofstream(script) << "#!/bin/sh\nexec sleep 100\n";
    fs::permissions(script, fs::perms::owner_all);
    auto o = test_options();
    o.worker_path = script.string();
    o.startup_timeout = 200ms;
    auto p = WorkerPool::create(o);
    REQUIRE_FALSE(p);
    CHECK_THAT(p.error().message(),
               Catch::Contains("did not complete its handshake within 200 ms"));
  }
  CHECK(no_children());
}

TEST_CASE("worker_pool: when respawning fails the pool says so - then recovers", "[worker_pool]") {
  TempDir dir;
  auto copy = dir.path() / "worker-copy";
  fs::copy_file(FDO_TEST_WORKER, copy);
  auto o = test_options();
  o.worker_path = copy.string();
  auto pool = make_pool(o);
  fs::remove(copy);

  auto crash = pool->run(job({{"op", "segv"}}));
  REQUIRE_FALSE(crash);
  CHECK(crash.error().code() == Errc::crashed);
  auto r = pool->run(job({{"op", "echo"}}));
  REQUIRE_FALSE(r);
  CHECK(r.error().code() == Errc::unavailable);
  CHECK_THAT(r.error().message(), Catch::Contains("no live workers"));
  CHECK_THAT(r.error().message(), Catch::Contains(copy.string()));
  auto s = pool->stats();
  CHECK(s.live == 0);
  CHECK(s.spawn_failures >= 1);
  CHECK(s.workers[0].consecutive_spawn_failures >= 1);
  CHECK_FALSE(s.workers[0].last_spawn_error.empty());

  fs::copy_file(FDO_TEST_WORKER, copy);
  bool recovered = wait_until([&] { return bool(pool->run(job({{"op", "echo"}}))); });
  CHECK(recovered);
  CHECK(pool->stats().live == 1);
}

TEST_CASE("worker_pool: a job's own children die with its worker", "[worker_pool]") {
  TempDir dir;
  auto pid_file = dir.file("grandchild.pid");
  auto pool = make_pool(test_options());
  auto read_pid = [&] {
    std::ifstream in(pid_file);
    pid_t pid = 0;
    in >> pid;
    return pid;
  };
  SECTION("killed at the wall limit together with the worker") {
    auto r = pool->run(job({{"op", "fork"}, {"then", "loop"}, {"pid_file", pid_file}}),
                       limits_with(400ms));
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::timeout);
    pid_t gc = read_pid();
    REQUIRE(gc > 0);
    CHECK(eventually_gone(gc));
  }
  SECTION("a worker that exits while a grandchild holds its channel is still noticed") {
    auto r = pool->run(job({{"op", "fork"}, {"then", "exit"}, {"pid_file", pid_file}}),
                       limits_with(20s));
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::crashed);
    CHECK_THAT(r.error().message(), Catch::Contains("exited unexpectedly with status 3"));
    pid_t gc = read_pid();
    REQUIRE(gc > 0);
    CHECK(eventually_gone(gc));
  }
  echo_pid(*pool);
}

TEST_CASE("worker_pool: destruction reaps everything (no zombies)", "[worker_pool]") {
  std::set<pid_t> seen;
  {
    auto pool = make_pool(test_options(3));
    auto record = [&] {
      REQUIRE(wait_until([&] { return pool->stats().live == 3; })); // replacements up
      for (const auto& w : pool->stats().workers)
        seen.insert(w.pid);
    };
    record();
    CHECK_FALSE(pool->run(job({{"op", "segv"}})));
    record();
    CHECK_FALSE(pool->run(job({{"op", "loop"}}), limits_with(200ms)));
    record();
    echo_pid(*pool);
    CHECK(to_json(pool->stats())["workers"].size() == 3);
    // One job still in flight when the pool is destroyed: the destructor waits for it.
    WorkerPool* raw = pool.get();
    std::atomic<bool> inflight_ok{false};
    std::thread inflight([&] {
      inflight_ok = bool(raw->run(job({{"op", "sleep_ms"}, {"ms", 300}})));
    });
    REQUIRE(wait_until([&] {
      auto s = raw->stats();
      return std::any_of(s.workers.begin(), s.workers.end(),
                         [](const WorkerInfo& w) { return w.state == WorkerState::busy; });
    }));
    pool.reset();
    inflight.join();
    CHECK(inflight_ok);
  }
  CHECK(seen.size() >= 5);
  CHECK(no_children());
  for (pid_t pid : seen)
    CHECK(process_gone(pid));
}

TEST_CASE("worker_pool: workers die with the daemon (PR_SET_PDEATHSIG)", "[worker_pool]") {
  int report[2];
  REQUIRE(::pipe(report) == 0);
  pid_t daemon = ::fork();
  REQUIRE(daemon >= 0);
  if (daemon == 0) {
    // A stand-in daemon: starts a pool, keeps its worker busy looping (so the
    // worker never sees end of stream), then dies without any cleanup.
    ::close(report[0]);
    auto pool = WorkerPool::create(test_options());
    if (!pool) ::_exit(2);
    std::thread([p = pool->get()] {
      (void)p->run(job({{"op", "loop"}}), limits_with(60s));
    }).detach();
    for (int i = 0; i < 1000 && (*pool)->stats().workers[0].state != WorkerState::busy; ++i)
      std::this_thread::sleep_for(5ms);
    pid_t worker = (*pool)->stats().workers[0].pid;
    (void)::write(report[1], &worker, sizeof worker);
    std::this_thread::sleep_for(100ms);
    ::_exit(0);
  }
  ::close(report[1]);
  pid_t worker = 0;
  REQUIRE(::read(report[0], &worker, sizeof worker) == sizeof worker);
  ::close(report[0]);
  int status = 0;
  REQUIRE(::waitpid(daemon, &status, 0) == daemon);
  REQUIRE(worker > 0);
  CHECK(eventually_gone(worker));
}

TEST_CASE("worker_pool: stats serialise to JSON", "[worker_pool]") {
  auto pool = make_pool(test_options(2));
  echo_pid(*pool);
  auto j = to_json(pool->stats());
  CHECK(j["name"] == "exec");
  CHECK(j["size"] == 2);
  CHECK(j["live"] == 2);
  CHECK(j["jobs"] == 1);
  CHECK(j["succeeded"] == 1);
  CHECK(j["failures"]["total"] == 0);
  CHECK(j["restarts"] == 0);
  REQUIRE(j["workers"].size() == 2);
  CHECK(j["workers"][0]["state"] == "idle");
  CHECK(j["workers"][0]["pid"].get<long>() > 0);
  CHECK(describe_signal(SIGBUS) == "SIGBUS (bus error)");
  CHECK_THAT(describe_signal(SIGUSR1), Catch::StartsWith("SIGUSR1 ("));
}

// The host's own cgroups, as fdod takes them (v2, or the v1 memory and pids
// hierarchies of a legacy or hybrid host): a job whose pages pass its memory
// limit without touching its address-space limit is killed by the kernel and
// reported as a memory failure, a job that starts threads past its task cap is
// refused them, and the pool carries on with a fresh worker.
TEST_CASE("worker_pool: on this host's cgroups, jobs past their memory or task limit are stopped",
          "[worker_pool][cgroup]") {
  if (::geteuid() != 0) FDO_SKIP("skipped: creating worker cgroups on this host needs root");
  auto where = own_cgroup();
  if (!where) FDO_SKIP("skipped: " + where.error().message());
  if (!where->directory.empty() && !where->namespace_root)
    FDO_SKIP("skipped: this process's cgroup v2 " + where->directory +
             " is not a container root; taking it over would move the test into a leaf");
  auto tree = CgroupTree::open(*where, system_cgroup_fs(), ::getpid());
  if (!tree) FDO_SKIP("skipped: no worker cgroups here: " + tree.error().message());
  if (!(*tree)->memory_controller() || !(*tree)->pids_controller())
    FDO_SKIP("skipped: no memory or pids controller for worker groups here (" + (*tree)->summary() +
             ")");
  PoolOptions o = test_options();
  o.cgroups = *tree;
  o.cgroup_pids_max = 16;
  auto pool = make_pool(o);

  // 256 MiB of page cache in a memory file, against a 64 MiB limit.
  auto r =
      pool->run(job({{"op", "page_cache"}, {"bytes", 256 * kMiB}}), limits_with(20s, 64 * kMiB));
  REQUIRE_FALSE(r);
  CHECK(r.error().code() == Errc::resource_exhausted);
  CHECK_THAT(r.error().message(),
             Catch::Contains("program exceeded the memory limit of 64 MiB in the exec worker"));
  CHECK_THAT(r.error().message(), Catch::Contains("cgroup's memory limit"));
  CHECK(pool->stats().failures.memory == 1);

  // 40 threads at once, against a cap of 16 tasks: refused, the job reports it.
  auto t = pool->run(job({{"op", "threads"}, {"count", 40}}), limits_with(20s, 1024 * kMiB));
  REQUIRE(t);
  CHECK(t->header["started"].get<int>() < 16);
  CHECK(t->header["started"].get<int>() > 0);
  CHECK(t->header["refused"] == std::strerror(EAGAIN));

  // Below its limits, a job of the same worker runs as usual.
  auto small = pool->run(job({{"op", "page_cache"}, {"bytes", 8 * kMiB}}));
  REQUIRE(small);
  CHECK(small->header["written"] == 8 * kMiB);
  echo_pid(*pool);
}
