// Server::Impl, shared by server.cpp (listening, signals, shutdown, the
// public API) and session.cpp (one connection). Private to the library.
#pragma once

#include "fdo/daemon/server.h"
#include "fdo/daemon/tenant_limits.h"
#include "fdo/util/fd.h"
#include "handler_turns.h"

#include <algorithm>
#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

namespace fdo::daemon {

namespace asio = boost::asio;
using stream = asio::local::stream_protocol;
using boost::system::error_code;
using Clock = std::chrono::steady_clock;

std::string ms_text(std::chrono::milliseconds ms);
std::string id_text(const nlohmann::json& id);
// Writes as much of `line` as the socket takes now, without waiting, and
// says how much: a last word before closing a connection that may not be
// reading, or a reply its handler thread writes (the io thread sends the rest).
std::size_t send_now(int fd, std::string_view line);

class Session;

struct Periodic {
  Periodic(asio::io_context& io, std::string n, std::chrono::milliseconds i,
           std::function<void()> t)
      : name(std::move(n)), interval(i), task(std::move(t)), timer(io) {}
  std::string name;
  std::chrono::milliseconds interval;
  std::function<void()> task;
  asio::steady_timer timer;
};

struct Server::Impl {
  Impl(ServerOptions o, Dispatcher& d)
      : opts(std::move(o)), dispatcher(d), limits(opts.limits),
        tenants(TenantQuota{limits.max_connections_per_uid, limits.max_inflight_per_uid,
                            limits.max_buffered_bytes_per_uid}),
        acceptor(io), signals(io), watchdog_timer(io), drain_timer(io), accept_retry_timer(io),
        threads(opts.handler_threads != 0 ? opts.handler_threads
                                          : std::max(4u, 2 * std::thread::hardware_concurrency())),
        handlers(threads), control(opts.control_threads), background(1),
        turns(handlers, threads, threads > 1 ? threads - 1 : 1) {}

  ~Impl() {
    // Handlers may still be running after a drain timeout: wait for them
    // (they hold references to the dispatcher and post back into io). Jobs
    // not yet started are dropped: nothing new runs after shutdown.
    handlers.stop();
    control.stop();
    background.stop();
    handlers.join();
    control.join();
    background.join();
    release_socket_file();
  }

  // --- all below run on the io thread unless noted ---
  void start_accept();
  void on_accept(const error_code& ec, stream::socket socket);
  void refuse_connection(stream::socket& socket, const CallContext& peer, const Error& why);
  void arm_signals();
  void on_signal(const error_code& ec, int signo);
  void arm_watchdog(std::chrono::microseconds interval);
  void schedule(const std::shared_ptr<Periodic>& p);
  void begin_stop(const std::string& why);
  void force_finish(const std::string& why);
  void maybe_finish();
  void finish();
  void release_socket_file();
  void remove_session(Session* s);

  ServerOptions opts;
  Dispatcher& dispatcher;
  ServerLimits limits; // io thread's copy; set_limits posts changes here
  // Thread-safe; declared before io and the pools so that it outlives every
  // lease their pending jobs still hold while they are destroyed.
  TenantLimits tenants;

  asio::io_context io{1};
  stream::acceptor acceptor;
  asio::signal_set signals;
  asio::steady_timer watchdog_timer;
  asio::steady_timer drain_timer;
  asio::steady_timer accept_retry_timer;
  std::vector<std::shared_ptr<Periodic>> periodic;
  std::unordered_set<std::shared_ptr<Session>> sessions;

  std::string path;
  ListenSource source = ListenSource::bound;
  Fd lock; // held while we own the bound socket path
  dev_t sock_dev = 0;
  ino_t sock_ino = 0;

  bool ran = false;
  bool stopping = false;
  bool finished = false;
  std::uint64_t next_session_id = 1;
  std::uint64_t running_handlers = 0; // io thread's count (drain waits for 0)

  struct AtomicStats {
    std::atomic<std::uint64_t> accepted{0}, open{0}, requests{0}, timed_out{0}, oversized{0},
        running{0}, connections_refused{0}, requests_refused{0}, read_timeouts{0}, idle_timeouts{0},
        write_timeouts{0}, reads_paused{0}, buffer_refusals{0}, replies_by_handler{0},
        ends_unwoken{0};
  } stats;

  unsigned threads;
  // Declared last: destroyed (after join in ~Impl) before the io_context.
  asio::thread_pool handlers;
  asio::thread_pool control;
  asio::thread_pool background;
  // Work requests reach `handlers` through here: uids in turn, each holding
  // at most all threads but one (handler_turns.h).
  HandlerTurns turns;
};

} // namespace fdo::daemon
