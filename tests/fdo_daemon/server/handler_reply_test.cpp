// Replies written by the handler thread that made them (docs/fdod.md,
// "Replies written by their handler"): the io thread is not woken for the end
// of a call it watches the socket for, yet every timeout, stop and idle rule
// holds as before.
#include "fdo/daemon/server.h"
#include "running_server.h"
#include "server_test_support.h"

#include <catch2/catch.hpp>
#include <thread>

using namespace fdo::daemon;
using namespace fdo::daemon::testing;
using nlohmann::json;
using std::chrono::milliseconds;

namespace {

std::string request_line(const std::string& method, const json& params, const json& id) {
  return json{{"jsonrpc", "2.0"}, {"id", id}, {"method", method}, {"params", params}}.dump() + "\n";
}

} // namespace

TEST_CASE("handler replies: a client calling one request at a time is answered by the handler "
          "thread, and the io thread takes each end at the next request",
          "[server][handler_reply]") {
  TempDir dir;
  Running srv(options_for(dir));
  RawClient c = srv.client();
  for (int i = 1; i <= 20; ++i) {
    json r = c.call("echo", json{{"n", i}}, i);
    REQUIRE(r.is_object());
    REQUIRE(r["id"] == i);
    REQUIRE(r["result"]["n"] == i);
    // Counted as ended on the handler thread, before the io thread looks.
    REQUIRE(eventually([&] { return srv.server->stats().handlers_running == 0; }));
  }
  ServerStats s = srv.server->stats();
  CHECK(s.replies_by_handler == 20);
  CHECK(s.call_ends_unwoken == 20);
  CHECK(s.requests_timed_out == 0);
}

TEST_CASE("handler replies: pipelined requests are answered in order, each once",
          "[server][handler_reply]") {
  TempDir dir;
  Running srv(options_for(dir));
  RawClient c = srv.client();
  std::string burst;
  for (int i = 1; i <= 30; ++i)
    burst += request_line("echo", json{{"n", i}}, i);
  REQUIRE(c.send(burst));
  for (int i = 1; i <= 30; ++i) {
    auto line = c.read_line();
    REQUIRE(line);
    json r = json::parse(*line);
    REQUIRE(r["id"] == i);
    REQUIRE(r["result"]["n"] == i);
  }
  // And the connection goes on as before.
  json r = c.call("echo", json{{"n", 31}}, 31);
  REQUIRE(r["result"]["n"] == 31);
}

TEST_CASE("handler replies: a reply larger than the socket takes is finished by the io thread",
          "[server][handler_reply]") {
  TempDir dir;
  ServerOptions o = options_for(dir);
  o.limits.max_request_bytes = 8 << 20;
  Running srv(std::move(o));
  RawClient c = srv.client();
  std::string big(3 << 20, 'x');
  for (std::size_t i = 0; i < big.size(); i += 4093)
    big[i] = static_cast<char>('a' + i % 26);
  REQUIRE(c.send(request_line("echo", json{{"s", big}}, 1)));
  // Not read until the handler has surely returned: the socket took only part.
  REQUIRE(eventually([&] { return srv.server->stats().handlers_running == 0; }));
  std::this_thread::sleep_for(milliseconds(50));
  auto line = c.read_line();
  REQUIRE(line);
  json r = json::parse(*line);
  REQUIRE(r["id"] == 1);
  REQUIRE(r["result"]["s"] == big);
  CHECK(srv.server->stats().replies_by_handler == 0); // not written whole by the handler
  json next = c.call("echo", json{{"n", 2}}, 2);
  REQUIRE(next["result"]["n"] == 2);
}

TEST_CASE("handler replies: a deadline racing the handler gives each request exactly one reply",
          "[server][handler_reply]") {
  TempDir dir;
  ServerOptions o = options_for(dir);
  o.limits.request_timeout = milliseconds(15);
  Running srv(std::move(o));
  RawClient c = srv.client();
  int results = 0, timeouts = 0;
  for (int i = 1; i <= 60; ++i) {
    // Around the deadline: some end before it, some after.
    json r = c.call("sleep", json{{"ms", 10 + i % 10}}, i);
    REQUIRE(r.is_object());
    REQUIRE(r["id"] == i);
    if (r.contains("result"))
      ++results;
    else
      ++timeouts;
  }
  // Nothing extra on the line: the next request's reply is the next line.
  srv.server->set_limits([&] {
    ServerLimits l = options_for(dir).limits;
    l.request_timeout = std::chrono::seconds(20);
    return l;
  }());
  REQUIRE(eventually([&] { return srv.server->stats().handlers_running == 0; }));
  std::this_thread::sleep_for(milliseconds(50));
  json r = c.call("echo", json{{"n", "last"}}, "last");
  REQUIRE(r["id"] == "last");
  REQUIRE(r["result"]["n"] == "last");
  CHECK(results + timeouts == 60);
  INFO("results " << results << ", timeouts " << timeouts);
  CHECK(srv.server->stats().requests_timed_out == static_cast<std::uint64_t>(timeouts));
}

TEST_CASE("handler replies: a deadline racing a handler that wrote its reply while the next "
          "request waited gives each request exactly one reply",
          "[server][handler_reply]") {
  TempDir dir;
  ServerOptions o = options_for(dir);
  o.limits.request_timeout = milliseconds(15);
  Running srv(std::move(o));
  RawClient c = srv.client();
  int timeouts = 0;
  for (int i = 0; i < 80; ++i) {
    // The second request is read while the first runs: its end is posted
    // to the io thread, where its deadline may come first.
    const int a = 2 * i + 1, b = 2 * i + 2;
    REQUIRE(c.send(request_line("sleep", json{{"ms", 13 + i % 5}}, a) +
                   request_line("echo", json{{"n", b}}, b)));
    for (int id : {a, b}) {
      auto line = c.read_line();
      REQUIRE(line);
      json r = json::parse(*line);
      REQUIRE(r["id"] == id);
      // The second may time out too: its budget runs from when it was read.
      if (!r.contains("result"))
        ++timeouts;
      else if (id == b)
        REQUIRE(r["result"]["n"] == b);
    }
  }
  INFO("timeouts " << timeouts);
  CHECK(srv.server->stats().requests_timed_out == static_cast<std::uint64_t>(timeouts));
}

TEST_CASE("handler replies: a stop takes a parked end at once - the drain does not wait for it",
          "[server][handler_reply]") {
  TempDir dir;
  Running srv(options_for(dir)); // drain_timeout 20 s, request_timeout 20 s
  RawClient c = srv.client();
  json r = c.call("echo", json{{"n", 1}}, 1);
  REQUIRE(r["result"]["n"] == 1);
  REQUIRE(eventually([&] { return srv.server->stats().call_ends_unwoken == 1; }));
  const auto t0 = std::chrono::steady_clock::now();
  srv.stop_and_join();
  const auto took = std::chrono::steady_clock::now() - t0;
  CHECK(took < std::chrono::seconds(5));
  CHECK(c.closed_by_peer(std::chrono::seconds(5)));
}

TEST_CASE("handler replies: the idle timeout counts from a reply the handler wrote",
          "[server][handler_reply]") {
  TempDir dir;
  ServerOptions o = options_for(dir); // request_timeout 20 s
  o.limits.idle_timeout = milliseconds(300);
  Running srv(std::move(o));
  RawClient c = srv.client();
  json r = c.call("echo", json{{"n", 1}}, 1);
  REQUIRE(r["result"]["n"] == 1);
  const auto replied = std::chrono::steady_clock::now();
  REQUIRE(c.closed_by_peer(std::chrono::seconds(5)));
  const auto idle = std::chrono::steady_clock::now() - replied;
  CHECK(idle >= milliseconds(250));
  CHECK(idle < std::chrono::seconds(3)); // not the request's 20 s deadline
  CHECK(srv.server->stats().closed_idle_timeout == 1);
}
