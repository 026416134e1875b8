// The server against hostile tenants, in-process: control methods on their
// own pool, per-uid connection and in-flight limits, read, idle and write
// deadlines, and backpressure on unsent replies. The "block" work method
// waits on a gate the test opens, so "every work thread is blocked" is a
// state the test holds, not a race it hopes for.
#include "fdo/daemon/server.h"
#include "server_test_support.h"
#include "support/skip.h"
#include "support/temp_dir.h"

#include <catch2/catch.hpp>
#include <condition_variable>
#include <future>
#include <grp.h>
#include <mutex>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>
#include <vector>

using namespace fdo::daemon;
using namespace fdo::daemon::testing;
using nlohmann::json;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

namespace {

struct TempDir : fdo::test_support::TempDir {
  TempDir() : fdo::test_support::TempDir("fdo-lim") {}
};

// Work handlers wait here until the test opens it (or 30 s pass, so a failed
// test cannot hang the suite).
class Gate {
public:
  void pass() {
    std::unique_lock lk(mu_);
    ++entered_;
    cv_.notify_all();
    cv_.wait_for(lk, std::chrono::seconds(30), [&] { return open_; });
  }
  void open() {
    {
      std::lock_guard lk(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }
  bool entered_at_least(int n, milliseconds limit = std::chrono::seconds(20)) {
    std::unique_lock lk(mu_);
    return cv_.wait_for(lk, limit, [&] { return entered_ >= n; });
  }
  int entered() {
    std::lock_guard lk(mu_);
    return entered_;
  }

private:
  std::mutex mu_;
  std::condition_variable cv_;
  int entered_ = 0;
  bool open_ = false;
};

void add_methods(Dispatcher& d, Gate& gate) {
  d.add(
      "health",
      [](const json&, const CallContext&) -> fdo::Expected<json> {
        return json{{"status", "ok"}};
      },
      MethodClass::control);
  d.add("block", [&gate](const json&, const CallContext&) -> fdo::Expected<json> {
    gate.pass();
    return json{{"blocked", true}};
  });
  d.add(
      "block_control",
      [&gate](const json&, const CallContext&) -> fdo::Expected<json> {
        gate.pass();
        return json{{"blocked", true}};
      },
      MethodClass::control);
  d.add(
      "ping",
      [](const json&, const CallContext& ctx) -> fdo::Expected<json> {
        return json{{"pong", true}, {"uid", ctx.uid}};
      },
      MethodClass::immediate);
  d.add("echo", [](const json& p, const CallContext&) -> fdo::Expected<json> { return p; });
  d.add("whoami", [](const json&, const CallContext& ctx) -> fdo::Expected<json> {
    return json{{"uid", ctx.uid}};
  });
  d.add("blob", [](const json& p, const CallContext&) -> fdo::Expected<json> {
    FDO_TRY(std::uint64_t bytes, require_param<std::uint64_t>(p, "bytes"));
    return json{{"blob", std::string(bytes, 'b')}};
  });
  d.add("sleep", [](const json& p, const CallContext&) -> fdo::Expected<json> {
    FDO_TRY(std::uint64_t ms, require_param<std::uint64_t>(p, "ms"));
    std::this_thread::sleep_for(milliseconds(ms));
    return json{{"slept_ms", ms}};
  });
}

ServerOptions options_for(const TempDir& dir) {
  ServerOptions o;
  o.socket_path = dir.file("fdod.sock");
  o.listen = ListenMode::bind_path;
  o.handler_threads = 4;
  o.control_threads = 2;
  o.signals = SignalHandling::none;
  o.limits.request_timeout = std::chrono::seconds(20);
  o.limits.drain_timeout = std::chrono::seconds(20);
  return o;
}

// A Server on its own io thread with the methods above. The gate opens
// before the server stops, so blocked handlers never hold up the teardown.
struct Running {
  explicit Running(ServerOptions opts) {
    add_methods(dispatcher, gate);
    auto s = Server::create(std::move(opts), dispatcher);
    if (!s) FAIL("Server::create: " << s.error().describe());
    server = std::move(*s);
    thread = std::thread([this] { (void)server->run(); });
  }
  ~Running() {
    gate.open();
    server->stop();
    thread.join();
  }
  RawClient client() {
    auto c = RawClient::connect(server->socket_path());
    if (!c) FAIL(c.error().describe());
    return std::move(*c);
  }

  Gate gate;
  Dispatcher dispatcher;
  std::unique_ptr<Server> server;
  std::thread thread;
};

std::string request(const std::string& method, const json& params, const json& id) {
  return json{{"jsonrpc", "2.0"}, {"id", id}, {"method", method}, {"params", params}}.dump() + "\n";
}

json next_reply(RawClient& c, milliseconds timeout = std::chrono::seconds(20)) {
  auto line = c.read_line(timeout);
  if (!line) return nullptr;
  return json::parse(*line, nullptr, false);
}

void require_ok(const json& r) {
  INFO(r.dump());
  REQUIRE(r.is_object());
  REQUIRE(r.contains("result"));
}

void require_limit_error(const json& r, const std::string& limit, unsigned max) {
  INFO(r.dump());
  REQUIRE(r.is_object());
  REQUIRE(r.contains("error"));
  REQUIRE(r["error"]["code"] == rpc::error_code(fdo::Errc::resource_exhausted));
  REQUIRE(r["error"]["data"]["code"] == "resource_exhausted");
  REQUIRE(r["error"]["data"]["limit"] == limit);
  REQUIRE(r["error"]["data"]["max"] == max);
  REQUIRE_THAT(r["error"]["message"].get<std::string>(), Catch::Contains(limit));
}

// Sends `req` from a forked child running as uid/gid 65534 and returns its
// exit status: 0 when the first reply line contains `expect`. Everything the
// child touches is prepared before fork (the parent has threads running).
int as_other_uid(const std::string& socket_path, const std::string& req,
                 const std::string& expect) {
  constexpr uid_t kUid = 65534;
  constexpr gid_t kGid = 65534;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, socket_path.c_str(), sizeof addr.sun_path - 1);
  const char* req_bytes = req.c_str();
  std::size_t req_len = req.size();
  const char* expect_text = expect.c_str();
  pid_t pid = ::fork();
  if (pid == 0) {
    gid_t groups[1] = {kGid};
    if (::setgroups(1, groups) != 0 || ::setgid(kGid) != 0 || ::setuid(kUid) != 0) ::_exit(10);
    int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) ::_exit(12);
    if (::write(fd, req_bytes, req_len) != ssize_t(req_len)) ::_exit(13);
    char buf[1024] = {};
    std::size_t got = 0;
    while (got < sizeof buf - 1) {
      ssize_t n = ::read(fd, buf + got, sizeof buf - 1 - got);
      if (n <= 0) break;
      got += static_cast<std::size_t>(n);
      if (std::memchr(buf, '\n', got)) break;
    }
    ::_exit(std::strstr(buf, expect_text) ? 0 : 14);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 100;
}

// Lets uid 65534 connect: the directory searchable, the socket's group its.
void open_socket_to_other_uid(const TempDir& dir, const std::string& socket_path) {
  REQUIRE(::chmod(dir.str().c_str(), 0755) == 0);
  REQUIRE(::chown(socket_path.c_str(), 0, 65534) == 0);
}

} // namespace

TEST_CASE("limits: control methods answer while every work thread a uid may hold is blocked",
          "[server]") {
  TempDir dir;
  Running srv(options_for(dir));
  // One uid holds at most three of the four work threads (handler_turns.h):
  // three blocked handlers take them; three more wait for this uid's turn.
  std::vector<RawClient> busy;
  for (int i = 0; i < 6; ++i) {
    busy.push_back(srv.client());
    REQUIRE(busy.back().send(request("block", json::object(), i)));
  }
  REQUIRE(srv.gate.entered_at_least(3));
  REQUIRE(eventually([&] { return srv.server->stats().handlers_running == 6; }));

  RawClient c = srv.client();
  for (int i = 0; i < 5; ++i) {
    auto start = Clock::now();
    json r = c.call("health", json::object(), i);
    auto took = std::chrono::duration_cast<milliseconds>(Clock::now() - start);
    require_ok(r);
    INFO("health took " << took.count() << " ms");
    REQUIRE(took < milliseconds(1000));
  }
  // A work request of the same uid on a fresh connection waits: the uid's
  // share of the pool really is full (the fourth thread stays free for others).
  RawClient w = srv.client();
  REQUIRE(w.send(request("echo", json{{"n", 1}}, "w")));
  REQUIRE(next_reply(w, milliseconds(300)).is_null());
  REQUIRE(srv.gate.entered() == 3);

  srv.gate.open();
  for (auto& b : busy)
    require_ok(next_reply(b));
  json r = next_reply(w);
  require_ok(r);
  REQUIRE(r["result"]["n"] == 1);
}

TEST_CASE("limits: immediate methods answer while every handler and control thread is blocked",
          "[server]") {
  TempDir dir;
  ServerOptions o = options_for(dir);
  // One work thread, which a single uid may hold (handler_turns.h).
  o.handler_threads = 1;
  o.limits.max_inflight_per_uid = 1;
  Running srv(o);
  // One blocked work handler (the uid's whole in-flight allowance, the whole
  // work pool) and two blocked control handlers: no pool thread is free.
  std::vector<RawClient> busy;
  busy.push_back(srv.client());
  REQUIRE(busy.back().send(request("block", json::object(), 0)));
  for (int i = 0; i < 2; ++i) {
    busy.push_back(srv.client());
    REQUIRE(busy.back().send(request("block_control", json::object(), 10 + i)));
  }
  REQUIRE(srv.gate.entered_at_least(3));
  // A work request is refused now: the limit really is reached.
  RawClient c = srv.client();
  require_limit_error(c.call("echo", json::object(), 1), "max_inflight_per_uid", 1);
  for (int i = 0; i < 5; ++i) {
    json r = c.call("ping", json::object(), 100 + i);
    require_ok(r);
    CHECK(r["result"]["pong"] == true);
    CHECK(r["result"]["uid"] == ::getuid());
  }
  // An unknown method is answered at once too.
  json unknown = c.call("no.such.method", json::object(), 7);
  REQUIRE(unknown.contains("error"));
  CHECK(unknown["error"]["code"] == rpc::method_not_found);
  srv.gate.open();
  for (auto& b : busy)
    require_ok(next_reply(b));
}

TEST_CASE("limits: an immediate method waits its turn behind earlier requests on its connection",
          "[server]") {
  TempDir dir;
  Running srv(options_for(dir));
  RawClient c = srv.client();
  REQUIRE(c.send(request("sleep", {{"ms", 200}}, 1) + request("ping", json::object(), 2) +
                 request("echo", {{"n", 3}}, 3) + request("ping", json::object(), 4)));
  for (int id = 1; id <= 4; ++id) {
    json r = next_reply(c);
    require_ok(r);
    CHECK(r["id"] == id);
  }
}

TEST_CASE("limits: work requests in flight are capped per uid across connections", "[server]") {
  TempDir dir;
  ServerOptions o = options_for(dir);
  o.limits.max_inflight_per_uid = 2;
  Running srv(std::move(o));
  RawClient a = srv.client();
  RawClient b = srv.client();
  RawClient c = srv.client();
  REQUIRE(a.send(request("block", json::object(), "a")));
  REQUIRE(b.send(request("block", json::object(), "b")));
  REQUIRE(srv.gate.entered_at_least(2));

  json refused = c.call("echo", json{{"n", 1}}, "c1");
  require_limit_error(refused, "max_inflight_per_uid", 2);
  REQUIRE(refused["id"] == "c1");
  // The connection survives, and control requests do not count.
  require_ok(c.call("health", json::object(), "c2"));
  require_limit_error(c.call("block", json::object(), "c3"), "max_inflight_per_uid", 2);
  // A refused notification gets no answer at all.
  REQUIRE(c.send(R"({"jsonrpc":"2.0","method":"echo","params":{}})"
                 "\n"));
  require_ok(c.call("health", json::object(), "c4"));
  REQUIRE(srv.server->stats().requests_refused == 3);

  srv.gate.open();
  require_ok(next_reply(a));
  require_ok(next_reply(b));
  // Each slot was given back before its reply was sent.
  json r = c.call("echo", json{{"n", 2}}, "c5");
  require_ok(r);
  REQUIRE(r["result"]["n"] == 2);
}

TEST_CASE("limits: a timed-out handler still counts until it returns", "[server]") {
  TempDir dir;
  ServerOptions o = options_for(dir);
  o.limits.max_inflight_per_uid = 1;
  o.limits.request_timeout = milliseconds(200);
  Running srv(std::move(o));
  RawClient c = srv.client();
  json r = c.call("block", json::object(), 1);
  REQUIRE(r["error"]["data"]["code"] == "timeout");
  // The client has its answer, but the handler still holds a thread.
  require_limit_error(c.call("echo", json::object(), 2), "max_inflight_per_uid", 1);
  srv.gate.open();
  REQUIRE(eventually([&] { return srv.server->stats().handlers_running == 0; }));
  require_ok(c.call("echo", json::object(), 3));
}

TEST_CASE("limits: connections are capped per uid - the refused one is told why", "[server]") {
  TempDir dir;
  ServerOptions o = options_for(dir);
  o.limits.max_connections_per_uid = 2;
  Running srv(std::move(o));
  std::optional<RawClient> a = srv.client();
  RawClient b = srv.client();
  require_ok(a->call("health", json::object(), 1));
  require_ok(b.call("health", json::object(), 2));

  RawClient refused = srv.client();
  json r = next_reply(refused);
  require_limit_error(r, "max_connections_per_uid", 2);
  REQUIRE(r["id"].is_null());
  REQUIRE(refused.closed_by_peer());
  REQUIRE(srv.server->stats().connections_refused == 1);
  REQUIRE(srv.server->stats().connections_open == 2);
  require_ok(b.call("echo", json::object(), 3)); // the admitted ones carry on

  // A client that sends its request straight away still reads the error line.
  // (Its send may fail with EPIPE if the refusal was quicker.)
  RawClient eager = srv.client();
  (void)eager.send(request("echo", json::object(), 4));
  require_limit_error(next_reply(eager), "max_connections_per_uid", 2);

  // Closing a connection gives its slot back.
  a.reset();
  REQUIRE(eventually([&] { return srv.server->stats().connections_open == 1; }));
  RawClient d = srv.client();
  require_ok(d.call("health", json::object(), 5));
}

TEST_CASE("limits: another uid is not held back by one at its limits", "[server]") {
  if (::geteuid() != 0) {
    FDO_SKIP("skipped: needs root to connect as a second uid (setuid in a forked child)");
  }
  TempDir dir;
  ServerOptions o = options_for(dir);
  o.limits.max_connections_per_uid = 2;
  o.limits.max_inflight_per_uid = 1;
  Running srv(std::move(o));
  const std::string path = srv.server->socket_path();
  open_socket_to_other_uid(dir, path);

  RawClient a = srv.client();
  RawClient b = srv.client();
  REQUIRE(a.send(request("block", json::object(), "a")));
  REQUIRE(srv.gate.entered_at_least(1));
  require_limit_error(b.call("echo", json::object(), "b"), "max_inflight_per_uid", 1);
  RawClient third = srv.client();
  require_limit_error(next_reply(third), "max_connections_per_uid", 2);

  // uid 0 is at both limits; uid 65534 connects and runs work.
  REQUIRE(as_other_uid(path, request("whoami", json::object(), 1), "\"uid\":65534") == 0);
  srv.gate.open();
  require_ok(next_reply(a));
}

TEST_CASE("limits: set_limits changes the per-uid limits and the deadlines", "[server]") {
  TempDir dir;
  ServerOptions o = options_for(dir);
  o.limits.max_connections_per_uid = 1;
  o.limits.max_inflight_per_uid = 1;
  Running srv(o);
  RawClient a = srv.client();
  REQUIRE(a.send(request("block", json::object(), "a")));
  REQUIRE(srv.gate.entered_at_least(1));
  RawClient refused = srv.client();
  require_limit_error(next_reply(refused), "max_connections_per_uid", 1);

  ServerLimits l = o.limits;
  l.max_connections_per_uid = 2;
  l.max_inflight_per_uid = 2;
  srv.server->set_limits(l);
  // Per-uid limits apply to the very next admission.
  RawClient b = srv.client();
  REQUIRE(b.send(request("block", json::object(), "b")));
  REQUIRE(srv.gate.entered_at_least(2));

  // Lowered below what is held: what was admitted stays, new work is refused.
  l.max_connections_per_uid = 3;
  l.max_inflight_per_uid = 1;
  l.idle_timeout = milliseconds(200);
  srv.server->set_limits(l);
  RawClient c = srv.client();
  require_limit_error(c.call("echo", json::object(), "c"), "max_inflight_per_uid", 1);
  srv.gate.open();
  require_ok(next_reply(a));
  require_ok(next_reply(b));
  // The new idle deadline applies from the next read on: every connection
  // is now closed by it.
  REQUIRE(a.closed_by_peer(std::chrono::seconds(5)));
  REQUIRE(b.closed_by_peer(std::chrono::seconds(5)));
  REQUIRE(c.closed_by_peer(std::chrono::seconds(5)));
  REQUIRE(srv.server->stats().closed_idle_timeout == 3);
}

TEST_CASE("limits: server_options and server_limits carry the configuration", "[server]") {
  Config c = Config::defaults();
  REQUIRE(c.set("control_threads", "3"));
  REQUIRE(c.set("max_connections_per_uid", "7"));
  REQUIRE(c.set("max_inflight_per_uid", "5"));
  REQUIRE(c.set("read_timeout_ms", "111"));
  REQUIRE(c.set("idle_timeout_ms", "222"));
  REQUIRE(c.set("write_timeout_ms", "333"));
  REQUIRE(c.set("max_unsent_bytes", "4444"));
  ServerOptions o = server_options(c);
  REQUIRE(o.control_threads == 3);
  REQUIRE(o.limits.max_connections_per_uid == 7);
  REQUIRE(o.limits.max_inflight_per_uid == 5);
  REQUIRE(o.limits.read_timeout == milliseconds(111));
  REQUIRE(o.limits.idle_timeout == milliseconds(222));
  REQUIRE(o.limits.write_timeout == milliseconds(333));
  REQUIRE(o.limits.max_unsent_bytes == 4444);
  REQUIRE(server_limits(Config::defaults()).max_inflight_per_uid == 16);

  TempDir dir;
  ServerOptions bad = options_for(dir);
  bad.control_threads = 0;
  Dispatcher d;
  REQUIRE_FALSE(Server::create(bad, d).has_value());
  bad = options_for(dir);
  bad.limits.write_timeout = milliseconds(0);
  REQUIRE_FALSE(Server::create(bad, d).has_value());
}

TEST_CASE("deadlines: a request line dribbled byte by byte is cut at read_timeout", "[server]") {
  TempDir dir;
  ServerOptions o = options_for(dir);
  o.limits.read_timeout = milliseconds(300);
  Running srv(std::move(o));
  RawClient c = srv.client();
  const std::string line = request("echo", json{{"pad", std::string(200, 'x')}}, 1);
  auto start = Clock::now();
  bool closed = false;
  for (std::size_t i = 0; i < line.size() - 1 && !closed; ++i) {
    c.send(std::string_view(&line[i], 1));
    pollfd p{c.fd(), POLLIN, 0};
    closed = ::poll(&p, 1, 40) > 0;
  }
  REQUIRE(closed);
  auto took = std::chrono::duration_cast<milliseconds>(Clock::now() - start);
  CHECK(took >= milliseconds(250));
  // Told why in one line, then closed.
  json r = next_reply(c);
  INFO(r.dump());
  REQUIRE(r["error"]["data"]["code"] == "timeout");
  REQUIRE(r["error"]["data"]["limit"] == "read_timeout_ms");
  REQUIRE(c.closed_by_peer());
  REQUIRE(srv.server->stats().closed_read_timeout == 1);
  REQUIRE(srv.server->stats().requests == 0);

  // Half a line and then silence is cut the same way.
  RawClient half = srv.client();
  REQUIRE(half.send(line.substr(0, 20)));
  REQUIRE(next_reply(half, std::chrono::seconds(5))["error"]["data"]["code"] == "timeout");
  REQUIRE(half.closed_by_peer());
  REQUIRE(srv.server->stats().closed_read_timeout == 2);
}

TEST_CASE("deadlines: time spent on earlier requests does not count against read_timeout",
          "[server]") {
  TempDir dir;
  ServerOptions o = options_for(dir);
  o.limits.read_timeout = milliseconds(400);
  Running srv(std::move(o));
  RawClient c = srv.client();
  // The second line begins in the same chunk as a request that takes longer
  // than the whole read deadline; the rest of it follows the first reply.
  const std::string second = request("echo", json{{"n", 2}}, 2);
  REQUIRE(c.send(request("sleep", json{{"ms", 1000}}, 1) + second.substr(0, 15)));
  require_ok(next_reply(c));
  REQUIRE(c.send(second.substr(15)));
  json r = next_reply(c);
  require_ok(r);
  REQUIRE(r["result"]["n"] == 2);
  REQUIRE(srv.server->stats().closed_read_timeout == 0);
}

TEST_CASE("deadlines: an idle connection is closed at idle_timeout - a busy one is not",
          "[server]") {
  TempDir dir;
  ServerOptions o = options_for(dir);
  o.limits.idle_timeout = milliseconds(300);
  Running srv(std::move(o));
  RawClient idle = srv.client();
  require_ok(idle.call("health", json::object(), 1));
  RawClient busy = srv.client();
  json r = busy.call("sleep", json{{"ms", 900}}, 2);
  require_ok(r);
  REQUIRE(idle.closed_by_peer(std::chrono::seconds(5)));
  require_ok(busy.call("health", json::object(), 3));
  REQUIRE(busy.closed_by_peer(std::chrono::seconds(5)));
  REQUIRE(srv.server->stats().closed_idle_timeout == 2);
  REQUIRE(eventually([&] { return srv.server->stats().connections_open == 0; }));
}

TEST_CASE("deadlines: a client that never reads stops being read - then write_timeout closes it",
          "[server]") {
  TempDir dir;
  ServerOptions o = options_for(dir);
  o.limits.write_timeout = milliseconds(300);
  o.limits.max_unsent_bytes = 64 * 1024;
  Running srv(std::move(o));
  RawClient c = srv.client();
  // 400 requests for 64 KiB replies (25 MiB) in one 24 KiB burst.
  constexpr int kRequests = 400;
  std::string burst;
  for (int i = 0; i < kRequests; ++i)
    burst += request("blob", json{{"bytes", 64 * 1024}}, i);
  REQUIRE(c.send(burst));
  REQUIRE(eventually([&] { return srv.server->stats().closed_write_timeout == 1; },
                     std::chrono::seconds(10)));
  ServerStats st = srv.server->stats();
  REQUIRE(st.reads_paused >= 1);
  // Only what the socket buffers and max_unsent_bytes hold was ever run.
  INFO("requests run: " << st.requests);
  REQUIRE(st.requests < kRequests / 2);
  REQUIRE(eventually([&] { return srv.server->stats().connections_open == 0; }));
}

TEST_CASE("deadlines: a slow reader gets every reply in order despite backpressure", "[server]") {
  TempDir dir;
  ServerOptions o = options_for(dir);
  o.limits.write_timeout = std::chrono::seconds(10);
  o.limits.max_unsent_bytes = 64 * 1024;
  Running srv(std::move(o));
  RawClient c = srv.client();
  constexpr int kRequests = 200;
  std::string burst;
  for (int i = 0; i < kRequests; ++i)
    burst += request("blob", json{{"bytes", 32 * 1024}}, i);
  REQUIRE(c.send(burst));
  REQUIRE(eventually([&] { return srv.server->stats().reads_paused >= 1; }));
  std::this_thread::sleep_for(milliseconds(100));
  REQUIRE(srv.server->stats().requests < kRequests);
  for (int i = 0; i < kRequests; ++i) {
    json r = next_reply(c);
    INFO("reply " << i);
    REQUIRE(r.is_object());
    REQUIRE(r["id"] == i);
    REQUIRE(r["result"]["blob"].get<std::string>().size() == 32 * 1024);
  }
  REQUIRE(srv.server->stats().closed_write_timeout == 0);
  require_ok(c.call("health", json::object(), "after"));
}
