// A real Server on its own io thread in a temp dir, for the in-process server
// tests (server_test.cpp, request_fds_test.cpp).
#pragma once

#include "fdo/daemon/server.h"
#include "server_test_support.h"
#include "support/temp_dir.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <future>
#include <memory>
#include <thread>

namespace fdo::daemon::testing {

struct TempDir : fdo::test_support::TempDir {
  TempDir() : fdo::test_support::TempDir("fdo-srv") {}
};

// A Server running on its own thread (the io thread) for one test.
struct Running {
  Running(ServerOptions opts, bool add_methods = true) {
    if (add_methods) add_test_methods(dispatcher, state);
    auto s = Server::create(std::move(opts), dispatcher);
    if (!s) FAIL("Server::create: " << s.error().describe());
    server = std::move(*s);
    std::promise<std::thread::id> io_id;
    auto fut = io_id.get_future();
    thread = std::thread([this, p = std::move(io_id)]() mutable {
      p.set_value(std::this_thread::get_id());
      result = server->run();
      done = true;
    });
    state.io_thread = fut.get();
  }
  ~Running() {
    if (thread.joinable()) {
      server->stop();
      thread.join();
    }
  }
  void stop_and_join() {
    server->stop();
    thread.join();
  }
  RawClient client() {
    auto c = RawClient::connect(server->socket_path());
    if (!c) FAIL(c.error().describe());
    return std::move(*c);
  }

  Dispatcher dispatcher;
  TestState state;
  std::unique_ptr<Server> server;
  std::thread thread;
  fdo::Status result;
  std::atomic<bool> done{false};
};

inline ServerOptions options_for(const TempDir& dir) {
  ServerOptions o;
  o.socket_path = dir.file("fdod.sock");
  o.listen = ListenMode::bind_path;
  o.handler_threads = 4;
  o.signals = SignalHandling::none;
  o.limits.max_request_bytes = 4096;
  o.limits.request_timeout = std::chrono::seconds(20);
  o.limits.drain_timeout = std::chrono::seconds(20);
  return o;
}

} // namespace fdo::daemon::testing
