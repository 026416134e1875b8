// The tier-up queue alone: jobs are plain functions here, held at a gate so
// each test decides when a "compile" finishes.
#include "fakes.h"
#include "tier_up_queue.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <condition_variable>
#include <map>
#include <mutex>
#include <pthread.h>
#include <sched.h>
#include <string>
#include <thread>
#include <vector>

using namespace fdo::cache::detail;
using fdo::cache::testing::eventually;
using namespace std::chrono_literals;

namespace {

// Jobs block at the gate until it opens; counts who entered and who finished.
class Gate {
public:
  void pass() {
    std::unique_lock lock(mu_);
    entered_++;
    cv_.wait(lock, [&] { return open_; });
  }
  void open() {
    {
      std::lock_guard lock(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }
  int entered() const {
    std::lock_guard lock(mu_);
    return entered_;
  }

private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
  int entered_ = 0;
};

// Records how often each CK's job ran.
class Runs {
public:
  void add(const std::string& ck) {
    std::lock_guard lock(mu_);
    runs_[ck]++;
  }
  int of(const std::string& ck) const {
    std::lock_guard lock(mu_);
    auto it = runs_.find(ck);
    return it == runs_.end() ? 0 : it->second;
  }

private:
  mutable std::mutex mu_;
  std::map<std::string, int> runs_;
};

// A make_job that counts its calls and returns a job recording its run.
auto job_for(const std::string& ck, Runs& runs, int& made, JobResult result = JobResult::installed,
             Gate* gate = nullptr) {
  return [&, ck, result, gate] {
    made++;
    return TierUpQueue::Job([&runs, ck, result, gate] {
      if (gate) gate->pass();
      runs.add(ck);
      return result;
    });
  };
}

} // namespace

TEST_CASE("tier-up queue: a CK queued or running is not queued again", "[cache][tier_up]") {
  TierUpQueue q(1, 0ms, 100);
  Gate gate;
  Runs runs;
  int made = 0;
  CHECK(q.schedule("ck1", job_for("ck1", runs, made, JobResult::installed, &gate)) ==
        Scheduled::queued);
  REQUIRE(eventually([&] { return gate.entered() == 1; }));
  // Running: a second request for ck1 is a duplicate and builds no job.
  CHECK(q.schedule("ck1", job_for("ck1", runs, made)) == Scheduled::already_queued);
  // Queued behind it: ck2 once, then a duplicate.
  CHECK(q.schedule("ck2", job_for("ck2", runs, made)) == Scheduled::queued);
  CHECK(q.schedule("ck2", job_for("ck2", runs, made)) == Scheduled::already_queued);
  CHECK(made == 2);
  CHECK(q.pending() == 2);
  gate.open();
  q.wait_idle();
  CHECK(q.pending() == 0);
  CHECK(runs.of("ck1") == 1);
  CHECK(runs.of("ck2") == 1);
  // Finished jobs no longer hold their CK.
  CHECK(q.schedule("ck1", job_for("ck1", runs, made)) == Scheduled::queued);
  q.wait_idle();
  CHECK(runs.of("ck1") == 2);
}

TEST_CASE("tier-up queue: a failed CK is held off for retry_after - others are not",
          "[cache][tier_up]") {
  Runs runs;
  int made = 0;
  SECTION("within retry_after") {
    TierUpQueue q(1, std::chrono::hours(1), 100);
    CHECK(q.schedule("bad", job_for("bad", runs, made, JobResult::failed)) == Scheduled::queued);
    q.wait_idle();
    CHECK(runs.of("bad") == 1);
    CHECK(q.schedule("bad", job_for("bad", runs, made)) == Scheduled::failed_recently);
    CHECK(made == 1); // nothing copied for a refused job
    CHECK(q.schedule("good", job_for("good", runs, made)) == Scheduled::queued);
    q.wait_idle();
    CHECK(q.schedule("good", job_for("good", runs, made)) == Scheduled::queued);
    q.wait_idle();
    CHECK(runs.of("good") == 2);
    CHECK(runs.of("bad") == 1);
  }
  SECTION("after retry_after") {
    TierUpQueue q(1, 30ms, 100);
    CHECK(q.schedule("bad", job_for("bad", runs, made, JobResult::failed)) == Scheduled::queued);
    q.wait_idle();
    std::this_thread::sleep_for(60ms);
    CHECK(q.schedule("bad", job_for("bad", runs, made)) == Scheduled::queued);
    q.wait_idle();
    CHECK(runs.of("bad") == 2);
    // It succeeded this time: no hold-off.
    CHECK(q.schedule("bad", job_for("bad", runs, made)) == Scheduled::queued);
    q.wait_idle();
    CHECK(runs.of("bad") == 3);
  }
}

TEST_CASE("tier-up queue: wait_idle blocks until queued and running jobs finish",
          "[cache][tier_up]") {
  TierUpQueue q(2, 0ms, 100);
  q.wait_idle(); // idle already: returns at once
  Gate gate;
  Runs runs;
  int made = 0;
  for (std::string ck : {"a", "b", "c"})
    REQUIRE(q.schedule(ck, job_for(ck, runs, made, JobResult::installed, &gate)) ==
            Scheduled::queued);
  // Two threads: two jobs run at once, the third waits for a free thread.
  REQUIRE(eventually([&] { return gate.entered() == 2; }));
  std::atomic<bool> returned{false};
  std::thread waiter([&] {
    q.wait_idle();
    returned = true;
  });
  std::this_thread::sleep_for(50ms);
  CHECK_FALSE(returned);
  gate.open();
  waiter.join();
  CHECK(returned);
  CHECK(runs.of("a") + runs.of("b") + runs.of("c") == 3);
  CHECK(q.pending() == 0);
}

TEST_CASE("tier-up queue: stop drops queued jobs and lets the running one finish",
          "[cache][tier_up]") {
  TierUpQueue q(1, 0ms, 100);
  Gate gate;
  Runs runs;
  int made = 0;
  REQUIRE(q.schedule("running", job_for("running", runs, made, JobResult::installed, &gate)) ==
          Scheduled::queued);
  REQUIRE(eventually([&] { return gate.entered() == 1; }));
  REQUIRE(q.schedule("queued1", job_for("queued1", runs, made)) == Scheduled::queued);
  REQUIRE(q.schedule("queued2", job_for("queued2", runs, made)) == Scheduled::queued);

  std::atomic<bool> stopped{false};
  std::thread stopper([&] {
    q.stop();
    stopped = true;
  });
  // stop() refuses new work at once but waits for the running job.
  REQUIRE(eventually(
      [&] { return q.schedule("late", job_for("late", runs, made)) == Scheduled::stopped; }));
  CHECK(q.pending() == 1);
  CHECK_FALSE(stopped);
  gate.open();
  stopper.join();
  CHECK(stopped);
  CHECK(runs.of("running") == 1);
  CHECK(runs.of("queued1") == 0);
  CHECK(runs.of("queued2") == 0);
  CHECK(runs.of("late") == 0);
  CHECK(q.pending() == 0);
  q.wait_idle(); // a stopped queue never blocks
  q.stop();      // and stopping again is harmless
}

TEST_CASE("tier-up queue: a job that throws does not end its thread", "[cache][tier_up]") {
  TierUpQueue q(1, std::chrono::hours(1), 100);
  Runs runs;
  int made = 0;
  REQUIRE(q.schedule("throws", [] {
    return TierUpQueue::Job([]() -> JobResult { throw std::runtime_error("boom"); });
  }) == Scheduled::queued);
  q.wait_idle();
  CHECK(q.schedule("next", job_for("next", runs, made)) == Scheduled::queued);
  q.wait_idle();
  CHECK(runs.of("next") == 1);
  // An exception is not a compile failure: the CK may be queued again at once.
  CHECK(q.schedule("throws", job_for("throws", runs, made)) == Scheduled::queued);
  q.wait_idle();
  CHECK(runs.of("throws") == 1);
}

TEST_CASE("tier-up queue: background jobs wait for stage jobs - a stage's request promotes one",
          "[cache][tier_up]") {
  TierUpQueue q(1, 0ms, 100);
  Gate gate;
  Runs runs;
  int made = 0;
  std::mutex order_mu;
  std::vector<std::string> order;
  auto ordered = [&](const std::string& ck) {
    return [&, ck] {
      made++;
      return TierUpQueue::Job([&, ck] {
        std::lock_guard lock(order_mu);
        order.push_back(ck);
        return JobResult::installed;
      });
    };
  };
  // Hold the only thread so that everything below queues.
  REQUIRE(q.schedule("busy", job_for("busy", runs, made, JobResult::installed, &gate)) ==
          Scheduled::queued);
  REQUIRE(eventually([&] { return gate.entered() == 1; }));
  CHECK(q.schedule("bg1", ordered("bg1"), JobPriority::background) == Scheduled::queued);
  CHECK(q.schedule("bg2", ordered("bg2"), JobPriority::background) == Scheduled::queued);
  CHECK(q.schedule("stage1", ordered("stage1")) == Scheduled::queued);
  // A background request for a queued CK is a duplicate; a stage's moves bg2 up.
  CHECK(q.schedule("bg1", ordered("bg1"), JobPriority::background) == Scheduled::already_queued);
  CHECK(q.schedule("bg2", ordered("bg2")) == Scheduled::already_queued);
  CHECK(q.pending() == 4);
  gate.open();
  q.wait_idle();
  CHECK(order == std::vector<std::string>{"stage1", "bg2", "bg1"});
  CHECK(made == 4); // duplicates built no job
  CHECK(q.pending() == 0);
}

TEST_CASE(
    "tier-up queue: jobs run under SCHED_BATCH - they do not preempt the stage that queued them",
    "[cache][tier_up]") {
  TierUpQueue q(2, 0ms, 100);
  std::atomic<int> policy{-1};
  std::string name;
  REQUIRE(q.schedule("ck", [&] {
    return TierUpQueue::Job([&] {
      policy = ::sched_getscheduler(0); // the calling thread's, on Linux
      char buf[16] = {};
      ::pthread_getname_np(::pthread_self(), buf, sizeof buf);
      name = buf;
      return JobResult::installed;
    });
  }) == Scheduled::queued);
  q.wait_idle();
  CHECK(policy.load() == SCHED_BATCH);
  CHECK(name == TierUpQueue::kThreadName);
  // The thread that queued it keeps its own policy.
  CHECK(::sched_getscheduler(0) == SCHED_OTHER);
}
