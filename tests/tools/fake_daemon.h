// A stand-in for fdod in unit tests: listens on a temp Unix socket and answers
// each request line with what a handler returns. Lets the client and the CLI
// be tested without building the daemon.
#pragma once

#include "support/temp_dir.h"

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <poll.h>
#include <stdexcept>
#include <string>
#include <sys/socket.h>
#include <sys/un.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace fdo::ctl::test {

// A temp directory removed (with its contents) on destruction.
struct TempDir : fdo::test_support::TempDir {
  TempDir() : fdo::test_support::TempDir("fdoctl-test") {}
};

class FakeDaemon {
public:
  // Returns the raw reply line (without '\n'); an empty string closes the
  // connection without answering.
  using RawHandler = std::function<std::string(const std::string& line)>;
  // Returns {"result": ...} or {"error": {...}}; id and jsonrpc are added.
  using Handler = std::function<nlohmann::json(const nlohmann::json& request)>;

  static RawHandler wrap(Handler h) {
    return [h](const std::string& line) {
      nlohmann::json req = nlohmann::json::parse(line);
      nlohmann::json reply = h(req);
      reply["jsonrpc"] = "2.0";
      reply["id"] = req["id"];
      return reply.dump();
    };
  }

  enum class Raw { lines };
  FakeDaemon(const std::string& path, Raw, RawHandler handler)
      : path_(path), handler_(std::move(handler)) {
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd_, 8) != 0)
      throw std::runtime_error("bind/listen " + path + ": " + std::strerror(errno));
    thread_ = std::thread([this] { serve(); });
  }
  FakeDaemon(const std::string& path, Handler handler)
      : FakeDaemon(path, Raw::lines, wrap(std::move(handler))) {}

  ~FakeDaemon() {
    stop_ = true;
    thread_.join();
    ::close(fd_);
    ::unlink(path_.c_str());
  }

  std::vector<nlohmann::json> requests() const {
    std::vector<nlohmann::json> out;
    std::lock_guard lk(mu_);
    for (const auto& l : lines_)
      out.push_back(nlohmann::json::parse(l, nullptr, false));
    return out;
  }

private:
  void serve() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      std::string buf;
      bool open = true;
      while (open && !stop_) {
        pollfd q{c, POLLIN, 0};
        if (::poll(&q, 1, 20) <= 0) continue;
        char chunk[65536];
        ssize_t n = ::read(c, chunk, sizeof chunk);
        if (n <= 0) break;
        buf.append(chunk, static_cast<std::size_t>(n));
        std::size_t nl;
        while ((nl = buf.find('\n')) != std::string::npos) {
          std::string line = buf.substr(0, nl);
          buf.erase(0, nl + 1);
          {
            std::lock_guard lk(mu_);
            lines_.push_back(line);
          }
          std::string reply = handler_(line);
          if (reply.empty()) {
            open = false;
            break;
          }
          reply += '\n';
          if (::send(c, reply.data(), reply.size(), MSG_NOSIGNAL) < 0) {
            open = false;
            break;
          }
        }
      }
      ::close(c);
    }
  }

  std::string path_;
  RawHandler handler_;
  int fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  mutable std::mutex mu_;
  std::vector<std::string> lines_;
};

} // namespace fdo::ctl::test
