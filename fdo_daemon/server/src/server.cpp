#include "fdo/daemon/server.h"

#include "fdo/daemon/framing.h"
#include "fdo/daemon/systemd.h"
#include "fdo/util/fd.h"
#include "fdo/util/log.h"

#include <array>
#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/write.hpp>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <deque>
#include <optional>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <thread>
#include <unistd.h>
#include <unordered_set>
#include <vector>

namespace fdo::daemon {

namespace asio = boost::asio;
using stream = asio::local::stream_protocol;
using boost::system::error_code;
using Clock = std::chrono::steady_clock;

ServerLimits server_limits(const Config& config) {
  ServerLimits l;
  l.max_request_bytes = static_cast<std::size_t>(config.max_request_bytes);
  l.request_timeout = config.request_timeout;
  l.drain_timeout = config.drain_timeout;
  return l;
}

ServerOptions server_options(const Config& config) {
  ServerOptions o;
  o.socket_path = config.socket;
  o.limits = server_limits(config);
  o.handler_threads = config.effective_handler_threads();
  return o;
}

namespace {

constexpr std::size_t kReadChunk = 64 * 1024;

std::string ms_text(std::chrono::milliseconds ms) {
  return std::to_string(ms.count()) + " ms";
}

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

std::string id_text(const nlohmann::json& id) {
  return id.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

} // namespace

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
      : opts(std::move(o)), dispatcher(d), limits(opts.limits), acceptor(io), signals(io),
        watchdog_timer(io), drain_timer(io), accept_retry_timer(io),
        threads(opts.handler_threads != 0 ? opts.handler_threads
                                          : std::max(4u, 2 * std::thread::hardware_concurrency())),
        handlers(threads), background(1) {}

  ~Impl() {
    // Handlers may still be running after a drain timeout: wait for them
    // (they hold references to the dispatcher and post back into io). Jobs
    // not yet started are dropped: nothing new runs after shutdown.
    handlers.stop();
    background.stop();
    handlers.join();
    background.join();
    release_socket_file();
  }

  // --- all below run on the io thread unless noted ---
  void start_accept();
  void on_accept(const error_code& ec, stream::socket socket);
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
        running{0};
  } stats;

  unsigned threads;
  // Declared last: destroyed (after join in ~Impl) before the io_context.
  asio::thread_pool handlers;
  asio::thread_pool background;
};

// One connection: reads lines, handles them strictly one at a time in order
// (parse and handler on the pool, a deadline timer here), writes responses.
// Owned by Server::Impl::sessions; callbacks hold a shared_ptr so a session
// outlives any handler still running for it.
class Session : public std::enable_shared_from_this<Session> {
public:
  Session(Server::Impl& srv, stream::socket socket, CallContext peer, std::uint64_t id)
      : srv_(srv), socket_(std::move(socket)), deadline_timer_(srv.io), peer_(peer), id_(id),
        parser_(srv.limits.max_request_bytes), read_buf_(kReadChunk) {}

  void start() { next(); }

  // The server is stopping: an idle session closes now; a busy one closes
  // after writing its current response (next() checks srv_.stopping).
  void on_server_stop() {
    if (state_ == State::reading) {
      error_code ignored;
      socket_.cancel(ignored);
    }
  }

  void abort(const std::string& why) { close(why); }

private:
  enum class State { idle, reading, parsing, calling, writing, closed };

  struct Pending {
    Frame frame;
    Clock::time_point received;
  };

  void next() {
    if (state_ == State::closed) return;
    state_ = State::idle;
    if (srv_.stopping) {
      close(pending_.empty() ? "daemon stopping"
                             : "daemon stopping; " + std::to_string(pending_.size()) +
                                   " queued request(s) not started");
      return;
    }
    if (!pending_.empty()) {
      Pending p = std::move(pending_.front());
      pending_.pop_front();
      if (p.frame.kind == FrameKind::oversized) {
        srv_.stats.oversized.fetch_add(1, std::memory_order_relaxed);
        log::warning("connection " + std::to_string(id_) + " (uid " + std::to_string(peer_.uid) +
                     "): request line over max_request_bytes (" +
                     std::to_string(parser_.max_line_bytes()) + "); discarded");
        write(rpc::oversized_response(parser_.max_line_bytes(), p.frame.bytes));
      } else {
        start_parse(std::move(p.frame.line), p.received);
      }
      return;
    }
    if (eof_) {
      close("peer closed the connection");
      return;
    }
    do_read();
  }

  void do_read() {
    state_ = State::reading;
    parser_.set_max_line_bytes(srv_.limits.max_request_bytes);
    socket_.async_read_some(
        asio::buffer(read_buf_),
        [self = shared_from_this()](const error_code& ec, std::size_t n) { self->on_read(ec, n); });
  }

  void on_read(const error_code& ec, std::size_t n) {
    if (state_ == State::closed) return;
    auto now = Clock::now();
    if (n > 0) {
      frames_.clear();
      parser_.feed({read_buf_.data(), n}, frames_);
      for (Frame& f : frames_)
        pending_.push_back({std::move(f), now});
    }
    if (ec) {
      if (ec == asio::error::eof) {
        eof_ = true;
        if (auto tail = parser_.finish()) pending_.push_back({std::move(*tail), now});
      } else if (ec == asio::error::operation_aborted) {
        close("daemon stopping");
        return;
      } else {
        close("read: " + ec.message());
        return;
      }
    }
    next();
  }

  void start_parse(std::string line, Clock::time_point received) {
    state_ = State::parsing;
    srv_.stats.requests.fetch_add(1, std::memory_order_relaxed);
    // Parsing a large request takes milliseconds; keep it off the io thread.
    asio::post(srv_.handlers, [self = shared_from_this(), line = std::move(line), received]() {
      ParsedLine parsed;
      try {
        parsed = self->srv_.dispatcher.parse(line);
      } catch (const std::exception& e) {
        // Only allocation failure gets here; an exception escaping a pool
        // job would terminate the daemon.
        parsed.request.reset();
        parsed.response = rpc::error_response(
            nullptr, rpc::internal_error, std::string("parsing the request failed: ") + e.what(),
            to_string(Errc::internal));
      }
      asio::post(self->srv_.io, [self, parsed = std::move(parsed), received]() mutable {
        self->on_parsed(std::move(parsed), received);
      });
    });
  }

  void on_parsed(ParsedLine parsed, Clock::time_point received) {
    if (state_ == State::closed) return;
    if (!parsed.request) {
      if (parsed.response.empty())
        next();
      else
        write(std::move(parsed.response));
      return;
    }
    start_call(std::move(*parsed.request), received);
  }

  void start_call(Request req, Clock::time_point received) {
    // Clamped so that received + timeout cannot overflow the clock.
    std::chrono::milliseconds timeout = std::min<std::chrono::milliseconds>(
        srv_.limits.request_timeout, std::chrono::hours(24 * 365));
    Clock::time_point deadline = received + timeout;
    current_id_ = req.response_id();
    current_method_ = req.method;
    current_notification_ = req.is_notification();
    current_timeout_ = timeout;
    if (Clock::now() >= deadline) {
      // Queued behind slow requests for longer than the whole budget.
      timed_out("before it started");
      return;
    }
    state_ = State::calling;
    std::uint64_t gen = ++call_gen_;
    ++srv_.running_handlers;
    srv_.stats.running.fetch_add(1, std::memory_order_relaxed);
    deadline_timer_.expires_at(deadline);
    deadline_timer_.async_wait(
        [self = shared_from_this(), gen](const error_code& ec) { self->on_deadline(gen, ec); });
    CallContext ctx = peer_;
    ctx.deadline = deadline;
    asio::post(srv_.handlers, [self = shared_from_this(), gen, req = std::move(req), ctx]() {
      std::optional<std::string> response;
      try {
        response = self->srv_.dispatcher.invoke(req, ctx);
      } catch (const std::exception& e) {
        // invoke() catches handler exceptions; this is allocation failure
        // while building the response.
        if (!req.is_notification())
          response = rpc::error_response(req.response_id(), rpc::internal_error,
                                         std::string("building the response failed: ") + e.what(),
                                         to_string(Errc::internal));
      }
      asio::post(self->srv_.io, [self, gen, response = std::move(response)]() mutable {
        self->on_call_done(gen, std::move(response));
      });
    });
  }

  void on_call_done(std::uint64_t gen, std::optional<std::string> response) {
    --srv_.running_handlers;
    srv_.stats.running.fetch_sub(1, std::memory_order_relaxed);
    if (gen != call_gen_ || state_ != State::calling) {
      log::info("connection " + std::to_string(id_) +
                ": a handler finished after its client was answered (timed out or closed)");
      srv_.maybe_finish();
      return;
    }
    error_code ignored;
    deadline_timer_.cancel(ignored);
    if (response)
      write(std::move(*response));
    else
      next();
  }

  void on_deadline(std::uint64_t gen, const error_code& ec) {
    if (ec == asio::error::operation_aborted || gen != call_gen_ || state_ != State::calling)
      return;
    // Any later completion of this call is stale.
    ++call_gen_;
    timed_out("while running");
  }

  void timed_out(const char* when) {
    srv_.stats.timed_out.fetch_add(1, std::memory_order_relaxed);
    log::warning("connection " + std::to_string(id_) + " (uid " + std::to_string(peer_.uid) +
                 "): '" + current_method_ + "' id " + id_text(current_id_) +
                 " exceeded request_timeout_ms (" + ms_text(current_timeout_) + ") " + when);
    if (current_notification_)
      next();
    else
      write(rpc::deadline_response(current_id_, current_method_, current_timeout_));
  }

  void write(std::string response) {
    state_ = State::writing;
    out_ = std::move(response);
    out_.push_back('\n');
    asio::async_write(socket_, asio::buffer(out_),
                      [self = shared_from_this()](const error_code& ec, std::size_t) {
                        if (self->state_ == State::closed) return;
                        if (ec) {
                          self->close("write: " + ec.message());
                          return;
                        }
                        self->out_.clear();
                        self->next();
                      });
  }

  void close(const std::string& why) {
    if (state_ == State::closed) return;
    state_ = State::closed;
    log::debug("connection " + std::to_string(id_) + " closed: " + why);
    error_code ignored;
    socket_.shutdown(stream::socket::shutdown_both, ignored);
    socket_.close(ignored);
    deadline_timer_.cancel(ignored);
    pending_.clear();
    srv_.remove_session(this);
  }

  Server::Impl& srv_;
  stream::socket socket_;
  asio::steady_timer deadline_timer_;
  CallContext peer_;
  std::uint64_t id_;
  FrameParser parser_;
  std::vector<char> read_buf_;
  std::vector<Frame> frames_;
  std::deque<Pending> pending_;
  std::string out_;
  State state_ = State::idle;
  bool eof_ = false;
  std::uint64_t call_gen_ = 0;
  nlohmann::json current_id_;
  std::string current_method_;
  bool current_notification_ = false;
  std::chrono::milliseconds current_timeout_{0};
};

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
  std::uint64_t id = next_session_id++;
  auto session = std::make_shared<Session>(*this, std::move(socket), peer, id);
  sessions.insert(session);
  stats.accepted.fetch_add(1, std::memory_order_relaxed);
  stats.open.fetch_add(1, std::memory_order_relaxed);
  log::debug("connection " + std::to_string(id) + " from uid " + std::to_string(cred.uid) +
             " pid " + std::to_string(cred.pid));
  session->start();
  start_accept();
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
            std::to_string(s.threads) + " handler threads");
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
  asio::post(s->io, [s, limits] { s->limits = limits; });
}

ServerStats Server::stats() const {
  const auto& a = impl_->stats;
  ServerStats out;
  out.connections_accepted = a.accepted.load(std::memory_order_relaxed);
  out.connections_open = a.open.load(std::memory_order_relaxed);
  out.requests = a.requests.load(std::memory_order_relaxed);
  out.requests_timed_out = a.timed_out.load(std::memory_order_relaxed);
  out.requests_oversized = a.oversized.load(std::memory_order_relaxed);
  out.handlers_running = a.running.load(std::memory_order_relaxed);
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

} // namespace fdo::daemon
