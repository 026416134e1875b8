// HandlerTurns (server/src/handler_turns.h): which waiting request gets the
// next handler thread. A uid with many blocked requests keeps one thread free
// for others, and uids with queued work take turns.
#include "handler_turns.h"

#include <boost/asio/thread_pool.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <vector>

using namespace fdo::daemon;
using namespace std::chrono_literals;

namespace {

// Jobs that block until released, recording the order they started in.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  std::vector<int> started;
  int running = 0;

  auto job(int tag) {
    return [this, tag] {
      std::unique_lock lk(mu);
      started.push_back(tag);
      ++running;
      cv.notify_all();
      cv.wait(lk, [&] { return open; });
      --running;
      cv.notify_all();
    };
  }
  bool wait_started(std::size_t n) {
    std::unique_lock lk(mu);
    return cv.wait_for(lk, 10s, [&] { return started.size() >= n; });
  }
  void release() {
    std::lock_guard lk(mu);
    open = true;
    cv.notify_all();
  }
  bool wait_idle() {
    std::unique_lock lk(mu);
    return cv.wait_for(lk, 10s, [&] { return running == 0; });
  }
};

} // namespace

TEST_CASE("handler turns: a uid flooding with blocked requests leaves a thread for another uid",
          "[server][turns]") {
  boost::asio::thread_pool pool(4);
  HandlerTurns turns(pool, 4, 3);
  Gate gate;
  for (int i = 0; i < 10; ++i)
    turns.post(1000, gate.job(1000));
  REQUIRE(gate.wait_started(3));
  std::this_thread::sleep_for(50ms);
  {
    std::lock_guard lk(gate.mu);
    CHECK(gate.started.size() == 3); // the cap, not all four threads
  }
  auto s = turns.stats();
  CHECK(s.running == 3);
  CHECK(s.waiting == 7);

  // The other uid's request starts at once, while uid 1000's stay blocked.
  turns.post(2000, gate.job(2000));
  REQUIRE(gate.wait_started(4));
  {
    std::lock_guard lk(gate.mu);
    CHECK(gate.started.back() == 2000);
  }
  gate.release();
  REQUIRE(gate.wait_idle());
  pool.join();
  CHECK(gate.started.size() == 11);
  s = turns.stats();
  CHECK(s.running == 0);
  CHECK(s.waiting == 0);
}

TEST_CASE("handler turns: uids with queued work take turns for a single thread",
          "[server][turns]") {
  boost::asio::thread_pool pool(1);
  HandlerTurns turns(pool, 1, 1);
  Gate gate;
  turns.post(1, gate.job(0)); // holds the one thread while the rest queue
  REQUIRE(gate.wait_started(1));
  std::vector<int> order;
  std::mutex order_mu;
  auto record = [&](int tag) {
    return [&, tag] {
      std::lock_guard lk(order_mu);
      order.push_back(tag);
    };
  };
  for (int i = 0; i < 3; ++i)
    turns.post(1, record(10 + i));
  turns.post(2, record(20));
  turns.post(3, record(30));
  turns.post(2, record(21));
  gate.release();
  pool.join();
  // In the order the uids first queued, one job per uid per turn.
  CHECK(order == std::vector<int>{10, 20, 30, 11, 21, 12});
}
