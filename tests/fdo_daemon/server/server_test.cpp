// The Asio server in-process: a real Server on a temp socket with the test
// methods, driven by raw Unix-socket clients.
#include "fdo/daemon/server.h"
#include "running_server.h"
#include "server_test_support.h"
#include "support/skip.h"
#include "support/temp_dir.h"

#include <catch2/catch.hpp>
#include <csignal>
#include <cstdlib>
#include <fcntl.h>
#include <future>
#include <grp.h>
#include <mutex>
#include <stdexcept>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>
#include <vector>

using namespace fdo::daemon;
using namespace fdo::daemon::testing;
using nlohmann::json;
using std::chrono::milliseconds;

namespace {

void require_health(RawClient& c, int id) {
  json r = c.call("health", json::object(), id);
  REQUIRE(r.is_object());
  REQUIRE(r["id"] == id);
  REQUIRE(r["result"]["status"] == "ok");
}

int error_code_of(const json& r) {
  REQUIRE(r.is_object());
  REQUIRE(r.contains("error"));
  return r["error"]["code"].get<int>();
}

} // namespace

TEST_CASE("server: bad input gets JSON-RPC errors and the connection keeps working", "[server]") {
  TempDir dir;
  Running srv(options_for(dir));
  RawClient c = srv.client();
  require_health(c, 1);

  SECTION("malformed JSON") {
    REQUIRE(c.send("{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\n"));
    json r = json::parse(*c.read_line());
    REQUIRE(error_code_of(r) == rpc::parse_error);
    REQUIRE(r["id"].is_null());
    require_health(c, 2);
  }
  SECTION("a line over max_request_bytes") {
    std::string big = R"({"jsonrpc":"2.0","id":6,"method":"echo","params":{"s":")" +
                      std::string(20000, 'a') + "\"}}\n";
    REQUIRE(c.send(big));
    json r = json::parse(*c.read_line());
    REQUIRE(error_code_of(r) == rpc::invalid_request);
    REQUIRE(r["id"].is_null());
    REQUIRE(r["error"]["data"]["code"] == "resource_exhausted");
    REQUIRE(r["error"]["data"]["limit_bytes"] == 4096);
    require_health(c, 3);
    REQUIRE(srv.server->stats().requests_oversized == 1);
  }
  SECTION("unknown method") {
    json r = c.call("no.such.method", json::object(), 7);
    REQUIRE(error_code_of(r) == rpc::method_not_found);
    REQUIRE(r["error"]["message"].get<std::string>().find("no.such.method") != std::string::npos);
    require_health(c, 4);
  }
  SECTION("wrong param types") {
    json r = c.call("typed", json{{"name", 12}}, 8);
    REQUIRE(error_code_of(r) == rpc::invalid_params);
    REQUIRE(r["id"] == 8);
    r = c.call("echo", json("scalar"), 9);
    REQUIRE(error_code_of(r) == rpc::invalid_params);
    require_health(c, 5);
  }
  SECTION("a throwing handler") {
    json r = c.call("throw", json::object(), 10);
    REQUIRE(error_code_of(r) == rpc::internal_error);
    REQUIRE(r["error"]["message"].get<std::string>().find("boom") != std::string::npos);
    require_health(c, 6);
  }
  SECTION("notifications are not answered; pipelined requests answer in order") {
    std::string batch;
    batch += R"({"jsonrpc":"2.0","method":"echo","params":{"n":1}})"
             "\n";
    batch += R"({"jsonrpc":"2.0","id":"a","method":"echo","params":{"n":2}})"
             "\r\n\n";
    batch += R"({"jsonrpc":"2.0","method":"no.such"})"
             "\n";
    batch += R"({"jsonrpc":"2.0","id":"b","method":"sleep","params":{"ms":50}})"
             "\n";
    batch += R"({"jsonrpc":"2.0","id":"c","method":"echo","params":{"n":3}})"
             "\n";
    REQUIRE(c.send(batch));
    json a = json::parse(*c.read_line());
    json b = json::parse(*c.read_line());
    json cc = json::parse(*c.read_line());
    REQUIRE(a["id"] == "a");
    REQUIRE(a["result"]["n"] == 2);
    REQUIRE(b["id"] == "b");
    REQUIRE(b["result"]["slept_ms"] == 50);
    REQUIRE(cc["id"] == "c");
    REQUIRE(cc["result"]["n"] == 3);
    require_health(c, 7);
  }
  SECTION("a batch is refused") {
    REQUIRE(c.send(R"([{"jsonrpc":"2.0","id":1,"method":"health"}])"
                   "\n"));
    json r = json::parse(*c.read_line());
    REQUIRE(error_code_of(r) == rpc::invalid_request);
    require_health(c, 8);
  }
}

TEST_CASE("server: a request past its deadline gets a timeout error - the connection lives",
          "[server]") {
  TempDir dir;
  ServerOptions o = options_for(dir);
  o.limits.request_timeout = milliseconds(200);
  Running srv(std::move(o));
  RawClient c = srv.client();
  json r = c.call("sleep", json{{"ms", 3000}}, "slow");
  REQUIRE(error_code_of(r) == rpc::error_code(fdo::Errc::timeout));
  REQUIRE(r["id"] == "slow");
  REQUIRE(r["error"]["data"]["code"] == "timeout");
  REQUIRE(r["error"]["data"]["timeout_ms"] == 200);
  // The handler is still running on a pool thread; the connection answers.
  REQUIRE(srv.state.sleeps_finished == 0);
  require_health(c, 2);
  REQUIRE(srv.server->stats().requests_timed_out == 1);
  // When the late handler finishes, nothing more is written on the connection.
  REQUIRE(eventually([&] { return srv.state.sleeps_finished == 1; }));
  require_health(c, 3);
}

TEST_CASE("server: peer credentials reach the handler - which runs off the io thread", "[server]") {
  TempDir dir;
  Running srv(options_for(dir));
  RawClient c = srv.client();
  json r = c.call("whoami", json::object());
  REQUIRE(r["result"]["uid"] == ::getuid());
  REQUIRE(r["result"]["gid"] == ::getgid());
  REQUIRE(r["result"]["pid"] == ::getpid());
  REQUIRE_FALSE(srv.state.handler_on_io_thread);
}

TEST_CASE("server: the socket file is created with mode 0660 whatever the umask", "[server]") {
  for (mode_t mask : {mode_t(0), mode_t(077), mode_t(022)}) {
    TempDir dir;
    mode_t old = ::umask(mask);
    Running srv(options_for(dir));
    ::umask(old);
    struct stat st {};
    REQUIRE(::stat(srv.server->socket_path().c_str(), &st) == 0);
    REQUIRE(S_ISSOCK(st.st_mode));
    REQUIRE((st.st_mode & 07777) == 0660);
    REQUIRE(srv.server->listen_source() == ListenSource::bound);
  }
}

TEST_CASE("server: 32 concurrent clients x 50 requests", "[server]") {
  TempDir dir;
  Running srv(options_for(dir));
  constexpr int kClients = 32;
  constexpr int kRequests = 50;
  std::vector<std::thread> threads;
  std::atomic<int> good{0};
  std::vector<std::string> failures(kClients);
  for (int t = 0; t < kClients; ++t) {
    threads.emplace_back([&, t] {
      auto c = RawClient::connect(srv.server->socket_path());
      if (!c) {
        failures[t] = c.error().describe();
        return;
      }
      for (int i = 0; i < kRequests; ++i) {
        json params = {{"client", t}, {"seq", i}, {"pad", std::string(t * 7 + i, 'p')}};
        std::string id = std::to_string(t) + ":" + std::to_string(i);
        json r = c->call("echo", params, id);
        if (!r.is_object() || r["id"] != id || r["result"] != params) {
          failures[t] = "bad response to " + id + ": " + r.dump();
          return;
        }
        ++good;
      }
    });
  }
  for (auto& th : threads)
    th.join();
  for (int t = 0; t < kClients; ++t) {
    INFO("client " << t);
    REQUIRE(failures[t].empty());
  }
  REQUIRE(good == kClients * kRequests);
  REQUIRE(srv.server->stats().connections_accepted == kClients);
  REQUIRE(srv.server->stats().requests == kClients * kRequests);
}

TEST_CASE("server: SIGTERM drains an in-flight request - then run() returns", "[server]") {
  TempDir dir;
  ServerOptions o = options_for(dir);
  o.signals = SignalHandling::install;
  Running srv(std::move(o));
  std::string path = srv.server->socket_path();
  RawClient busy = srv.client();
  RawClient idle = srv.client();
  require_health(idle, 1);
  REQUIRE(busy.send(R"({"jsonrpc":"2.0","id":"inflight","method":"sleep","params":{"ms":400}})"
                    "\n"));
  REQUIRE(eventually([&] { return srv.state.sleeps_started == 1; }));
  REQUIRE(::kill(::getpid(), SIGTERM) == 0);

  auto line = busy.read_line();
  REQUIRE(line);
  json r = json::parse(*line);
  REQUIRE(r["id"] == "inflight");
  REQUIRE(r["result"]["slept_ms"] == 400);
  REQUIRE(busy.closed_by_peer());
  REQUIRE(idle.closed_by_peer());
  srv.thread.join();
  REQUIRE(srv.result.has_value());
  // The socket file we created is gone; nothing listens any more.
  struct stat st {};
  REQUIRE(::lstat(path.c_str(), &st) != 0);
  REQUIRE_FALSE(RawClient::connect(path).has_value());
}

TEST_CASE("server: a drain that outlasts drain_timeout closes connections", "[server]") {
  TempDir dir;
  ServerOptions o = options_for(dir);
  o.limits.drain_timeout = milliseconds(100);
  Running srv(std::move(o));
  RawClient c = srv.client();
  REQUIRE(c.send(R"({"jsonrpc":"2.0","id":1,"method":"sleep","params":{"ms":2500}})"
                 "\n"));
  REQUIRE(eventually([&] { return srv.state.sleeps_started == 1; }));
  srv.server->stop();
  srv.thread.join();
  REQUIRE(srv.result.has_value());
  REQUIRE(srv.state.sleeps_finished == 0); // run() returned before the handler
  REQUIRE_FALSE(c.read_line());            // closed without an answer
}

TEST_CASE("server: requests queued behind the in-flight one are not started on stop", "[server]") {
  TempDir dir;
  Running srv(options_for(dir));
  RawClient c = srv.client();
  REQUIRE(c.send(R"({"jsonrpc":"2.0","id":1,"method":"sleep","params":{"ms":300}})"
                 "\n"
                 R"({"jsonrpc":"2.0","id":2,"method":"sleep","params":{"ms":300}})"
                 "\n"));
  REQUIRE(eventually([&] { return srv.state.sleeps_started == 1; }));
  srv.server->stop();
  json r = json::parse(*c.read_line());
  REQUIRE(r["id"] == 1);
  REQUIRE_FALSE(c.read_line());
  srv.thread.join();
  REQUIRE(srv.state.sleeps_started == 1);
}

TEST_CASE("server: a final line without newline is answered at half-close", "[server]") {
  TempDir dir;
  Running srv(options_for(dir));
  RawClient c = srv.client();
  REQUIRE(c.send(R"({"jsonrpc":"2.0","id":"last","method":"health"})"));
  c.shutdown_write();
  json r = json::parse(*c.read_line());
  REQUIRE(r["id"] == "last");
  REQUIRE(c.closed_by_peer());
}

TEST_CASE("server: set_limits changes the size limit for later lines", "[server]") {
  TempDir dir;
  Running srv(options_for(dir));
  RawClient c = srv.client();
  json big = {{"s", std::string(3000, 'x')}};
  REQUIRE(c.call("echo", big)["result"] == big);
  ServerLimits l;
  l.max_request_bytes = 1024;
  srv.server->set_limits(l);
  // The change reaches the io thread asynchronously: the next line may still
  // pass, the one after cannot.
  json r = c.call("echo", big, 2);
  if (!r.contains("error")) r = c.call("echo", big, 3);
  REQUIRE(error_code_of(r) == rpc::invalid_request);
  require_health(c, 4);
}

TEST_CASE("server: refuses to start over a live daemon - replaces a stale socket", "[server]") {
  TempDir dir;
  ServerOptions o = options_for(dir);
  Dispatcher d;

  SECTION("another Server holds the path") {
    Running first(o);
    auto second = Server::create(o, d);
    REQUIRE_FALSE(second.has_value());
    REQUIRE(second.error().code() == fdo::Errc::already_exists);
    REQUIRE_THAT(second.error().message(), Catch::Contains("already running"));
    RawClient c = first.client(); // the first one is untouched
    require_health(c, 1);
  }
  SECTION("some other process listens on the path") {
    fdo::Fd other(::socket(AF_UNIX, SOCK_STREAM, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strcpy(addr.sun_path, o.socket_path.c_str());
    REQUIRE(::bind(other.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    REQUIRE(::listen(other.get(), 4) == 0);
    auto s = Server::create(o, d);
    REQUIRE_FALSE(s.has_value());
    REQUIRE(s.error().code() == fdo::Errc::already_exists);
    REQUIRE_THAT(s.error().message(), Catch::Contains("already listening on " + o.socket_path));
  }
  SECTION("a stale socket file is removed") {
    {
      fdo::Fd dead(::socket(AF_UNIX, SOCK_STREAM, 0));
      sockaddr_un addr{};
      addr.sun_family = AF_UNIX;
      std::strcpy(addr.sun_path, o.socket_path.c_str());
      REQUIRE(::bind(dead.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    }
    Running srv(o);
    RawClient c = srv.client();
    require_health(c, 1);
  }
  SECTION("a regular file at the path is not replaced") {
    REQUIRE(fdo::write_file_atomic(o.socket_path, "precious", fdo::Durability::none));
    auto s = Server::create(o, d);
    REQUIRE_FALSE(s.has_value());
    REQUIRE_THAT(s.error().message(), Catch::Contains("is not a socket"));
    REQUIRE(*fdo::read_file(o.socket_path) == "precious");
  }
  SECTION("a path too long for sockaddr_un") {
    o.socket_path = dir.file(std::string(150, 'x'));
    auto s = Server::create(o, d);
    REQUIRE_FALSE(s.has_value());
    REQUIRE(s.error().code() == fdo::Errc::invalid_argument);
  }
  SECTION("activation required but not activated") {
    o.listen = ListenMode::activation;
    auto s = Server::create(o, d);
    REQUIRE_FALSE(s.has_value());
    REQUIRE_THAT(s.error().message(), Catch::Contains("LISTEN_FDS"));
  }
}

TEST_CASE("server: SIGHUP runs the reload callback - periodic tasks run in the background",
          "[server]") {
  TempDir dir;
  ServerOptions o = options_for(dir);
  o.signals = SignalHandling::install;
  std::atomic<int> reloads{0};
  std::atomic<std::thread::id> reload_thread{};
  o.on_reload = [&] {
    reload_thread = std::this_thread::get_id();
    ++reloads;
  };
  Running srv(std::move(o));
  std::atomic<int> ticks{0};
  std::atomic<bool> tick_on_io{false};
  srv.server->every("test tick", milliseconds(10), [&] {
    if (std::this_thread::get_id() == srv.state.io_thread.load()) tick_on_io = true;
    ++ticks;
    throw std::runtime_error("a failing task keeps being scheduled");
  });
  REQUIRE(eventually([&] { return ticks >= 3; }));
  REQUIRE_FALSE(tick_on_io);
  REQUIRE(::kill(::getpid(), SIGHUP) == 0);
  REQUIRE(eventually([&] { return reloads == 1; }));
  REQUIRE(reload_thread.load() != srv.state.io_thread.load());
  // The server still serves after the signal.
  RawClient c = srv.client();
  require_health(c, 1);
  srv.stop_and_join();
  int after_stop = ticks;
  std::this_thread::sleep_for(milliseconds(50));
  REQUIRE(ticks == after_stop);
}

TEST_CASE("server: sd_notify READY - WATCHDOG and STOPPING when NOTIFY_SOCKET is set", "[server]") {
  TempDir dir;
  std::string notify_path = dir.file("notify");
  fdo::Fd ns(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strcpy(addr.sun_path, notify_path.c_str());
  REQUIRE(::bind(ns.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  ::setenv("NOTIFY_SOCKET", notify_path.c_str(), 1);
  ::setenv("WATCHDOG_USEC", "100000", 1);
  ::unsetenv("WATCHDOG_PID");

  std::vector<std::string> messages;
  auto receive_until = [&](const std::string& needle) {
    for (int i = 0; i < 200; ++i) {
      pollfd p{ns.get(), POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      char buf[1024];
      ssize_t n = ::recv(ns.get(), buf, sizeof buf, 0);
      if (n <= 0) continue;
      messages.emplace_back(buf, static_cast<std::size_t>(n));
      if (messages.back().find(needle) != std::string::npos) return true;
    }
    return false;
  };
  {
    Running srv(options_for(dir));
    CHECK(receive_until("READY=1"));
    CHECK(messages.back().find("STATUS=listening on " + srv.server->socket_path()) !=
          std::string::npos);
    CHECK(receive_until("WATCHDOG=1"));
    CHECK(receive_until("WATCHDOG=1"));
    srv.stop_and_join();
    CHECK(receive_until("STOPPING=1"));
  }
  ::unsetenv("NOTIFY_SOCKET");
  ::unsetenv("WATCHDOG_USEC");
}

TEST_CASE("server: another uid is identified by SO_PEERCRED - mode 0660 keeps strangers out",
          "[server]") {
  if (::geteuid() != 0) {
    FDO_SKIP("skipped: needs root to connect as a second uid");
  }
  TempDir dir;
  REQUIRE(::chmod(dir.str().c_str(), 0755) == 0);
  Running srv(options_for(dir));
  const std::string path = srv.server->socket_path();
  constexpr uid_t kUid = 65534;
  constexpr gid_t kGid = 65534;

  // Everything the child needs is prepared before fork (no allocation after).
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strcpy(addr.sun_path, path.c_str());
  const char request[] = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"whoami\"}\n";
  const char expect_uid[] = "\"uid\":65534";
  auto run_child = [&](bool expect_denied) -> int {
    pid_t pid = ::fork();
    if (pid == 0) {
      gid_t groups[1] = {kGid};
      if (::setgroups(1, groups) != 0 || ::setgid(kGid) != 0 || ::setuid(kUid) != 0) ::_exit(10);
      int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
      int rc = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
      if (expect_denied) ::_exit(rc != 0 && errno == EACCES ? 0 : 11);
      if (rc != 0) ::_exit(12);
      if (::write(fd, request, sizeof request - 1) != ssize_t(sizeof request - 1)) ::_exit(13);
      char buf[512] = {};
      std::size_t got = 0;
      while (got < sizeof buf - 1) {
        ssize_t n = ::read(fd, buf + got, sizeof buf - 1 - got);
        if (n <= 0) break;
        got += static_cast<std::size_t>(n);
        if (std::memchr(buf, '\n', got)) break;
      }
      ::_exit(std::strstr(buf, expect_uid) ? 0 : 14);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 100;
  };
  // Owned by root:root with 0660: uid 65534 may not connect.
  REQUIRE(run_child(true) == 0);
  // Give the socket's group to 65534: now it may, and is seen as uid 65534.
  REQUIRE(::chown(path.c_str(), 0, kGid) == 0);
  REQUIRE(run_child(false) == 0);
}

namespace {

// One reply line read with recvmsg, with the descriptors that came with it.
struct LineWithFds {
  std::string line;
  std::vector<fdo::Fd> fds;
};

std::optional<LineWithFds> read_line_with_fds(int sock) {
  LineWithFds out;
  for (;;) {
    if (auto nl = out.line.find('\n'); nl != std::string::npos) {
      out.line.resize(nl);
      return out;
    }
    pollfd p{sock, POLLIN, 0};
    if (::poll(&p, 1, 20000) <= 0) return std::nullopt;
    // One byte at a time keeps this reader from running into the next reply.
    char c;
    iovec iov{&c, 1};
    alignas(cmsghdr) char control[CMSG_SPACE(8 * sizeof(int))];
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    ssize_t n = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
    if (n <= 0) return std::nullopt;
    for (cmsghdr* cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm))
      if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS)
        for (std::size_t i = 0; i < (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int); ++i) {
          int fd;
          std::memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof fd);
          out.fds.emplace_back(fd);
        }
    out.line.push_back(c);
  }
}

// Runs in handler threads, where Catch2's assertions must not be used (they
// are not thread-safe): a failure throws, and the server turns the handler's
// exception into an error reply, which the test's checks then see.
fdo::Fd memfd_with(std::string_view text) {
  fdo::Fd fd(::memfd_create("server-test", MFD_CLOEXEC));
  if (!fd) throw std::runtime_error("memfd_create failed");
  if (!fdo::write_all(fd.get(), text)) throw std::runtime_error("writing the memfd failed");
  return fd;
}

} // namespace

TEST_CASE("a reply carries the handler's fds on its first byte, a failed one carries none",
          "[server][fds]") {
  TempDir dir;
  std::mutex mu;
  std::vector<std::uint64_t> closed;
  Running r(options_for(dir), false);
  r.dispatcher.add("memfd", [](const json& p, const CallContext& ctx) -> fdo::Expected<json> {
    if (!ctx.reply_fds) return fdo::make_error(fdo::Errc::unsupported, "no fd transport");
    ctx.reply_fds->push_back(memfd_with(p.value("text", "")));
    return json{{"fds", 1}, {"connection", ctx.connection}};
  });
  r.dispatcher.add("memfd_fail", [](const json&, const CallContext& ctx) -> fdo::Expected<json> {
    ctx.reply_fds->push_back(memfd_with("never sent"));
    return fdo::make_error(fdo::Errc::invalid_argument, "refused after attaching an fd");
  });
  r.dispatcher.on_disconnect([&](std::uint64_t c) {
    std::lock_guard lk(mu);
    closed.push_back(c);
  });
  auto c = r.client();
  auto call = [&](const std::string& method, const json& params) {
    json req = {{"jsonrpc", "2.0"}, {"id", 1}, {"method", method}, {"params", params}};
    REQUIRE(c.send(req.dump() + "\n"));
    auto got = read_line_with_fds(c.fd());
    REQUIRE(got);
    return std::move(*got);
  };

  LineWithFds ok = call("memfd", {{"text", "compiled object bytes"}});
  json reply = json::parse(ok.line);
  REQUIRE(reply.contains("result"));
  REQUIRE(ok.fds.size() == 1);
  char buf[64] = {};
  REQUIRE(::pread(ok.fds[0].get(), buf, sizeof buf, 0) == 21);
  CHECK(std::string(buf) == "compiled object bytes");
  const std::uint64_t connection = reply["result"]["connection"];
  CHECK(connection != 0);

  LineWithFds failed = call("memfd_fail", json::object());
  CHECK(json::parse(failed.line).contains("error"));
  CHECK(failed.fds.empty());
  // Plain replies after it still arrive whole, without fds.
  LineWithFds again = call("memfd", {{"text", "x"}});
  CHECK(again.fds.size() == 1);
  {
    std::lock_guard lk(mu);
    CHECK(closed.empty());
  }

  c.shutdown_write();
  REQUIRE(c.closed_by_peer());
  // The hook runs once the session is gone, which may be just after EOF.
  for (int i = 0; i < 200; ++i) {
    {
      std::lock_guard lk(mu);
      if (!closed.empty()) break;
    }
    std::this_thread::sleep_for(milliseconds(10));
  }
  std::lock_guard lk(mu);
  CHECK(closed == std::vector<std::uint64_t>{connection});
}
