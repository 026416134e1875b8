// The socket server: NDJSON JSON-RPC 2.0 over a Unix stream socket, one
// session per connection, handlers on a thread pool, per-request deadlines,
// a request size limit, graceful drain on SIGTERM/SIGINT, SIGHUP reload,
// systemd socket activation and sd_notify readiness/watchdog.
//
// Threads: run() drives one I/O thread (accepting, reading, writing, timers,
// signals, watchdog pings); it never runs a handler. Handlers and request
// parsing run on `handler_threads` pool threads; periodic tasks (every()) and
// the reload callback run on one separate background thread, so a pool full of
// long compiles never starves them.
#pragma once

#include "fdo/daemon/config.h"
#include "fdo/daemon/jsonrpc.h"
#include "fdo/util/expected.h"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <sys/types.h>

namespace fdo::daemon {

enum class ListenMode {
  automatic,  // the socket from systemd if LISTEN_FDS passes one, else bind socket_path
  bind_path,  // always bind socket_path (ignore LISTEN_FDS)
  activation, // require a socket from systemd; error without one
};

enum class ListenSource { bound, activated };

enum class SignalHandling {
  install, // SIGTERM/SIGINT stop, SIGHUP reloads (what fdod wants)
  none,    // leave signal dispositions alone (embedders, some tests)
};

// Limits that may change while running (set_limits); they apply to requests
// and lines that start after the change.
struct ServerLimits {
  std::size_t max_request_bytes = 16u << 20;
  std::chrono::milliseconds request_timeout{120000};
  std::chrono::milliseconds drain_timeout{30000};
};

struct ServerOptions {
  std::string socket_path = "/run/fdod/fdod.sock";
  ListenMode listen = ListenMode::automatic;
  // Applied with chmod() after bind (before listen), whatever the umask.
  mode_t socket_mode = 0660;
  ServerLimits limits;
  unsigned handler_threads = 0; // 0 = 2 x hardware threads, at least 4
  SignalHandling signals = SignalHandling::install;
  // Called on SIGHUP on the background thread (e.g. reload_config + set_limits).
  std::function<void()> on_reload;
};

// socket, max_request_bytes, request_timeout_ms, drain_timeout_ms and
// handler_threads from a Config; on_reload is left empty.
ServerOptions server_options(const Config& config);
ServerLimits server_limits(const Config& config);

struct ServerStats {
  std::uint64_t connections_accepted = 0;
  std::uint64_t connections_open = 0;
  std::uint64_t requests = 0;           // lines handed to the dispatcher
  std::uint64_t requests_timed_out = 0; // answered with the deadline error
  std::uint64_t requests_oversized = 0; // lines over max_request_bytes
  std::uint64_t handlers_running = 0;   // including ones whose client already timed out
};

class Server {
public:
  // Binds (or adopts) the listening socket and starts the thread pools; no
  // request is served until run(). `dispatcher` must outlive the Server.
  // Binding refuses to replace anything that is not a socket and refuses to
  // start while another process listens on the path (Errc::already_exists);
  // a stale socket file left by a dead daemon is removed.
  static Expected<std::unique_ptr<Server>> create(ServerOptions options, Dispatcher& dispatcher);
  // Waits for handlers still running (after a drain timeout) to return.
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Serves until stop(), SIGTERM or SIGINT: sends READY=1, pings the watchdog,
  // and on stop sends STOPPING=1, stops accepting, removes the socket file it
  // created, lets in-flight requests finish (up to drain_timeout; requests
  // queued behind them on a connection are not started) and returns. A second
  // SIGTERM/SIGINT during the drain closes everything at once. Call once.
  Status run();
  // Thread-safe (not async-signal-safe); same effect as SIGTERM.
  void stop();

  // Runs `task` every `interval` on the background thread (next run scheduled
  // after the previous one returns). Exceptions are logged. Thread-safe; may
  // be called before run(). Tasks stop when the server stops; run a final
  // flush yourself after run() returns.
  void every(std::string name, std::chrono::milliseconds interval, std::function<void()> task);

  // Thread-safe.
  void set_limits(const ServerLimits& limits);
  ServerStats stats() const;

  // The path clients connect to (for an activated socket: the path systemd
  // bound, from getsockname).
  const std::string& socket_path() const;
  ListenSource listen_source() const;
  unsigned handler_threads() const;

  struct Impl;

private:
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

} // namespace fdo::daemon
