// WorkerPool's tenancy against real worker processes (fdo_test_worker): one
// tenant per process, fair turns between tenants, per-tenant queue limits,
// captured output, exit(n) as an outcome, and workers retired when a job
// leaves something behind.
#include "fdo/daemon/worker_pool.h"
#include "fdo/util/fair_queue.h"
#include "pool_test_util.h"

#include <catch2/catch.hpp>
#include <future>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

using namespace fdo;
using namespace fdo::daemon;
using namespace fdo::daemon::testing;
using namespace std::chrono_literals;

namespace {

PoolOptions tenant_options(int size = 1) {
  PoolOptions o = test_options(size);
  o.bind_spec = [](const std::string& tenant) -> Expected<nlohmann::json> {
    return nlohmann::json{{"spec", {{"tenant", tenant}}}, {"retire_growth_bytes", 32u << 20}};
  };
  return o;
}

JobOptions as(const std::string& tenant) {
  JobOptions o;
  o.limits.wall = 20s;
  o.tenant = tenant;
  return o;
}

struct Who {
  long pid = 0;
  std::string tenant;
};

Who whoami(WorkerPool& pool, const std::string& tenant) {
  auto r = pool.run(Message{{{"op", "whoami"}}, {}}, as(tenant), nullptr);
  if (!r) FAIL(r.error().describe());
  return {r->header["pid"].get<long>(), r->header["tenant"].get<std::string>()};
}

} // namespace

TEST_CASE("fair queue: tenants take turns - each tenant's waiters in order", "[fair_queue]") {
  FairQueue<> q;
  auto a1 = q.push("a");
  auto a2 = q.push("a");
  auto a3 = q.push("a");
  auto b1 = q.push("b");
  auto c1 = q.push("c");
  std::vector<std::uint64_t> served;
  while (auto next = q.next()) {
    served.push_back(next->id);
    q.remove(next->id, next->tenant);
  }
  CHECK(served == std::vector<std::uint64_t>{a1, b1, c1, a2, a3});
  CHECK(q.size() == 0);
  CHECK(q.tenants() == 0);

  // A waiter that gives up from the middle does not move anyone's turn.
  auto x1 = q.push("x");
  auto x2 = q.push("x");
  auto y1 = q.push("y");
  q.remove(x2, "x");
  CHECK(q.waiting("x") == 1);
  CHECK(q.next()->id == x1);
  q.remove(x1, "x");
  CHECK(q.next()->id == y1);
}

TEST_CASE("fair queue: a tenant's waiter served out of its order", "[fair_queue]") {
  FairQueue<> q;
  auto a1 = q.push("a");
  auto a2 = q.push("a");
  auto b1 = q.push("b");
  auto a3 = q.push("a");
  CHECK(q.oldest_where("a", [&](std::uint64_t id) { return id != a1; }) == a2);
  CHECK(q.oldest_where("a", [&](std::uint64_t id) { return id == a3; }) == a3);
  CHECK_FALSE(q.oldest_where("a", [](std::uint64_t) { return false; }));
  CHECK_FALSE(q.oldest_where("z", [](std::uint64_t) { return true; }));
  // Served ahead of a1: the others keep their order, a goes to the back.
  q.serve(a2, "a");
  CHECK(q.waiting("a") == 2);
  CHECK(q.next()->id == b1);
  q.serve(b1, "b");
  CHECK(q.next()->id == a1);
  q.serve(a1, "a");
  CHECK(q.next()->id == a3);
}

TEST_CASE("worker_pool tenancy: a worker serves one tenant - another tenant gets a fresh one",
          "[worker_pool][tenancy]") {
  auto pool = make_pool(tenant_options(1));
  Who a = whoami(*pool, "uid:1");
  CHECK(a.tenant == "uid:1");
  CHECK(whoami(*pool, "uid:1").pid == a.pid); // reused for the same tenant
  Who b = whoami(*pool, "uid:2");
  CHECK(b.tenant == "uid:2");
  CHECK(b.pid != a.pid); // never the same process
  Who a2 = whoami(*pool, "uid:1");
  CHECK(a2.pid != a.pid);
  CHECK(a2.pid != b.pid);
  auto s = pool->stats();
  CHECK(s.recycled == 2);
  REQUIRE(s.workers.size() == 1);
  CHECK(s.workers[0].tenant == "uid:1");
}

TEST_CASE("worker_pool tenancy: the daemon's own jobs bind a worker too",
          "[worker_pool][tenancy]") {
  auto pool = make_pool(tenant_options(1));
  Who own = whoami(*pool, ""); // a probe: the empty tenant
  CHECK(pool->stats().workers[0].bound);
  Who tenant = whoami(*pool, "uid:9");
  CHECK(tenant.pid != own.pid);
  CHECK(tenant.tenant == "uid:9");

  // A one-off job retires its worker at once: the next tenant finds a fresh one.
  JobOptions probe = as("");
  probe.after = AfterJob::retire;
  auto r = pool->run(Message{{{"op", "whoami"}}, {}}, probe, nullptr);
  REQUIRE(r);
  CHECK(r->header["pid"].get<long>() != tenant.pid);
  CHECK(whoami(*pool, "uid:10").pid != r->header["pid"].get<long>());
  CHECK(pool->stats().recycled == 2); // uid:9's worker for the probe; none for uid:10
}

TEST_CASE("worker_pool tenancy: a failed bind retires the worker and says why",
          "[worker_pool][tenancy]") {
  auto pool = make_pool(tenant_options(1));
  auto r = pool->run(Message{{{"op", "whoami"}}, {}}, as("refuse"), nullptr);
  REQUIRE_FALSE(r);
  CHECK(r.error().code() == Errc::unsupported);
  CHECK_THAT(r.error().message(), Catch::Contains("enter the sandbox"));
  // The next tenant is served by a clean process.
  CHECK(whoami(*pool, "uid:3").tenant == "uid:3");
  CHECK(pool->stats().retired == 1);
}

TEST_CASE("worker_pool tenancy: a bind spec the daemon cannot make leaves the worker unbound - "
          "the tenant's next job still binds it",
          "[worker_pool][tenancy]") {
  PoolOptions o = tenant_options(1);
  auto refusals = std::make_shared<int>(1);
  o.bind_spec = [refusals](const std::string& tenant) -> Expected<nlohmann::json> {
    if (*refusals > 0) {
      --*refusals;
      return make_error(Errc::unavailable, "no sandbox spec for " + tenant + " yet");
    }
    return nlohmann::json{{"spec", {{"tenant", tenant}}}, {"retire_growth_bytes", 32u << 20}};
  };
  auto pool = make_pool(o);
  auto r = pool->run(Message{{{"op", "whoami"}}, {}}, as("uid:5"), nullptr);
  REQUIRE_FALSE(r);
  CHECK(r.error().code() == Errc::unavailable);
  CHECK_THAT(r.error().message(), Catch::Contains("sandbox for exec jobs"));
  // The worker never saw a job: the same tenant's next job must bind it, not
  // run in a process that never entered the sandbox.
  Who again = whoami(*pool, "uid:5");
  CHECK(again.tenant == "uid:5");
  auto s = pool->stats();
  REQUIRE(s.workers.size() == 1);
  CHECK(s.workers[0].bound);
}

TEST_CASE("worker_pool tenancy: tenants take turns for a busy pool", "[worker_pool][tenancy]") {
  auto pool = make_pool(tenant_options(1));
  std::mutex mu;
  std::vector<std::string> finished,
      errors; // checked on the test's thread (Catch is not thread-safe)
  auto run_sleep = [&](const std::string& tenant) {
    // Longer than starting a worker takes, even an instrumented one: b's worker
    // is started while a's jobs run, and the bound below assumes it is ready
    // within one of them.
    auto r = pool->run(Message{{{"op", "sleep_ms"}, {"ms", 400}}, {}}, as(tenant), nullptr);
    std::lock_guard lk(mu);
    if (!r) errors.push_back(r.error().describe());
    finished.push_back(tenant);
  };
  std::vector<std::thread> threads;
  // Tenant a queues six jobs, then b queues one.
  for (int i = 0; i < 6; ++i) {
    threads.emplace_back(run_sleep, "a");
    std::this_thread::sleep_for(20ms);
  }
  threads.emplace_back(run_sleep, "b");
  for (auto& t : threads)
    t.join();
  CHECK(errors.empty());
  REQUIRE(finished.size() == 7);
  auto b_at = std::find(finished.begin(), finished.end(), "b") - finished.begin();
  // b waited for a's running job and at most one more turn of a, not all six.
  CHECK(b_at <= 2);
}

TEST_CASE("worker_pool tenancy: one tenant's queue is bounded", "[worker_pool][tenancy]") {
  PoolOptions o = tenant_options(1);
  o.max_waiting_per_tenant = 2;
  auto pool = make_pool(o);
  std::vector<std::future<Expected<Message>>> running;
  for (int i = 0; i < 3; ++i) {
    running.push_back(std::async(std::launch::async, [&] {
      return pool->run(Message{{{"op", "sleep_ms"}, {"ms", 400}}, {}}, as("greedy"), nullptr);
    }));
    std::this_thread::sleep_for(50ms);
  }
  // One running, two waiting: the fourth is refused with a clear error...
  auto refused = pool->run(Message{{{"op", "whoami"}}, {}}, as("greedy"), nullptr);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code() == Errc::resource_exhausted);
  CHECK_THAT(refused.error().message(), Catch::Contains("max_queued_jobs_per_uid"));
  // ...while another tenant still gets in line.
  auto other = std::async(std::launch::async, [&] {
    auto r = pool->run(Message{{{"op", "whoami"}}, {}}, as("patient"), nullptr);
    return r ? r->header["tenant"].get<std::string>() : r.error().describe();
  });
  for (auto& f : running)
    CHECK(f.get());
  CHECK(other.get() == "patient");
  pool->set_max_waiting_per_tenant(100);
}

TEST_CASE("worker_pool tenancy: what a job prints comes back - bounded", "[worker_pool][tenancy]") {
  PoolOptions o = tenant_options(1);
  o.capture_output_bytes = 100;
  auto pool = make_pool(o);
  JobOutput out;
  auto r = pool->run(Message{{{"op", "print"}, {"out", "hello\n"}, {"err", "warn\n"}}, {}}, as("t"),
                     &out);
  REQUIRE(r);
  CHECK(out.out == "hello\n");
  CHECK(out.err == "warn\n");
  CHECK_FALSE(out.truncated);
  // The next job starts from empty captures.
  JobOutput flood;
  r = pool->run(Message{{{"op", "print"}, {"out", "0123456789"}, {"repeat", 1000}}, {}}, as("t"),
                &flood);
  REQUIRE(r);
  CHECK(flood.out.size() == 100);
  CHECK(flood.out.substr(0, 10) == "0123456789");
  CHECK(flood.err.empty());
  CHECK(flood.truncated);
}

TEST_CASE("worker_pool tenancy: each job's output is its own, after silent jobs too",
          "[worker_pool][tenancy]") {
  PoolOptions o = tenant_options(1);
  o.capture_output_bytes = 100;
  auto pool = make_pool(o);
  auto print = [&](const std::string& text, JobOutput* out) {
    REQUIRE(pool->run(Message{{{"op", "print"}, {"out", text}}, {}}, as("t"), out));
  };
  // A silent job leaves the captures empty; the next one's output is only its own.
  JobOutput silent, first, second;
  print("", &silent);
  CHECK(silent.out.empty());
  print("one\n", &first);
  CHECK(first.out == "one\n");
  // A job whose output nobody read: the next job does not see it either.
  print("unread\n", nullptr);
  print("two\n", &second);
  CHECK(second.out == "two\n");
  JobOutput after_silent;
  print("", &silent);
  print("three\n", &after_silent);
  CHECK(after_silent.out == "three\n");
}

TEST_CASE("worker_pool tenancy: exit(n) is the job's outcome - with its output",
          "[worker_pool][tenancy]") {
  PoolOptions o = tenant_options(1);
  o.capture_output_bytes = 4096;
  o.exit_outcome = ExitOutcome::result;
  auto pool = make_pool(o);
  long before = whoami(*pool, "t").pid;
  JobOutput out;
  auto r =
      pool->run(Message{{{"op", "print"}, {"out", "bye\n"}, {"then", "exit"}, {"status", 7}}, {}},
                as("t"), &out);
  REQUIRE(r);
  CHECK(r->header["exited"]["status"] == 7);
  CHECK(out.out == "bye\n");
  CHECK(whoami(*pool, "t").pid != before); // replaced
  CHECK(pool->stats().program_exits == 1);

  // exit(0) too, and an exec pool that does not report exits still fails it.
  r = pool->run(Message{{{"op", "print"}, {"then", "exit"}, {"status", 0}}, {}}, as("t"), nullptr);
  REQUIRE(r);
  CHECK(r->header["exited"]["status"] == 0);
  auto strict = make_pool(tenant_options(1));
  auto e = strict->run(Message{{{"op", "exit"}}, {}}, as("t"), nullptr);
  REQUIRE_FALSE(e);
  CHECK(e.error().code() == Errc::crashed);
}

TEST_CASE("worker_pool tenancy: a job that leaves a thread or memory behind retires its worker",
          "[worker_pool][tenancy]") {
  auto pool = make_pool(tenant_options(1));
  long first = whoami(*pool, "t").pid;
  auto r = pool->run(Message{{{"op", "leave_thread"}}, {}}, as("t"), nullptr);
  REQUIRE(r); // the job itself succeeded
  long second = whoami(*pool, "t").pid;
  CHECK(second != first);
  r = pool->run(Message{{{"op", "leak"}, {"bytes", 8u << 20}}, {}}, as("t"), nullptr);
  REQUIRE(r);
  CHECK(whoami(*pool, "t").pid == second); // 8 MiB is under the 32 MiB allowance
  r = pool->run(Message{{{"op", "leak"}, {"bytes", 48u << 20}}, {}}, as("t"), nullptr);
  REQUIRE(r);
  CHECK(whoami(*pool, "t").pid != second);
  CHECK(pool->stats().retired == 2);
}

TEST_CASE("worker_pool tenancy: typed jobs travel in typed envelopes - bound, reused, retired",
          "[worker_pool][tenancy][typed]") {
  auto pool = make_pool(tenant_options(1));
  // The test worker's typed job: a command as its body, then bytes of its own.
  auto typed = [](const std::string& command, const std::string& rest) {
    Message m;
    m.payload = command + rest;
    m.body = TypedBody{TypedOp::exec, command.size()};
    return m;
  };
  auto r = pool->run(typed("whoami", "+tail"), as("t"), nullptr);
  REQUIRE(r);
  CHECK(r->header.empty());
  REQUIRE(r->body);
  CHECK(r->body->op == TypedOp::none);
  REQUIRE(r->body->bytes <= r->payload.size());
  CHECK(r->payload.substr(r->body->bytes) == "+tail");
  // "pid tenant job-id": the bind request went in the first job's typed
  // envelope, and the same worker serves the tenant's next (CBOR) job.
  std::istringstream text(r->payload.substr(0, r->body->bytes));
  long pid = 0;
  std::string tenant;
  text >> pid >> tenant;
  CHECK(tenant == "t");
  CHECK(whoami(*pool, "t").pid == pid);
  // Why the worker must go came in the typed reply: the next job has another.
  r = pool->run(typed("leave_thread", ""), as("t"), nullptr);
  REQUIRE(r);
  CHECK(whoami(*pool, "t").pid != pid);
  CHECK(pool->stats().retired == 1);
  // A typed job's failure comes back as its error.
  auto failed = pool->run(typed("nonsense", ""), as("t"), nullptr);
  REQUIRE_FALSE(failed);
  CHECK(failed.error().code() == Errc::invalid_argument);
  CHECK_THAT(failed.error().message(), Catch::Contains("unknown command nonsense"));
}
