#include "fake_daemon.h"
#include "fdo/ctl/client.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <thread>

using namespace fdo::ctl;
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
      "profile.frobnicate");
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
  CHECK_THAT(c.error().message(), Catch::Contains("--state-dir"));
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
  CHECK_THAT(r.error().message(), Catch::Contains("--timeout"));
}
