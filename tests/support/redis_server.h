// A real redis-server for one test: runs in its own temp dir with no
// persistence (no RDB, no AOF), listening on a Unix socket there and, when
// asked, on a free loopback TCP port. It can be stopped and started again on
// the same addresses (a server going down and coming back) and frozen with
// SIGSTOP (a server that accepts connections but never answers). The
// destructor stops it. Tests check available() first and skip with
// skip_reason() where the package is missing (tools/setup.sh installs it).
#pragma once

#include "temp_dir.h"

#include <arpa/inet.h>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <netinet/in.h>
#include <stdexcept>
#include <string>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace fdo::test_support {

class RedisServer {
public:
  enum class Listen { unix_socket, unix_and_tcp };

  static constexpr const char* kBinary = "/usr/bin/redis-server";
  static bool available() { return ::access(kBinary, X_OK) == 0; }
  static std::string skip_reason() {
    return std::string("skipped: ") + kBinary + " is not installed (tools/setup.sh installs it)";
  }

  explicit RedisServer(Listen listen = Listen::unix_socket) : dir_("fdo-redis") {
    socket_ = dir_.file("redis.sock");
    if (listen == Listen::unix_and_tcp) port_ = free_loopback_port();
    start();
  }
  ~RedisServer() { stop(); }
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  // The tier's endpoint spellings (cache/include/fdo/cache/redis_tier.h).
  std::string unix_url() const { return "unix:" + socket_; }
  std::string tcp_url() const { return "redis://127.0.0.1:" + std::to_string(port_); }
  const std::string& socket_path() const { return socket_; }
  int port() const { return port_; } // 0 without TCP
  bool running() const { return pid_ > 0; }

  // Starts the server (again) and waits until its socket accepts connections.
  void start() {
    if (pid_ > 0) return;
    std::filesystem::remove(socket_);
    std::vector<std::string> args = {kBinary,
                                     "--port",
                                     std::to_string(port_),
                                     "--bind",
                                     "127.0.0.1",
                                     "--unixsocket",
                                     socket_,
                                     "--unixsocketperm",
                                     "700",
                                     "--save",
                                     "",
                                     "--appendonly",
                                     "no",
                                     "--dir",
                                     dir_.str(),
                                     "--logfile",
                                     dir_.file("redis.log"),
                                     "--daemonize",
                                     "no"};
    pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error("fork for redis-server failed");
    if (pid == 0) {
      std::vector<char*> argv;
      for (auto& a : args)
        argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(kBinary, argv.data());
      ::_exit(127);
    }
    pid_ = pid;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!accepts()) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        throw std::runtime_error("redis-server exited at start; see " + dir_.file("redis.log"));
      }
      if (std::chrono::steady_clock::now() > deadline) {
        stop();
        throw std::runtime_error("redis-server did not listen on " + socket_ + " within 10 s");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  // SIGTERM (SIGKILL after 5 s) and reap; a frozen server is thawed first.
  void stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGCONT);
    ::kill(pid_, SIGTERM);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    int status = 0;
    while (::waitpid(pid_, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    pid_ = -1;
  }

  // The kernel keeps accepting connections, the server answers nothing.
  void freeze() {
    if (pid_ > 0) ::kill(pid_, SIGSTOP);
  }
  void thaw() {
    if (pid_ > 0) ::kill(pid_, SIGCONT);
  }

private:
  bool accepts() const {
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return false;
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    socket_.copy(addr.sun_path, sizeof(addr.sun_path) - 1);
    bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    ::close(fd);
    return ok;
  }

  // A port the kernel just handed out on 127.0.0.1 (free unless another
  // process takes it before redis-server binds it).
  static int free_loopback_port() {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) throw std::runtime_error("socket() failed");
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      ::close(fd);
      throw std::runtime_error("could not find a free loopback port");
    }
    ::close(fd);
    return ntohs(addr.sin_port);
  }

  TempDir dir_;
  std::string socket_;
  int port_ = 0;
  pid_t pid_ = -1;
};

} // namespace fdo::test_support
