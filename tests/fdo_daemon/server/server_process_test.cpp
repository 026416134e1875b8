// The server as a process (fdod_test_server): SIGTERM drains and exits 0,
// SIGHUP does not disturb it, and systemd socket activation through
// systemd-socket-activate.
#include "server_test_support.h"
#include "support/skip.h"
#include "support/temp_dir.h"

#include <catch2/catch.hpp>
#include <csignal>
#include <cstdlib>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>
#include <vector>

extern char** environ;

using namespace fdo::daemon::testing;
using nlohmann::json;
using std::chrono::milliseconds;

namespace {

struct TempDir : fdo::test_support::TempDir {
  TempDir() : fdo::test_support::TempDir("fdo-proc") {}
};

// A child process killed (SIGKILL) and reaped if the test did not reap it.
struct Child {
  explicit Child(const std::vector<std::string>& argv) {
    std::vector<char*> args;
    for (const auto& a : argv)
      args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    int rc = ::posix_spawnp(&pid, args[0], nullptr, nullptr, args.data(), environ);
    if (rc != 0) pid = -1;
  }
  ~Child() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
  // Exit status, or -1 when it did not exit normally within the limit.
  int wait_exit(milliseconds limit = std::chrono::seconds(20)) {
    auto until = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < until) {
      int status = 0;
      pid_t r = ::waitpid(pid, &status, WNOHANG);
      if (r == pid) {
        pid = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(milliseconds(10));
    }
    return -1;
  }
  pid_t pid = -1;
};

std::optional<RawClient> connect_retry(const std::string& path) {
  for (int i = 0; i < 1000; ++i) {
    auto c = RawClient::connect(path);
    if (c) return std::move(*c);
    std::this_thread::sleep_for(milliseconds(10));
  }
  return std::nullopt;
}

bool have_program(const char* name) {
  std::string cmd = std::string("command -v ") + name + " >/dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

} // namespace

TEST_CASE("process: SIGHUP keeps serving - SIGTERM drains the in-flight request and exits 0",
          "[server][process]") {
  TempDir dir;
  std::string path = dir.file("fdod.sock");
  Child server(
      {FDO_TEST_SERVER, "--socket", path, "--state-dir", dir.str(), "--log-level", "warning"});
  REQUIRE(server.pid > 0);
  auto busy = connect_retry(path);
  REQUIRE(busy);
  auto probe = connect_retry(path);
  REQUIRE(probe);
  json h = probe->call("health", json::object());
  REQUIRE(h["result"]["status"] == "ok");
  REQUIRE(h["result"]["pid"] == server.pid);
  REQUIRE(h["result"]["activated"] == false);

  REQUIRE(::kill(server.pid, SIGHUP) == 0);
  REQUIRE(probe->call("health", json::object(), 2)["result"]["status"] == "ok");

  REQUIRE(busy->send(R"({"jsonrpc":"2.0","id":"drained","method":"sleep","params":{"ms":500}})"
                     "\n"));
  bool started = false;
  for (int i = 0; i < 2000 && !started; ++i) {
    json s = probe->call("sleeps", json::object(), 3);
    started = s["result"]["started"] == 1;
    if (!started) std::this_thread::sleep_for(milliseconds(5));
  }
  REQUIRE(started);
  REQUIRE(::kill(server.pid, SIGTERM) == 0);
  auto line = busy->read_line();
  REQUIRE(line);
  json r = json::parse(*line);
  REQUIRE(r["id"] == "drained");
  REQUIRE(r["result"]["slept_ms"] == 500);
  REQUIRE(server.wait_exit() == 0);
  struct stat st {};
  REQUIRE(::lstat(path.c_str(), &st) != 0);
}

TEST_CASE("process: socket activation through systemd-socket-activate", "[server][process]") {
  if (!have_program("systemd-socket-activate")) {
    FDO_SKIP("skipped: systemd-socket-activate is not installed (package systemd)");
  }
  TempDir dir;
  std::string path = dir.file("activated.sock");
  // --require-activation: the test server fails instead of binding its own
  // socket if LISTEN_FDS does not arrive; --socket points somewhere unusable.
  Child server({"systemd-socket-activate", "-l", path, FDO_TEST_SERVER, "--require-activation",
                "--socket", dir.file("not-used.sock"), "--log-level", "warning"});
  REQUIRE(server.pid > 0);
  auto c = connect_retry(path);
  REQUIRE(c);
  json h = c->call("health", json::object());
  REQUIRE(h["result"]["status"] == "ok");
  REQUIRE(h["result"]["activated"] == true);
  json who = c->call("whoami", json::object(), 2);
  REQUIRE(who["result"]["uid"] == ::getuid());
  struct stat st {};
  REQUIRE(::lstat(dir.file("not-used.sock").c_str(), &st) != 0);
  REQUIRE(::kill(server.pid, SIGTERM) == 0);
  REQUIRE(server.wait_exit() == 0);
}
