// Descriptors sent with a request (SCM_RIGHTS; execute's memfd buffers,
// docs/fdod-protocol.md): which request they belong to, which methods take
// them, and that every refused or used one is closed.
#include "fdo/util/scm_rights.h"
#include "running_server.h"

#include <catch2/catch.hpp>
#include <dirent.h>
#include <fcntl.h>
#include <span>
#include <sys/mman.h>
#include <vector>

using namespace fdo::daemon;
using namespace fdo::daemon::testing;
using nlohmann::json;
using std::chrono::milliseconds;

namespace {

std::size_t open_fds() {
  std::size_t n = 0;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (::readdir(d) != nullptr)
      ++n;
    ::closedir(d);
  }
  return n;
}

// This process's open descriptors once the server has accepted `c` (its end
// of the connection counts too): after one answered call.
std::size_t open_fds_after_a_call(RawClient& c) {
  REQUIRE(c.call("echo", json::object()).contains("result"));
  return open_fds();
}

// The server closes a call's descriptors just after its reply may have gone
// out: wait a moment for the count to settle.
bool fds_back_to(std::size_t baseline) {
  for (int i = 0; i < 200; ++i) {
    if (open_fds() <= baseline) return true;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return false;
}

fdo::Fd memfd_with(std::string_view text) {
  fdo::Fd fd(::memfd_create("request-fds-test", MFD_CLOEXEC));
  REQUIRE(fd);
  REQUIRE(fdo::write_all(fd.get(), text));
  return fd;
}

// `bytes` with `fds` on their first byte (the protocol's rule), or on all of
// them in one sendmsg when whole_line.
enum class Carry { first_byte, whole_line };
void send_request_with_fds(int sock, std::string_view bytes, std::span<const int> fds,
                           Carry carry = Carry::first_byte) {
  const std::size_t head = carry == Carry::first_byte ? 1 : bytes.size();
  REQUIRE(fdo::send_with_fds(sock, bytes.substr(0, head), fds, MSG_NOSIGNAL) ==
          static_cast<ssize_t>(head));
  std::string_view rest = bytes.substr(head);
  while (!rest.empty()) {
    ssize_t n = ::send(sock, rest.data(), rest.size(), MSG_NOSIGNAL);
    REQUIRE(n > 0);
    rest.remove_prefix(static_cast<std::size_t>(n));
  }
}

std::string request(const std::string& method, const json& params, int id) {
  return json{{"jsonrpc", "2.0"}, {"id", id}, {"method", method}, {"params", params}}.dump() + "\n";
}

// A server whose "read_fds" method takes descriptors and answers with each
// one's text (read in a handler thread: a failure throws, no Catch2 there).
struct FdServer {
  FdServer() : r(options_for(dir)) {
    r.dispatcher.add(
        "read_fds",
        [](const json&, const CallContext& ctx) -> fdo::Expected<json> {
          json texts = json::array();
          if (ctx.request_fds != nullptr)
            for (const fdo::Fd& fd : *ctx.request_fds) {
              char buf[256] = {};
              ssize_t n = ::pread(fd.get(), buf, sizeof buf - 1, 0);
              if (n < 0) throw std::runtime_error("pread failed");
              texts.push_back(std::string(buf, static_cast<std::size_t>(n)));
            }
          return json{{"texts", texts}};
        },
        MethodClass::work, RequestFds::accepted);
  }
  TempDir dir;
  Running r;
};

std::vector<fdo::Fd> memfds(int n) {
  std::vector<fdo::Fd> out;
  for (int i = 0; i < n; ++i)
    out.push_back(memfd_with("buffer " + std::to_string(i)));
  return out;
}

std::vector<int> raw(const std::vector<fdo::Fd>& fds) {
  std::vector<int> out;
  for (const auto& fd : fds)
    out.push_back(fd.get());
  return out;
}

json reply(RawClient& c) {
  auto line = c.read_line();
  REQUIRE(line);
  return json::parse(*line);
}

} // namespace

TEST_CASE("request fds: a method that takes them gets the ones sent with its request",
          "[server][fds]") {
  FdServer s;
  RawClient c = s.r.client();
  const std::size_t baseline = open_fds_after_a_call(c);
  {
    auto fds = memfds(2);
    auto carry = GENERATE(Carry::first_byte, Carry::whole_line);
    send_request_with_fds(c.fd(), request("read_fds", json::object(), 1), raw(fds), carry);
    json r = reply(c);
    REQUIRE(r.contains("result"));
    CHECK(r["result"]["texts"] == json({"buffer 0", "buffer 1"}));
  }
  // Ours closed at the end of the block, the server's after the call.
  CHECK(fds_back_to(baseline));
  // The next request on the connection carries none.
  REQUIRE(c.send(request("read_fds", json::object(), 2)));
  CHECK(reply(c)["result"]["texts"] == json::array());
}

TEST_CASE("request fds: they belong to the request whose first byte carried them",
          "[server][fds]") {
  FdServer s;
  RawClient c = s.r.client();
  auto fds = memfds(1);
  // A pipelined request without fds, then one with: the read that takes the
  // descriptor may hold the end of the first line too.
  REQUIRE(c.send(request("read_fds", json::object(), 1)));
  send_request_with_fds(c.fd(), request("read_fds", json::object(), 2), raw(fds));
  json first = reply(c);
  json second = reply(c);
  CHECK(first["id"] == 1);
  CHECK(first["result"]["texts"] == json::array());
  CHECK(second["id"] == 2);
  CHECK(second["result"]["texts"] == json({"buffer 0"}));
}

TEST_CASE("request fds: a method that takes none refuses the request and closes them",
          "[server][fds]") {
  FdServer s;
  RawClient c = s.r.client();
  const std::size_t baseline = open_fds_after_a_call(c);
  for (const char* method : {"echo", "health"}) {
    INFO(method);
    {
      auto fds = memfds(2);
      send_request_with_fds(c.fd(), request(method, json::object(), 3), raw(fds));
    }
    json r = reply(c);
    REQUIRE(r.contains("error"));
    CHECK(r["id"] == 3);
    CHECK(r["error"]["code"] == -32602);
    CHECK_THAT(r["error"]["message"].get<std::string>(),
               Catch::Contains("takes no file descriptors") && Catch::Contains("2 came"));
    CHECK(fds_back_to(baseline));
  }
  CHECK(c.call("echo", {{"still", "served"}})["result"]["still"] == "served");
}

TEST_CASE("request fds: more than 16 on one request are refused and all closed", "[server][fds]") {
  FdServer s;
  RawClient c = s.r.client();
  const std::size_t baseline = open_fds_after_a_call(c);
  {
    auto fds = memfds(20);
    send_request_with_fds(c.fd(), request("read_fds", json::object(), 4), raw(fds));
  }
  json r = reply(c);
  REQUIRE(r.contains("error"));
  CHECK(r["id"] == 4);
  CHECK(r["error"]["data"]["code"] == "invalid_argument");
  CHECK(r["error"]["data"]["fds_max"] == 16);
  CHECK_THAT(r["error"]["message"].get<std::string>(), Catch::Contains("more than 16"));
  CHECK(fds_back_to(baseline));
  // Exactly 16 is fine.
  {
    auto fds = memfds(16);
    send_request_with_fds(c.fd(), request("read_fds", json::object(), 5), raw(fds));
  }
  CHECK(reply(c)["result"]["texts"].size() == 16);
  CHECK(fds_back_to(baseline));
}

TEST_CASE("request fds: descriptors with no request line get an error and are closed",
          "[server][fds]") {
  FdServer s;
  RawClient c = s.r.client();
  const std::size_t baseline = open_fds_after_a_call(c);
  {
    auto fds = memfds(1);
    send_request_with_fds(c.fd(), "\n", raw(fds));
  }
  json r = reply(c);
  REQUIRE(r.contains("error"));
  CHECK(r["id"].is_null());
  CHECK_THAT(r["error"]["message"].get<std::string>(), Catch::Contains("came with no request"));
  CHECK(fds_back_to(baseline));
  // With a line that is not JSON: its parse error, and the fds closed.
  {
    auto fds = memfds(1);
    send_request_with_fds(c.fd(), "{not json\n", raw(fds));
  }
  CHECK(reply(c)["error"]["code"] == -32700);
  CHECK(fds_back_to(baseline));
  CHECK(c.call("echo", {{"x", 1}})["result"]["x"] == 1);
}
