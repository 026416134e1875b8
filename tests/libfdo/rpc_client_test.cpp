#include "fdo/client/rpc_client.h"
#include "tools/fake_daemon.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <sys/mman.h>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

using namespace fdo::client;
namespace test = fdo::ctl::test;
using fdo::Errc;
using nlohmann::json;

TEST_CASE("decode_reply: results and daemon errors") {
  auto ok = decode_reply(R"({"jsonrpc":"2.0","id":3,"result":{"x":1}})", 3, "m");
  REQUIRE(ok);
  REQUIRE(ok->answer);
  CHECK((*ok->answer)["x"] == 1);

  auto err = decode_reply(
      R"({"jsonrpc":"2.0","id":3,"error":{"code":-32001,"message":"no profile abc","data":{"code":"not_found"}}})",
      3, "profile.get");
  REQUIRE(err);
  REQUIRE_FALSE(err->answer);
  CHECK(err->answer.error().code() == Errc::not_found);
  CHECK(err->answer.error().message() == "no profile abc");

  // Without data.code the JSON-RPC code decides.
  auto params =
      decode_reply(R"({"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"bad"}})", 1, "m");
  REQUIRE(params);
  CHECK(params->answer.error().code() == Errc::invalid_argument);
  auto unknown = decode_reply(
      R"({"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"method not found"}})", 1,
      "profile.frobnicate", "fdoctl");
  REQUIRE(unknown);
  CHECK(unknown->answer.error().code() == Errc::unsupported);
  CHECK_THAT(unknown->answer.error().message(), Catch::Contains("older than fdoctl"));
  // An error the daemon could not attribute (id null) still answers us.
  auto oversized = decode_reply(
      R"({"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"too long","data":{"code":"resource_exhausted"}}})",
      9, "execute");
  REQUIRE(oversized);
  CHECK(oversized->answer.error().code() == Errc::resource_exhausted);
}

TEST_CASE("decode_reply: protocol violations") {
  CHECK(decode_reply("not json", 1, "m").error().code() == Errc::corrupt);
  CHECK(decode_reply("[1]", 1, "m").error().code() == Errc::corrupt);
  CHECK_FALSE(decode_reply(R"({"id":1,"result":1})", 1, "m"));
  CHECK_FALSE(decode_reply(R"({"jsonrpc":"2.0","id":1})", 1, "m"));
  CHECK_FALSE(decode_reply(R"({"jsonrpc":"2.0","id":1,"result":1,"error":{}})", 1, "m"));
  auto wrong_id = decode_reply(R"({"jsonrpc":"2.0","id":2,"result":1})", 1, "health");
  REQUIRE_FALSE(wrong_id);
  CHECK_THAT(wrong_id.error().message(),
             Catch::Contains("reply to health carries id 2, expected 1"));
}

TEST_CASE("errc_from_name inverts to_string") {
  CHECK(errc_from_name("not_found") == Errc::not_found);
  CHECK(errc_from_name("internal") == Errc::internal);
  CHECK(errc_from_name("pinned") == Errc::pinned);
  CHECK_FALSE(errc_from_name("nope"));
}

TEST_CASE("connecting to a missing socket says what to try") {
  test::TempDir dir;
  auto c = RpcClient::connect(dir.file("fdod.sock"));
  REQUIRE_FALSE(c);
  CHECK(c.error().code() == Errc::unavailable);
  CHECK_THAT(c.error().message(), Catch::Contains("cannot connect to " + dir.file("fdod.sock")));
  CHECK_THAT(c.error().message(), Catch::Contains("systemctl status fdod"));
  CHECK_THAT(c.error().message(), Catch::Contains("set FDO_SOCKET"));
  // A command line adds its flags to the advice.
  ClientOptions cli;
  cli.connect_hint = "pass --socket PATH; to read profiles while the daemon is down pass "
                     "--state-dir DIR";
  auto from_cli = RpcClient::connect(dir.file("fdod.sock"), cli);
  REQUIRE_FALSE(from_cli);
  CHECK_THAT(from_cli.error().message(), Catch::Contains("--state-dir"));
  auto too_long = RpcClient::connect("/tmp/" + std::string(200, 'x'));
  REQUIRE_FALSE(too_long);
  CHECK(too_long.error().code() == Errc::invalid_argument);
}

TEST_CASE("the default socket comes from FDO_SOCKET - else the systemd path") {
  ::setenv("FDO_SOCKET", "/tmp/elsewhere.sock", 1);
  CHECK(default_socket_path() == "/tmp/elsewhere.sock");
  ::unsetenv("FDO_SOCKET");
  CHECK(default_socket_path() == "/run/fdod/fdod.sock");
}

TEST_CASE("calls over a socket: results - errors - large replies - ids") {
  test::TempDir dir;
  std::string big(3 << 20, 'z');
  test::FakeDaemon d(dir.file("s.sock"), [&](const json& req) -> json {
    if (req["method"] == "health") return {{"result", {{"status", "ok"}}}};
    if (req["method"] == "big") return {{"result", {{"blob", big}}}};
    return {
        {"error", {{"code", -32001}, {"message", "nothing"}, {"data", {{"code", "not_found"}}}}}};
  });
  auto c = RpcClient::connect(dir.file("s.sock"));
  REQUIRE(c);
  auto h = c->call("health");
  REQUIRE(h);
  CHECK((*h)["status"] == "ok");
  auto e = c->call("profile.get", {{"profile_key", "x"}});
  REQUIRE_FALSE(e);
  CHECK(e.error().code() == Errc::not_found);
  auto b = c->call("big");
  REQUIRE(b);
  CHECK((*b)["blob"].get<std::string>().size() == big.size());
  auto again = c->call("health"); // the connection survives a daemon error
  REQUIRE(again);
  auto reqs = d.requests();
  REQUIRE(reqs.size() == 4);
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    CHECK(reqs[i]["jsonrpc"] == "2.0");
    CHECK(reqs[i]["id"] == static_cast<int>(i + 1));
  }
  CHECK(reqs[1]["params"]["profile_key"] == "x");
}

TEST_CASE("a connection the daemon drops fails this call and the next one clearly") {
  test::TempDir dir;
  test::FakeDaemon d(dir.file("s.sock"), test::FakeDaemon::Raw::lines, [](const std::string&) {
    return std::string(); // close without answering
  });
  auto c = RpcClient::connect(dir.file("s.sock"));
  REQUIRE(c);
  auto r = c->call("execute");
  REQUIRE_FALSE(r);
  CHECK(r.error().code() == Errc::io);
  CHECK_THAT(r.error().message(),
             Catch::Contains("closed the connection before answering execute"));
  auto next = c->call("health");
  REQUIRE_FALSE(next);
  CHECK_THAT(next.error().message(), Catch::Contains("broke on an earlier request"));
}

TEST_CASE("a garbled reply is a protocol error") {
  test::TempDir dir;
  test::FakeDaemon d(dir.file("s.sock"), test::FakeDaemon::Raw::lines, [](const std::string&) {
    return std::string("{\"jsonrpc\":\"2.0\",\"id\":77,\"result\":1}");
  });
  auto c = RpcClient::connect(dir.file("s.sock"));
  REQUIRE(c);
  auto r = c->call("health");
  REQUIRE_FALSE(r);
  CHECK(r.error().code() == Errc::corrupt);
}

TEST_CASE("no reply within the timeout") {
  test::TempDir dir;
  test::FakeDaemon d(dir.file("s.sock"), test::FakeDaemon::Raw::lines, [](const std::string&) {
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    return std::string("{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":1}");
  });
  ClientOptions o;
  o.timeout = std::chrono::milliseconds(50);
  auto c = RpcClient::connect(dir.file("s.sock"), o);
  REQUIRE(c);
  auto r = c->call("execute");
  REQUIRE_FALSE(r);
  CHECK(r.error().code() == Errc::timeout);
  CHECK_THAT(r.error().message(),
             Catch::Contains("within 50 ms") && Catch::Contains("raise the connection's timeout"));
}

namespace {

// Open descriptors of this process (the test's own socket ends included).
std::size_t open_fd_count() {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd"))
    ++n;
  return n;
}

// Catch2's assertions are not thread-safe: the fake daemon threads below use
// this instead, and a failed step ends the test binary loudly.
void must(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "rpc_client_test: fake daemon: %s failed: %s\n", what, std::strerror(errno));
  std::abort();
}

// A memfd holding `text`.
fdo::Fd memfd_with(const std::string& text) {
  fdo::Fd fd(::memfd_create("rpc-client-test", MFD_CLOEXEC));
  must(static_cast<bool>(fd), "memfd_create");
  must(::write(fd.get(), text.data(), text.size()) == static_cast<ssize_t>(text.size()),
       "write memfd");
  return fd;
}

std::string read_all(int fd) {
  std::string out;
  char buf[256];
  ssize_t n;
  off_t off = 0;
  while ((n = ::pread(fd, buf, sizeof buf, off)) > 0) {
    out.append(buf, static_cast<std::size_t>(n));
    off += n;
  }
  return out;
}

// Sends `bytes` with `fds` attached as SCM_RIGHTS in one sendmsg.
void send_with_fds(int sock, const std::string& bytes, const std::vector<int>& fds) {
  iovec iov{const_cast<char*>(bytes.data()), bytes.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  std::vector<char> control(CMSG_SPACE(sizeof(int) * fds.size()));
  if (!fds.empty()) {
    msg.msg_control = control.data();
    msg.msg_controllen = control.size();
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  must(::sendmsg(sock, &msg, MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size()), "sendmsg");
}

// Reads one request line from the server end.
json read_request(int sock) {
  std::string line;
  char ch;
  while (::read(sock, &ch, 1) == 1 && ch != '\n')
    line += ch;
  return json::parse(line);
}

struct SocketPair {
  fdo::Fd client, server;
  SocketPair() {
    int sv[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    client.reset(sv[0]);
    server.reset(sv[1]);
  }
};

} // namespace

TEST_CASE("file descriptors sent with a reply come back with it") {
  SocketPair sp;
  int server = sp.server.get();
  auto c = RpcClient::adopt(std::move(sp.client), "socketpair");
  const std::size_t baseline = open_fd_count();
  std::thread daemon([server] {
    // Reply 1: two memfds with the whole line.
    json req = read_request(server);
    fdo::Fd a = memfd_with("object-a"), b = memfd_with("object-b");
    std::string line = json{{"jsonrpc", "2.0"}, {"id", req["id"]}, {"result", {{"n", 2}}}}.dump();
    send_with_fds(server, line + "\n", {a.get(), b.get()});
    // Reply 2: the line in two writes, the descriptor with the second.
    req = read_request(server);
    fdo::Fd d = memfd_with("object-d");
    line = json{{"jsonrpc", "2.0"}, {"id", req["id"]}, {"result", {{"n", 1}}}}.dump();
    send_with_fds(server, line.substr(0, 10), {});
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    send_with_fds(server, line.substr(10) + "\n", {d.get()});
    // Reply 3: a descriptor the caller of call() does not want is closed.
    req = read_request(server);
    fdo::Fd e = memfd_with("object-e");
    line = json{{"jsonrpc", "2.0"}, {"id", req["id"]}, {"result", 0}}.dump();
    send_with_fds(server, line + "\n", {e.get()});
  });
  auto r1 = c.call_with_fds("object.fetch", {{"k", 1}});
  REQUIRE(r1);
  CHECK(r1->result["n"] == 2);
  REQUIRE(r1->fds.size() == 2);
  CHECK(read_all(r1->fds[0].get()) == "object-a");
  CHECK(read_all(r1->fds[1].get()) == "object-b");
  CHECK((::fcntl(r1->fds[0].get(), F_GETFD) & FD_CLOEXEC) != 0);
  auto r2 = c.call_with_fds("object.fetch");
  REQUIRE(r2);
  REQUIRE(r2->fds.size() == 1);
  CHECK(read_all(r2->fds[0].get()) == "object-d");
  auto r3 = c.call("health");
  daemon.join();
  REQUIRE(r3);
  r1->fds.clear();
  r2->fds.clear();
  CHECK(open_fd_count() == baseline);
}

TEST_CASE("descriptors with no request waiting for them are closed") {
  SocketPair sp;
  int server = sp.server.get();
  auto c = RpcClient::adopt(std::move(sp.client), "socketpair");
  const std::size_t baseline = open_fd_count();
  std::thread daemon([server] {
    json req = read_request(server);
    std::string line = json{{"jsonrpc", "2.0"}, {"id", req["id"]}, {"result", 1}}.dump();
    send_with_fds(server, line + "\n", {});
    // Unasked for: a stale answer to request 1 with a descriptor.
    fdo::Fd stray = memfd_with("stray");
    send_with_fds(server, line + "\n", {stray.get()});
    read_request(server);
  });
  auto r1 = c.call_with_fds("health");
  REQUIRE(r1);
  CHECK(r1->fds.empty());
  // The next call reads the stale line: a protocol error, the connection is
  // dropped and the stray descriptor closed.
  auto r2 = c.call_with_fds("health");
  daemon.join();
  REQUIRE_FALSE(r2);
  CHECK(r2.error().code() == Errc::corrupt);
  CHECK_FALSE(c.connected());
  // The client's own socket end is gone too now.
  CHECK(open_fd_count() == baseline - 1);
}

TEST_CASE("a daemon error keeps its JSON-RPC code - message and data") {
  SocketPair sp;
  int server = sp.server.get();
  auto c = RpcClient::adopt(std::move(sp.client), "socketpair");
  std::thread daemon([server] {
    json req = read_request(server);
    json reply = {{"jsonrpc", "2.0"},
                  {"id", req["id"]},
                  {"error",
                   {{"code", -32010},
                    {"message", "protocol 9.0 is not 1.x"},
                    {"data", {{"code", "unsupported"}, {"server", {{"major", 1}}}}}}}};
    send_with_fds(server, reply.dump() + "\n", {});
  });
  auto r = c.exchange("hello", {{"client", "t"}});
  daemon.join();
  REQUIRE(r);
  REQUIRE_FALSE(r->answer);
  CHECK(r->answer.error().code() == Errc::unsupported);
  REQUIRE(r->failure);
  CHECK(r->failure->code == -32010);
  CHECK(r->failure->message == "protocol 9.0 is not 1.x");
  CHECK(r->failure->data["server"]["major"] == 1);
  CHECK(c.connected());
}
