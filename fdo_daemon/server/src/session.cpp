#include "session.h"

#include "fdo/util/scm_rights.h"

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <cerrno>
#include <cstring>
#include <sys/socket.h>
#include <utility>

namespace fdo::daemon {

namespace {

constexpr std::size_t kReadChunk = 64 * 1024;

// Most descriptors one request may carry (execute's memfd buffers); more are
// refused with the request, and the kernel closes what did not fit.
constexpr std::size_t kMaxRequestFds = 16;

// Lines up to this size are parsed on the control pool (microseconds), so a
// health request is never queued behind blocked work handlers; larger ones
// take milliseconds and are parsed on the work pool.
constexpr std::size_t kControlParseMaxBytes = 64 * 1024;
// Lines up to this size are parsed on the io thread itself (a few
// microseconds at most), so a request pays no hand-off before its handler.
constexpr std::size_t kInlineParseMaxBytes = 8 * 1024;

// dispatcher.invoke() that cannot throw: invoke() catches handler
// exceptions, so what gets here is allocation failure while building the
// response (an exception escaping a pool job would end the daemon).
std::optional<std::string> invoke_guarded(const Dispatcher& dispatcher, const Request& req,
                                          const CallContext& ctx) {
  try {
    return dispatcher.invoke(req, ctx);
  } catch (const std::exception& e) {
    if (req.is_notification()) return std::nullopt;
    return rpc::error_response(req.response_id(), rpc::internal_error,
                               std::string("building the response failed: ") + e.what(),
                               to_string(Errc::internal));
  }
}

} // namespace

Session::Session(Server::Impl& srv, stream::socket socket, CallContext peer, std::uint64_t id,
                 TenantLimits::Lease connection)
    : srv_(srv), dispatcher_(srv.dispatcher), socket_(std::move(socket)), deadline_timer_(srv.io),
      read_timer_(srv.io), write_timer_(srv.io), peer_(peer), id_(id),
      connection_(std::move(connection)), parser_(srv.limits.max_request_bytes),
      read_buf_(kReadChunk) {
  fd_ = socket_.native_handle();
}

Session::~Session() {
  dispatcher_.disconnected(id_);
}

std::string Session::who() const {
  return "connection " + std::to_string(id_) + " (uid " + std::to_string(peer_.uid) + ")";
}

void Session::on_server_stop() {
  // Cancelling the socket would also abort a reply being written; with one
  // in flight, on_written closes the connection once the outbox is empty.
  if (stage_ == Stage::reading && !writing_) {
    error_code ignored;
    socket_.cancel(ignored);
  }
  // A call whose handler wrote its reply and parked its end is done: taken
  // now (posted: the server is walking its sessions), not at the client's
  // next request. A handler still running posts its end from now on.
  if (stage_ == Stage::calling)
    if (auto end = take_parked(call_gen_))
      asio::post(srv_.io, [self = shared_from_this(), end = std::move(*end)]() mutable {
        self->on_call_done(std::move(end));
      });
}

void Session::next() {
  for (;;) {
    if (stage_ == Stage::closed) return;
    stage_ = Stage::idle;
    if (srv_.stopping) {
      close_when_sent(pending_.empty() ? "daemon stopping"
                                       : "daemon stopping; " + std::to_string(pending_.size()) +
                                             " queued request(s) not started");
      pending_.clear();
      return;
    }
    if (unsent_bytes_ > srv_.limits.max_unsent_bytes) {
      // Backpressure: the client is not taking its replies, so stop taking
      // its requests; the write deadline decides how long that may last.
      stage_ = Stage::waiting_for_writes;
      if (!paused_) {
        paused_ = true;
        srv_.stats.reads_paused.fetch_add(1, std::memory_order_relaxed);
        log::debug(who() + ": " + std::to_string(unsent_bytes_) +
                   " reply bytes unsent (max_unsent_bytes " +
                   std::to_string(srv_.limits.max_unsent_bytes) + "); not reading until they are");
      }
      return;
    }
    paused_ = false;
    if (!pending_.empty()) {
      Pending p = std::move(pending_.front());
      pending_.pop_front();
      if (p.no_request) {
        log::debug(who() + ": " + p.fd_error);
        queue_reply(rpc::error_response(nullptr, rpc::invalid_request, p.fd_error,
                                        to_string(Errc::invalid_argument)));
        continue;
      }
      call_fds_ = std::move(p.fds);
      call_fd_error_ = std::move(p.fd_error);
      if (p.frame.kind == FrameKind::oversized) {
        srv_.stats.oversized.fetch_add(1, std::memory_order_relaxed);
        log::warning(who() + ": request line over max_request_bytes (" +
                     std::to_string(parser_.max_line_bytes()) + "); discarded");
        queue_reply(rpc::oversized_response(parser_.max_line_bytes(), p.frame.bytes));
        continue;
      }
      start_parse(std::move(p.frame.line), p.received);
      return;
    }
    if (eof_) {
      close_when_sent("peer closed the connection");
      return;
    }
    do_read();
    return;
  }
}

void Session::do_read() {
  stage_ = Stage::reading;
  parser_.set_max_line_bytes(srv_.limits.max_request_bytes);
  read_started_ = Clock::now();
  // A begun line has what is left of read_timeout; otherwise the connection
  // is idle: nothing runs for it and it owes us nothing.
  Clock::duration wait = srv_.limits.idle_timeout;
  // The idle time since a reply its handler wrote counts too.
  if (replied_at_ && !parser_.in_line())
    wait -= std::min<Clock::duration>(wait, read_started_ - *replied_at_);
  replied_at_.reset();
  if (parser_.in_line())
    wait = std::max<Clock::duration>(Clock::duration::zero(),
                                     Clock::duration(srv_.limits.read_timeout) - line_waited_);
  read_timer_.expires_after(wait);
  read_timer_.async_wait([self = shared_from_this(), gen = ++read_gen_](const error_code& ec) {
    self->on_read_timer(gen, ec);
  });
  if (std::exchange(readable_now_, false)) {
    // The call's watch just saw the socket readable: read now, without
    // asking the reactor again (on_readable waits if that was all).
    on_readable({});
    return;
  }
  socket_.async_wait(stream::socket::wait_read,
                     [self = shared_from_this()](const error_code& ec) { self->on_readable(ec); });
}

void Session::on_readable(const error_code& ec) {
  if (stage_ == Stage::closed) return;
  if (ec) {
    on_read(ec, 0, {}, false);
    return;
  }
  // Every descriptor is owned at once, so none leaks on any path below.
  std::vector<Fd> fds;
  bool truncated = false;
  ssize_t got;
  do
    got = receive_with_fds(socket_.native_handle(), read_buf_, kMaxRequestFds, MSG_DONTWAIT, fds,
                           truncated);
  while (got < 0 && errno == EINTR);
  const int err = got < 0 ? errno : 0;
  if (got < 0 && (err == EAGAIN || err == EWOULDBLOCK)) {
    socket_.async_wait(stream::socket::wait_read,
                       [self = shared_from_this()](const error_code& e) { self->on_readable(e); });
    return;
  }
  if (got < 0)
    on_read(error_code(err, boost::system::system_category()), 0, {}, false);
  else if (got == 0)
    on_read(asio::error::eof, 0, std::move(fds), truncated);
  else
    on_read({}, static_cast<std::size_t>(got), std::move(fds), truncated);
}

void Session::attach_fds(std::size_t first_new_frame, bool chunk_ended_line, std::vector<Fd> fds,
                         bool truncated) {
  if (fds.empty() && !truncated) return;
  std::vector<Fd>* to = nullptr;
  std::string* error = nullptr;
  if (!chunk_ended_line && parser_.in_line()) {
    to = &line_fds_;
    error = &line_fd_error_;
  } else if (pending_.size() > first_new_frame) {
    to = &pending_.back().fds;
    error = &pending_.back().fd_error;
  } else {
    // A chunk of blank lines: descriptors with no request at all. Answered
    // (without an id) in turn with the requests before it; closed here.
    Pending none{{}, Clock::now(), {}, {}};
    none.no_request = true;
    none.fd_error = std::to_string(fds.size()) +
                    " file descriptor(s) came with no request line (send them with the first "
                    "byte of the request they belong to); closed unread";
    pending_.push_back(std::move(none));
    return;
  }
  if (truncated || to->size() + fds.size() > kMaxRequestFds) {
    if (error->empty())
      *error = "more than " + std::to_string(kMaxRequestFds) +
               " file descriptors came with the request; all were closed unread";
    to->clear();
    return;
  }
  if (!error->empty()) return; // already refused: these close here
  for (Fd& fd : fds)
    to->push_back(std::move(fd));
}

void Session::on_read(const error_code& ec, std::size_t n, std::vector<Fd> fds,
                      bool fds_truncated) {
  if (stage_ == Stage::closed) return;
  ++read_gen_; // a timer completion already queued is stale
  error_code ignored;
  read_timer_.cancel(ignored);
  auto now = Clock::now();
  if (parser_.in_line()) line_waited_ += now - read_started_;
  if (n > 0) {
    std::uint64_t ended = parser_.lines_ended();
    frames_.clear();
    const bool continues_line = parser_.in_line() && !parser_.discarding();
    parser_.feed({read_buf_.data(), n}, frames_);
    // A line begun in this chunk has not been waited for yet.
    if (!parser_.in_line() || parser_.lines_ended() != ended) line_waited_ = {};
    const std::size_t first_new = pending_.size();
    for (Frame& f : frames_)
      pending_.push_back({std::move(f), now, {}, {}});
    // The line in progress before this chunk completes as its first frame:
    // it takes the descriptors that came with its earlier bytes.
    if (continues_line && parser_.lines_ended() != ended && pending_.size() > first_new) {
      pending_[first_new].fds = std::move(line_fds_);
      pending_[first_new].fd_error = std::move(line_fd_error_);
    }
    if (parser_.lines_ended() != ended) {
      line_fds_.clear(); // a line that ended without a frame (blank) had no request
      line_fd_error_.clear();
    }
    attach_fds(first_new, read_buf_[n - 1] == '\n', std::move(fds), fds_truncated);
    if (parser_.discarding()) line_fds_.clear(); // an oversized line: already answered
    if (auto st = account_bytes(TenantLimits::Admission::check); !st) {
      over_byte_budget(st.error());
      return;
    }
  }
  if (ec) {
    if (ec == asio::error::eof) {
      eof_ = true;
      if (auto tail = parser_.finish())
        pending_.push_back(
            {std::move(*tail), now, std::move(line_fds_), std::move(line_fd_error_)});
      line_fds_.clear();
      line_fd_error_.clear();
      line_waited_ = {};
    } else if (ec == asio::error::operation_aborted) {
      close_when_sent("daemon stopping");
      return;
    } else {
      close("read: " + ec.message(), log::Level::debug);
      return;
    }
  }
  next();
}

Status Session::account_bytes(TenantLimits::Admission admission) {
  const std::uint64_t holds = parser_.buffered_bytes() + unsent_bytes_;
  if (holds > charged_bytes_) {
    FDO_TRY_STATUS(srv_.tenants.charge_bytes(peer_.uid, holds - charged_bytes_, admission));
  } else if (holds < charged_bytes_) {
    srv_.tenants.release_bytes(peer_.uid, charged_bytes_ - holds);
  }
  charged_bytes_ = holds;
  return ok();
}

void Session::over_byte_budget(const Error& why) {
  srv_.stats.buffer_refusals.fetch_add(1, std::memory_order_relaxed);
  if (outbox_.empty())
    send_now(socket_.native_handle(),
             rpc::error_response(nullptr, why,
                                 {{"limit", "max_buffered_bytes_per_uid"},
                                  {"max", srv_.tenants.quota().max_buffered_bytes}}) +
                 "\n");
  close(why.message() + "; connection closed", log::Level::info);
}

void Session::on_read_timer(std::uint64_t gen, const error_code& ec) {
  if (ec || gen != read_gen_ || stage_ != Stage::reading) return;
  if (parser_.in_line()) {
    srv_.stats.read_timeouts.fetch_add(1, std::memory_order_relaxed);
    std::chrono::milliseconds limit = srv_.limits.read_timeout;
    // Told in one best-effort line: a client that stalls mid-line is
    // probably not reading either, and it is not worth a write deadline.
    if (outbox_.empty())
      send_now(socket_.native_handle(),
               rpc::error_response(nullptr, rpc::error_code(Errc::timeout),
                                   "request line not completed within read_timeout_ms (" +
                                       ms_text(limit) + "); closing the connection",
                                   to_string(Errc::timeout),
                                   {{"limit", "read_timeout_ms"}, {"timeout_ms", limit.count()}}) +
                   "\n");
    close("read_timeout_ms (" + ms_text(limit) + ") passed with a request line incomplete (" +
              std::to_string(parser_.buffered_bytes()) + " bytes buffered)",
          log::Level::info);
  } else {
    srv_.stats.idle_timeouts.fetch_add(1, std::memory_order_relaxed);
    close("idle for idle_timeout_ms (" + ms_text(srv_.limits.idle_timeout) + ")", log::Level::info);
  }
}

void Session::start_parse(std::string line, Clock::time_point received) {
  stage_ = Stage::parsing;
  srv_.stats.requests.fetch_add(1, std::memory_order_relaxed);
  // A short line (nearly every request) parses in microseconds: right here,
  // saving two thread hand-offs per request.
  if (line.size() <= kInlineParseMaxBytes) {
    ParsedLine parsed;
    try {
      parsed = srv_.dispatcher.parse(line);
    } catch (const std::exception& e) {
      parsed.request.reset();
      parsed.response = rpc::error_response(nullptr, rpc::internal_error,
                                            std::string("parsing the request failed: ") + e.what(),
                                            to_string(Errc::internal));
    }
    on_parsed(std::move(parsed), received);
    return;
  }
  // Parsing a large request takes milliseconds; keep it off the io thread.
  auto parse = [self = shared_from_this(), line = std::move(line), received]() {
    ParsedLine parsed;
    try {
      parsed = self->srv_.dispatcher.parse(line);
    } catch (const std::exception& e) {
      // Only allocation failure gets here; an exception escaping a pool
      // job would terminate the daemon.
      parsed.request.reset();
      parsed.response = rpc::error_response(nullptr, rpc::internal_error,
                                            std::string("parsing the request failed: ") + e.what(),
                                            to_string(Errc::internal));
    }
    asio::post(self->srv_.io, [self, parsed = std::move(parsed), received]() mutable {
      self->on_parsed(std::move(parsed), received);
    });
  };
  if (line.size() <= kControlParseMaxBytes)
    asio::post(srv_.control, std::move(parse));
  else
    srv_.turns.post(peer_.uid, std::move(parse));
}

void Session::on_parsed(ParsedLine parsed, Clock::time_point received) {
  if (stage_ == Stage::closed) return;
  if (!parsed.request) {
    call_fds_.clear(); // a line that is no request uses none
    if (!parsed.response.empty()) queue_reply(std::move(parsed.response));
    next();
    return;
  }
  start_call(std::move(*parsed.request), received);
}

void Session::start_call(Request req, Clock::time_point received) {
  // Clamped so that received + timeout cannot overflow the clock.
  std::chrono::milliseconds timeout = std::min<std::chrono::milliseconds>(
      srv_.limits.request_timeout, std::chrono::hours(24 * 365));
  Clock::time_point deadline = received + timeout;
  current_id_ = req.response_id();
  current_method_ = req.method;
  current_notification_ = req.is_notification();
  current_timeout_ = timeout;
  // The descriptors are this call's alone; they close when it is done.
  std::vector<Fd> fds = std::move(call_fds_);
  call_fds_.clear();
  if (!call_fd_error_.empty()) {
    std::string why = std::move(call_fd_error_);
    call_fd_error_.clear();
    refuse_call(req, make_error(Errc::invalid_argument, why), {{"fds_max", kMaxRequestFds}});
    return;
  }
  if (Clock::now() >= deadline) {
    // Queued behind slow requests for longer than the whole budget.
    timed_out("before it started");
    return;
  }
  // An unknown method is answered at once by invoke(): nothing to protect.
  MethodClass cls = srv_.dispatcher.method_class(req.method).value_or(MethodClass::immediate);
  if (cls == MethodClass::immediate) {
    call_now(req, deadline, fds);
    return;
  }
  TenantLimits::Lease slot;
  if (cls == MethodClass::work) {
    auto got = srv_.tenants.acquire(peer_.uid, TenantResource::inflight_request);
    if (!got) {
      TenantResource r = TenantResource::inflight_request;
      refuse_call(req, got.error(),
                  {{"limit", std::string(limit_key(r))}, {"max", srv_.tenants.quota().limit(r)}});
      return;
    }
    slot = std::move(*got);
  }
  stage_ = Stage::calling;
  replied_at_.reset();
  std::uint64_t gen = ++call_gen_;
  ++srv_.running_handlers;
  srv_.stats.running.fetch_add(1, std::memory_order_relaxed);
  call_deadline_ = deadline;
  arm_call_look(gen, Clock::now());
  // With nothing queued to write, the handler thread writes the reply itself;
  // with nothing read ahead either, the io thread watches the socket rather
  // than being woken for the end: it learns of it at the next request.
  const bool direct = outbox_.empty() && !writing_;
  const bool watch = direct && pending_.empty() && !eof_;
  {
    std::lock_guard lk(reply_mu_);
    direct_ok_ = direct;
    watching_ = watch;
    direct_gen_ = gen;
    parked_.reset();
  }
  if (watch)
    socket_.async_wait(
        stream::socket::wait_read,
        [self = shared_from_this(), gen](const error_code& ec) { self->on_call_watch(gen, ec); });
  CallContext ctx = peer_;
  ctx.deadline = deadline;
  ctx.connection = id_;
  auto call = [self = shared_from_this(), gen, req = std::move(req), ctx, slot = std::move(slot),
               request_fds = std::move(fds)]() mutable {
    std::optional<std::string> response;
    std::vector<Fd> fds;
    ctx.reply_fds = &fds;
    ctx.request_fds = &request_fds;
    response = invoke_guarded(self->srv_.dispatcher, req, ctx);
    request_fds.clear(); // closed as soon as the handler is done with them
    // The thread is free again: so is the tenant's slot, even when its client
    // was sent a timeout long ago.
    slot.reset();
    if (!response) fds.clear();
    CallEnd end;
    end.gen = gen;
    if (response) response->push_back('\n');
    end.reply = std::move(response);
    end.fds = std::move(fds);
    self->end_call(std::move(end));
  };
  if (cls == MethodClass::control)
    asio::post(srv_.control, std::move(call));
  else
    srv_.turns.post(peer_.uid, std::move(call));
}

void Session::call_now(const Request& req, Clock::time_point deadline,
                       const std::vector<Fd>& request_fds) {
  CallContext ctx = peer_;
  ctx.deadline = deadline;
  ctx.connection = id_;
  ctx.request_fds = &request_fds;
  std::optional<std::string> response = invoke_guarded(srv_.dispatcher, req, ctx);
  if (response) queue_reply(std::move(*response));
  next();
}

void Session::refuse_call(const Request& req, const Error& why, const nlohmann::json& data) {
  srv_.stats.requests_refused.fetch_add(1, std::memory_order_relaxed);
  // debug: a tenant hammering at its limit must not flood the log; the
  // counter (requests_refused) shows it.
  log::debug(who() + ": '" + rpc::cut(req.method) + "' refused: " + why.message());
  if (!req.is_notification()) queue_reply(rpc::error_response(req.response_id(), why, data));
  next();
}

void Session::close(const std::string& why, log::Level level) {
  if (stage_ == Stage::closed) return;
  stage_ = Stage::closed;
  log::write(level, who() + " closed: " + why);
  {
    // No handler thread writes on the descriptor once it is closed.
    std::lock_guard lk(reply_mu_);
    direct_ok_ = false;
    watching_ = false;
    fd_ = -1;
  }
  error_code ignored;
  socket_.shutdown(stream::socket::shutdown_both, ignored);
  socket_.close(ignored);
  deadline_timer_.cancel(ignored);
  read_timer_.cancel(ignored);
  write_timer_.cancel(ignored);
  pending_.clear();
  // A reply being written keeps its buffer until the aborted write completes.
  if (writing_)
    outbox_.resize(1);
  else
    outbox_.clear();
  unsent_bytes_ = 0;
  // Given back here, on the io thread, rather than whenever the last
  // callback drops the session.
  srv_.tenants.release_bytes(peer_.uid, std::exchange(charged_bytes_, 0));
  parser_.reset();
  connection_.reset();
  srv_.remove_session(this);
}

} // namespace fdo::daemon
