#include "fdo/daemon/server.h"

#include "fdo/daemon/systemd.h"
#include "fdo/util/log.h"
#include "server_impl.h"
#include "session.h"

#include <boost/asio/post.hpp>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <optional>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

namespace fdo::daemon {

ServerLimits server_limits(const Config& config) {
  ServerLimits l;
  l.max_request_bytes = static_cast<std::size_t>(config.max_request_bytes);
  l.request_timeout = config.request_timeout;
  l.drain_timeout = config.drain_timeout;
  l.max_connections_per_uid = config.max_connections_per_uid;
  l.max_inflight_per_uid = config.max_inflight_per_uid;
  l.read_timeout = config.read_timeout;
  l.idle_timeout = config.idle_timeout;
  l.write_timeout = config.write_timeout;
  l.max_unsent_bytes = static_cast<std::size_t>(config.max_unsent_bytes);
  l.max_buffered_bytes_per_uid = config.max_buffered_bytes_per_uid;
  return l;
}

ServerOptions server_options(const Config& config) {
  ServerOptions o;
  o.socket_path = config.socket;
  o.limits = server_limits(config);
  o.handler_threads = config.effective_handler_threads();
  o.control_threads = config.control_threads;
  return o;
}

std::string ms_text(std::chrono::milliseconds ms) {
  return std::to_string(ms.count()) + " ms";
}

std::string id_text(const nlohmann::json& id) {
  return id.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::size_t send_now(int fd, std::string_view line) {
  // MSG_DONTWAIT: a client that does not read gets nothing rather than a
  // blocked thread; a short write leaves it a truncated last line.
  std::size_t sent = 0;
  while (sent < line.size()) {
    ssize_t n = ::send(fd, line.data() + sent, line.size() - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    sent += static_cast<std::size_t>(n);
  }
  return sent;
}

namespace {

// A listening socket bound to a path by us, with the lock that makes the
// stale-socket check and the bind one step for competing daemons.
struct BoundSocket {
  Fd listener;
  Fd lock;
  dev_t dev = 0;
  ino_t ino = 0;
};

Error sys_error(const std::string& what) {
  return Error::from_errno(what, errno);
}

Expected<BoundSocket> bind_unix_socket(const std::string& path, mode_t mode) {
  sockaddr_un addr{};
  if (path.empty() || path.size() >= sizeof addr.sun_path)
    return make_error(Errc::invalid_argument, "socket path '" + path + "' must be 1 to " +
                                                  std::to_string(sizeof addr.sun_path - 1) +
                                                  " bytes long");
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());

  BoundSocket out;
  FDO_TRY(out.lock, Fd::open(path + ".lock", O_RDWR | O_CREAT, 0600));
  if (::flock(out.lock.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK)
      return make_error(Errc::already_exists, "another daemon holds " + path +
                                                  ".lock; is fdod already running on " + path +
                                                  "?");
    return sys_error("flock " + path + ".lock");
  }

  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode))
      return make_error(Errc::already_exists,
                        path + " exists and is not a socket; refusing to replace it");
    Fd probe(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!probe) return sys_error("socket");
    if (::connect(probe.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0)
      return make_error(Errc::already_exists,
                        "another daemon is already listening on " + path + "; not starting");
    if (errno != ECONNREFUSED && errno != ENOENT)
      return sys_error("probe connect to existing socket " + path);
    if (::unlink(path.c_str()) != 0 && errno != ENOENT)
      return sys_error("remove stale socket " + path);
    log::info("removed stale socket " + path + " (nothing was listening)");
  } else if (errno != ENOENT) {
    return sys_error("lstat " + path);
  }

  out.listener = Fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!out.listener) return sys_error("socket");
  if (::bind(out.listener.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0)
    return sys_error("bind " + path);
  // The socket file exists from here on; take it away again on any failure.
  auto fail = [&](Error e) {
    ::unlink(path.c_str());
    return e;
  };
  // bind() created the file with 0777 & ~umask; set the mode we promise
  // before listen() so no client can connect under a looser mode.
  if (::chmod(path.c_str(), mode) != 0) return fail(sys_error("chmod " + path));
  if (::listen(out.listener.get(), SOMAXCONN) != 0) return fail(sys_error("listen on " + path));
  if (::stat(path.c_str(), &st) != 0) return fail(sys_error("stat " + path));
  out.dev = st.st_dev;
  out.ino = st.st_ino;
  return out;
}

// asio installs its signal handlers without SA_RESTART, so every blocking
// system call in a handler thread (waitpid, read from a worker, sqlite) would
// fail with EINTR on SIGHUP. Restartable calls should just restart.
void add_sa_restart(int signo) {
  struct sigaction sa {};
  if (::sigaction(signo, nullptr, &sa) == 0 && sa.sa_handler != SIG_DFL &&
      sa.sa_handler != SIG_IGN) {
    sa.sa_flags |= SA_RESTART;
    ::sigaction(signo, &sa, nullptr);
  }
}

const char* signal_name(int signo) {
  switch (signo) {
  case SIGTERM:
    return "SIGTERM";
  case SIGINT:
    return "SIGINT";
  case SIGHUP:
    return "SIGHUP";
  }
  return "signal";
}

} // namespace

void Server::Impl::remove_session(Session* s) {
  for (auto it = sessions.begin(); it != sessions.end(); ++it)
    if (it->get() == s) {
      sessions.erase(it);
      stats.open.fetch_sub(1, std::memory_order_relaxed);
      break;
    }
  maybe_finish();
}

void Server::Impl::start_accept() {
  acceptor.async_accept(io, [this](const error_code& ec, stream::socket socket) {
    on_accept(ec, std::move(socket));
  });
}

void Server::Impl::on_accept(const error_code& ec, stream::socket socket) {
  if (stopping || ec == asio::error::operation_aborted) return;
  if (ec) {
    // Out of fds or memory: back off instead of spinning on a ready listener.
    log::warning("accept on " + path + ": " + ec.message());
    accept_retry_timer.expires_after(std::chrono::milliseconds(100));
    accept_retry_timer.async_wait([this](const error_code& e) {
      if (!e && !stopping) start_accept();
    });
    return;
  }
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(socket.native_handle(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    log::warning("SO_PEERCRED on a new connection failed: " + std::string(std::strerror(errno)) +
                 "; closing it");
    start_accept();
    return;
  }
  CallContext peer;
  peer.uid = cred.uid;
  peer.gid = cred.gid;
  peer.pid = cred.pid;
  auto slot = tenants.acquire(cred.uid, TenantResource::connection);
  if (!slot) {
    refuse_connection(socket, peer, slot.error());
    start_accept();
    return;
  }
  std::uint64_t id = next_session_id++;
  auto session = std::make_shared<Session>(*this, std::move(socket), peer, id, std::move(*slot));
  sessions.insert(session);
  stats.accepted.fetch_add(1, std::memory_order_relaxed);
  stats.open.fetch_add(1, std::memory_order_relaxed);
  log::debug("connection " + std::to_string(id) + " from uid " + std::to_string(cred.uid) +
             " pid " + std::to_string(cred.pid));
  session->start();
  start_accept();
}

void Server::Impl::refuse_connection(stream::socket& socket, const CallContext& peer,
                                     const Error& why) {
  stats.connections_refused.fetch_add(1, std::memory_order_relaxed);
  log::info("connection from uid " + std::to_string(peer.uid) + " pid " + std::to_string(peer.pid) +
            " refused: " + why.message());
  TenantResource r = TenantResource::connection;
  int fd = socket.native_handle();
  send_now(fd, rpc::error_response(
                   nullptr, why,
                   {{"limit", std::string(limit_key(r))}, {"max", tenants.quota().limit(r)}}) +
                   "\n");
  // Take what the client already sent: closing with unread bytes would make
  // it see ECONNRESET after the error line rather than a clean end of stream.
  char sink[4096];
  for (int i = 0; i < 16 && ::recv(fd, sink, sizeof sink, MSG_DONTWAIT) > 0; ++i) {
  }
  error_code ignored;
  socket.shutdown(stream::socket::shutdown_both, ignored);
  socket.close(ignored);
}

void Server::Impl::arm_signals() {
  signals.async_wait([this](const error_code& ec, int signo) { on_signal(ec, signo); });
}

void Server::Impl::on_signal(const error_code& ec, int signo) {
  if (ec || finished) return;
  if (signo == SIGHUP) {
    if (opts.on_reload) {
      log::info("SIGHUP: reloading configuration");
      asio::post(background, [this] {
        try {
          opts.on_reload();
        } catch (const std::exception& e) {
          log::error(std::string("reload failed: ") + e.what());
        } catch (...) {
          log::error("reload failed with a non-standard exception");
        }
      });
    } else {
      log::info("SIGHUP: nothing to reload");
    }
  } else if (stopping) {
    force_finish(std::string(signal_name(signo)) + " received again during the drain");
    return;
  } else {
    begin_stop(signal_name(signo));
  }
  arm_signals();
}

void Server::Impl::arm_watchdog(std::chrono::microseconds interval) {
  watchdog_timer.expires_after(interval);
  watchdog_timer.async_wait([this, interval](const error_code& ec) {
    if (ec || finished) return;
    if (auto st = systemd::notify("WATCHDOG=1"); !st) log::warning(st.error().describe());
    arm_watchdog(interval);
  });
}

void Server::Impl::schedule(const std::shared_ptr<Periodic>& p) {
  if (stopping) return;
  p->timer.expires_after(p->interval);
  p->timer.async_wait([this, p](const error_code& ec) {
    if (ec || stopping) return;
    asio::post(background, [this, p] {
      try {
        p->task();
      } catch (const std::exception& e) {
        log::error("periodic task '" + p->name + "' threw: " + e.what());
      } catch (...) {
        log::error("periodic task '" + p->name + "' threw a non-standard exception");
      }
      asio::post(io, [this, p] { schedule(p); });
    });
  });
}

void Server::Impl::release_socket_file() {
  if (source != ListenSource::bound || !lock) return;
  // Only remove the file if it is still ours: a new daemon may already have
  // bound the path while we drain.
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0 && st.st_dev == sock_dev && st.st_ino == sock_ino)
    ::unlink(path.c_str());
  lock.reset();
}

void Server::Impl::begin_stop(const std::string& why) {
  if (stopping) return;
  stopping = true;
  log::info("stopping (" + why + "): " + std::to_string(running_handlers) +
            " request(s) in flight, draining for up to " + ms_text(limits.drain_timeout));
  if (auto st = systemd::notify("STOPPING=1\nSTATUS=draining requests"); !st)
    log::warning(st.error().describe());
  error_code ignored;
  acceptor.close(ignored);
  accept_retry_timer.cancel(ignored);
  release_socket_file();
  for (auto& p : periodic)
    p->timer.cancel(ignored);
  std::vector<std::shared_ptr<Session>> copy(sessions.begin(), sessions.end());
  for (auto& s : copy)
    s->on_server_stop();
  drain_timer.expires_after(limits.drain_timeout);
  drain_timer.async_wait([this](const error_code& ec) {
    if (!ec) force_finish("drain timeout (" + ms_text(limits.drain_timeout) + ") passed");
  });
  maybe_finish();
}

void Server::Impl::force_finish(const std::string& why) {
  if (finished) return;
  log::warning(why + ": closing " + std::to_string(sessions.size()) + " connection(s) with " +
               std::to_string(running_handlers) + " handler(s) still running");
  std::vector<std::shared_ptr<Session>> copy(sessions.begin(), sessions.end());
  for (auto& s : copy)
    s->abort("forced close at shutdown");
  finish();
}

void Server::Impl::maybe_finish() {
  if (stopping && !finished && sessions.empty() && running_handlers == 0) finish();
}

void Server::Impl::finish() {
  if (finished) return;
  finished = true;
  error_code ignored;
  drain_timer.cancel(ignored);
  watchdog_timer.cancel(ignored);
  signals.cancel(ignored);
  log::info("stopped");
  io.stop();
}

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Server::~Server() = default;

Expected<std::unique_ptr<Server>> Server::create(ServerOptions options, Dispatcher& dispatcher) {
  if (options.limits.max_request_bytes == 0)
    return make_error(Errc::invalid_argument, "max_request_bytes must be positive");
  if (options.limits.request_timeout.count() <= 0)
    return make_error(Errc::invalid_argument, "request_timeout must be positive");
  if (options.limits.read_timeout.count() <= 0 || options.limits.idle_timeout.count() <= 0 ||
      options.limits.write_timeout.count() <= 0)
    return make_error(Errc::invalid_argument, "read, idle and write timeouts must be positive");
  if (options.control_threads == 0)
    return make_error(Errc::invalid_argument, "control_threads must be positive");

  std::optional<Fd> activated;
  if (options.listen != ListenMode::bind_path) {
    FDO_TRY(activated, systemd::take_activation_socket());
    if (!activated && options.listen == ListenMode::activation)
      return make_error(Errc::invalid_argument,
                        "socket activation required but no socket was passed (LISTEN_FDS unset)");
  }

  auto impl = std::make_unique<Impl>(std::move(options), dispatcher);
  Fd listener;
  if (activated) {
    listener = std::move(*activated);
    impl->source = ListenSource::activated;
    impl->path = systemd::unix_socket_path(listener.get());
    if (!impl->opts.socket_path.empty() && impl->path != impl->opts.socket_path)
      log::notice("socket-activated on " + impl->path + " (configured socket " +
                  impl->opts.socket_path + " is not used)");
  } else {
    FDO_TRY(BoundSocket bound, bind_unix_socket(impl->opts.socket_path, impl->opts.socket_mode));
    listener = std::move(bound.listener);
    impl->lock = std::move(bound.lock);
    impl->sock_dev = bound.dev;
    impl->sock_ino = bound.ino;
    impl->source = ListenSource::bound;
    impl->path = impl->opts.socket_path;
  }

  error_code ec;
  impl->acceptor.assign(stream(), listener.get(), ec);
  if (ec) {
    impl->release_socket_file();
    return make_error(Errc::io, "adopt listening socket: " + ec.message());
  }
  listener.release();

  if (impl->opts.signals == SignalHandling::install) {
    for (int signo : {SIGTERM, SIGINT, SIGHUP}) {
      impl->signals.add(signo, ec);
      if (ec) {
        impl->release_socket_file();
        return make_error(Errc::io, std::string("install handler for ") + signal_name(signo) +
                                        ": " + ec.message());
      }
      add_sa_restart(signo);
    }
    impl->arm_signals();
  }
  impl->start_accept();
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

Status Server::run() {
  Impl& s = *impl_;
  if (s.ran) return make_error(Errc::internal, "Server::run() called twice");
  s.ran = true;
  std::string status = "READY=1\nSTATUS=listening on " + s.path;
  if (auto st = systemd::notify(status); !st) log::warning(st.error().describe());
  if (auto interval = systemd::watchdog_ping_interval()) {
    log::info("watchdog: pinging every " + std::to_string(interval->count() / 1000) + " ms");
    s.arm_watchdog(*interval);
  }
  log::info(std::string("listening on ") + s.path +
            (s.source == ListenSource::activated ? " (socket-activated)" : "") + " with " +
            std::to_string(s.threads) + " handler threads and " +
            std::to_string(s.opts.control_threads) + " control threads");
  for (;;) {
    try {
      s.io.run();
      break;
    } catch (const std::exception& e) {
      // A bug in a completion handler; keep serving rather than dropping
      // every client.
      log::error(std::string("server loop: unexpected exception: ") + e.what());
    }
  }
  return ok();
}

void Server::stop() {
  Impl* s = impl_.get();
  asio::post(s->io, [s] { s->begin_stop("stop requested"); });
}

void Server::every(std::string name, std::chrono::milliseconds interval,
                   std::function<void()> task) {
  Impl* s = impl_.get();
  auto p = std::make_shared<Periodic>(
      s->io, std::move(name), std::max(interval, std::chrono::milliseconds(1)), std::move(task));
  asio::post(s->io, [s, p] {
    s->periodic.push_back(p);
    s->schedule(p);
  });
}

void Server::set_limits(const ServerLimits& limits) {
  Impl* s = impl_.get();
  s->tenants.set_quota({limits.max_connections_per_uid, limits.max_inflight_per_uid,
                        limits.max_buffered_bytes_per_uid});
  asio::post(s->io, [s, limits] {
    s->limits = limits;
    for (const auto& session : s->sessions)
      session->on_limits_changed();
  });
}

ServerStats Server::stats() const {
  const auto& a = impl_->stats;
  ServerStats out;
  out.connections_accepted = a.accepted.load(std::memory_order_relaxed);
  out.connections_open = a.open.load(std::memory_order_relaxed);
  out.requests = a.requests.load(std::memory_order_relaxed);
  out.requests_timed_out = a.timed_out.load(std::memory_order_relaxed);
  out.requests_oversized = a.oversized.load(std::memory_order_relaxed);
  out.handlers_running = a.running.load(std::memory_order_acquire);
  out.connections_refused = a.connections_refused.load(std::memory_order_relaxed);
  out.requests_refused = a.requests_refused.load(std::memory_order_relaxed);
  out.closed_read_timeout = a.read_timeouts.load(std::memory_order_relaxed);
  out.closed_idle_timeout = a.idle_timeouts.load(std::memory_order_relaxed);
  out.closed_write_timeout = a.write_timeouts.load(std::memory_order_relaxed);
  out.reads_paused = a.reads_paused.load(std::memory_order_relaxed);
  out.closed_over_byte_budget = a.buffer_refusals.load(std::memory_order_relaxed);
  out.replies_by_handler = a.replies_by_handler.load(std::memory_order_relaxed);
  out.call_ends_unwoken = a.ends_unwoken.load(std::memory_order_relaxed);
  return out;
}

const std::string& Server::socket_path() const {
  return impl_->path;
}
ListenSource Server::listen_source() const {
  return impl_->source;
}
unsigned Server::handler_threads() const {
  return impl_->threads;
}
unsigned Server::control_threads() const {
  return impl_->opts.control_threads;
}

} // namespace fdo::daemon
