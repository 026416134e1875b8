// The socket server: NDJSON JSON-RPC 2.0 over a Unix stream socket, one
// session per connection, handlers on thread pools, per-request deadlines,
// per-connection read, idle and write deadlines, per-uid connection and
// in-flight limits, a request size limit, bounded unsent replies, graceful
// drain on SIGTERM/SIGINT, SIGHUP reload, systemd socket activation and
// sd_notify readiness/watchdog.
//
// Threads: run() drives one I/O thread (accepting, reading, writing, timers,
// signals, watchdog pings); it runs no handler but immediate ones
// (MethodClass::immediate: health, capabilities, unknown methods), answered
// there as soon as their line is parsed, with no hand-off. Work handlers and the
// parsing of large request lines run on `handler_threads` pool threads;
// control handlers (MethodClass::control) and the parsing of small lines run
// on `control_threads` threads of their own, so health answers while every
// work thread is blocked. Periodic tasks (every()) and the reload callback run
// on one separate background thread, so a pool full of long compiles never
// starves them.
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

// Limits that may change while running (set_limits); they apply to requests,
// lines, reads and writes that start after the change (per-uid limits to the
// next admission: connections and requests already admitted are kept).
struct ServerLimits {
  std::size_t max_request_bytes = 16u << 20;
  std::chrono::milliseconds request_timeout{120000};
  std::chrono::milliseconds drain_timeout{30000};
  // Per peer uid, across all of its connections; 0 = no limit. No uid is
  // exempt.
  unsigned max_connections_per_uid = 64;
  // Work requests queued for or running on a handler thread, counted until
  // the handler returns (even after its client was sent a timeout). Control
  // requests do not count. 0 = no limit, the library's default: how many
  // requests a tenant may sensibly run at once depends on the methods served;
  // fdod sets 16 (max_inflight_per_uid).
  unsigned max_inflight_per_uid = 0;
  // A request line that has begun must be complete after this much time
  // spent waiting for its bytes (time the connection spends running earlier
  // requests does not count), else the connection is closed.
  std::chrono::milliseconds read_timeout{30000};
  // A connection waiting for a request with no line begun is closed after
  // this long without a byte from the client.
  std::chrono::milliseconds idle_timeout{600000};
  // A reply the client has not taken in full by then closes the connection.
  std::chrono::milliseconds write_timeout{30000};
  // While more reply bytes than this wait to be sent on a connection, its
  // further requests are neither read nor started (0: one reply at a time).
  std::size_t max_unsent_bytes = 4u << 20;
  // Bytes one uid's connections may hold at once: request lines being read
  // and replies not yet sent. A read that would pass it gets a
  // resource_exhausted line and its connection is closed. 0 = no limit (the
  // library's default; fdod sets max_buffered_bytes_per_uid).
  std::uint64_t max_buffered_bytes_per_uid = 0;
};

struct ServerOptions {
  std::string socket_path = "/run/fdod/fdod.sock";
  ListenMode listen = ListenMode::automatic;
  // Applied with chmod() after bind (before listen), whatever the umask.
  mode_t socket_mode = 0660;
  ServerLimits limits;
  unsigned handler_threads = 0; // 0 = 2 x hardware threads, at least 4
  unsigned control_threads = 2; // for MethodClass::control handlers; at least 1
  SignalHandling signals = SignalHandling::install;
  // Called on SIGHUP on the background thread (e.g. reload_config + set_limits).
  std::function<void()> on_reload;
};

// socket, handler_threads, control_threads and the limits from a Config;
// on_reload is left empty.
ServerOptions server_options(const Config& config);
ServerLimits server_limits(const Config& config);

struct ServerStats {
  std::uint64_t connections_accepted = 0;
  std::uint64_t connections_open = 0;
  std::uint64_t requests = 0;                // lines handed to the dispatcher
  std::uint64_t requests_timed_out = 0;      // answered with the deadline error
  std::uint64_t requests_oversized = 0;      // lines over max_request_bytes
  std::uint64_t handlers_running = 0;        // including ones whose client already timed out
  std::uint64_t connections_refused = 0;     // over max_connections_per_uid (told, then closed)
  std::uint64_t requests_refused = 0;        // over max_inflight_per_uid (answered with an error)
  std::uint64_t closed_read_timeout = 0;     // a request line incomplete after read_timeout
  std::uint64_t closed_idle_timeout = 0;     // nothing from the client for idle_timeout
  std::uint64_t closed_write_timeout = 0;    // a reply not taken within write_timeout
  std::uint64_t reads_paused = 0;            // times a connection stopped reading: unsent replies
                                             // over max_unsent_bytes
  std::uint64_t closed_over_byte_budget = 0; // a read took its uid past max_buffered_bytes_per_uid
  std::uint64_t replies_by_handler = 0;      // written whole by the handler thread that made them
  std::uint64_t call_ends_unwoken = 0;       // of those, taken by the io thread without a wake-up
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

  // Thread-safe. The per-uid limits apply to the next admission at once; the
  // rest reach the io thread asynchronously.
  void set_limits(const ServerLimits& limits);
  ServerStats stats() const;

  // The path clients connect to (for an activated socket: the path systemd
  // bound, from getsockname).
  const std::string& socket_path() const;
  ListenSource listen_source() const;
  unsigned handler_threads() const;
  unsigned control_threads() const;

  struct Impl;

private:
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

} // namespace fdo::daemon
