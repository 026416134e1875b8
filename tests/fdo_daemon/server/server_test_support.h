// Shared by the server tests and fdod_test_server: the test methods and a
// blocking raw Unix-socket client with timeouts (so a broken server fails a
// test instead of hanging it).
#pragma once

#include "fdo/daemon/jsonrpc.h"
#include "fdo/util/fd.h"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <poll.h>
#include <stdexcept>
#include <string>
#include <sys/socket.h>
#include <sys/un.h>
#include <thread>
#include <unistd.h>

namespace fdo::daemon::testing {

struct TestState {
  std::atomic<int> sleeps_started{0};
  std::atomic<int> sleeps_finished{0};
  std::atomic<bool> handler_on_io_thread{false};
  std::atomic<std::thread::id> io_thread{};
};

inline void add_test_methods(Dispatcher& d, TestState& state, bool activated = false) {
  d.add("health",
        [activated](const nlohmann::json&, const CallContext&) -> Expected<nlohmann::json> {
          return nlohmann::json{{"status", "ok"}, {"pid", ::getpid()}, {"activated", activated}};
        });
  d.add("echo", [](const nlohmann::json& params, const CallContext&) -> Expected<nlohmann::json> {
    return params;
  });
  d.add("whoami",
        [&state](const nlohmann::json&, const CallContext& ctx) -> Expected<nlohmann::json> {
          if (std::this_thread::get_id() == state.io_thread.load())
            state.handler_on_io_thread = true;
          return nlohmann::json{{"uid", ctx.uid}, {"gid", ctx.gid}, {"pid", ctx.pid}};
        });
  d.add("sleep",
        [&state](const nlohmann::json& params, const CallContext&) -> Expected<nlohmann::json> {
          FDO_TRY(std::uint64_t ms, require_param<std::uint64_t>(params, "ms"));
          ++state.sleeps_started;
          std::this_thread::sleep_for(std::chrono::milliseconds(ms));
          ++state.sleeps_finished;
          return nlohmann::json{{"slept_ms", ms}};
        });
  d.add("typed", [](const nlohmann::json& params, const CallContext&) -> Expected<nlohmann::json> {
    FDO_TRY(std::string name, require_param<std::string>(params, "name"));
    FDO_TRY(std::uint64_t count, optional_param<std::uint64_t>(params, "count", 1));
    return nlohmann::json{{"name", name}, {"count", count}};
  });
  d.add("fail", [](const nlohmann::json& params, const CallContext&) -> Expected<nlohmann::json> {
    FDO_TRY(std::string code, require_param<std::string>(params, "code"));
    auto errc = rpc::parse_errc(code);
    if (!errc) return make_error(Errc::invalid_argument, "unknown code " + code);
    return make_error(*errc, "failed on purpose");
  });
  d.add("sleeps", [&state](const nlohmann::json&, const CallContext&) -> Expected<nlohmann::json> {
    return nlohmann::json{{"started", state.sleeps_started.load()},
                          {"finished", state.sleeps_finished.load()}};
  });
  d.add("throw", [](const nlohmann::json&, const CallContext&) -> Expected<nlohmann::json> {
    throw std::runtime_error("boom");
  });
}

// Polls `pred` until it holds or `limit` passes; its last answer.
template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds limit = std::chrono::seconds(20)) {
  auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return pred();
}

// A blocking client over a raw AF_UNIX socket.
class RawClient {
public:
  static Expected<RawClient> connect(const std::string& path) {
    Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd) return Error::from_errno("socket", errno);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
      return Error::from_errno("connect " + path, errno);
    return RawClient(std::move(fd));
  }

  bool send(std::string_view bytes) {
    while (!bytes.empty()) {
      ssize_t n = ::send(fd_.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR) continue;
        return false;
      }
      bytes.remove_prefix(static_cast<std::size_t>(n));
    }
    return true;
  }

  // The next line, or nullopt on EOF, error or timeout.
  std::optional<std::string>
  read_line(std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    auto until = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      std::size_t nl = buf_.find('\n');
      if (nl != std::string::npos) {
        std::string line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return line;
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          until - std::chrono::steady_clock::now());
      if (left.count() <= 0) return std::nullopt;
      pollfd p{fd_.get(), POLLIN, 0};
      int r = ::poll(&p, 1, static_cast<int>(left.count()));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return std::nullopt;
      char tmp[65536];
      ssize_t n = ::recv(fd_.get(), tmp, sizeof tmp, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return std::nullopt;
      buf_.append(tmp, static_cast<std::size_t>(n));
    }
  }

  // True when the server closed the connection (EOF) within the timeout.
  bool closed_by_peer(std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    pollfd p{fd_.get(), POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return false;
    char c;
    return ::recv(fd_.get(), &c, 1, 0) == 0;
  }

  // Sends one request and parses the response line (null json on failure).
  nlohmann::json call(const std::string& method, const nlohmann::json& params,
                      const nlohmann::json& id = 1) {
    nlohmann::json req = {{"jsonrpc", "2.0"}, {"id", id}, {"method", method}, {"params", params}};
    if (!send(req.dump() + "\n")) return nullptr;
    auto line = read_line();
    if (!line) return nullptr;
    return nlohmann::json::parse(*line, nullptr, false);
  }

  void shutdown_write() { ::shutdown(fd_.get(), SHUT_WR); }
  int fd() const { return fd_.get(); }

private:
  explicit RawClient(Fd fd) : fd_(std::move(fd)) {}
  Fd fd_;
  std::string buf_;
};

} // namespace fdo::daemon::testing
