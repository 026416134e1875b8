// A session's write side (session.h): replies queued in order, written as
// the socket takes them (descriptors with the first byte of their reply),
// bounded by the write timeout; a session asked to close once its last reply
// is out.
#include "fdo/util/scm_rights.h"
#include "session.h"

#include <boost/asio/write.hpp>
#include <cerrno>
#include <cstring>
#include <sys/socket.h>

namespace fdo::daemon {

void Session::queue_reply(std::string response, std::vector<Fd> fds) {
  response.push_back('\n');
  queue_line(std::move(response), std::move(fds));
}

void Session::queue_line(std::string line, std::vector<Fd> fds) {
  unsent_bytes_ += line.size();
  outbox_.push_back({std::move(line), std::move(fds)});
  (void)account_bytes(TenantLimits::Admission::always); // a reply is kept whatever it costs
  if (!writing_) start_write();
}

void Session::start_write() {
  writing_ = true;
  write_timer_.expires_after(srv_.limits.write_timeout);
  write_timer_.async_wait([self = shared_from_this(), gen = ++write_gen_](const error_code& ec) {
    self->on_write_timer(gen, ec);
  });
  if (!outbox_.front().fds.empty()) {
    socket_.async_wait(
        stream::socket::wait_write,
        [self = shared_from_this()](const error_code& ec) { self->on_writable_for_fds(ec); });
    return;
  }
  // The front string stays put while it is written: deque::push_back never
  // moves existing elements.
  asio::async_write(
      socket_, asio::buffer(outbox_.front().line),
      [self = shared_from_this()](const error_code& ec, std::size_t) { self->on_written(ec); });
}

void Session::on_writable_for_fds(const error_code& ec) {
  if (stage_ == Stage::closed) return;
  if (ec) {
    writing_ = false;
    close("write: " + ec.message(), log::Level::debug);
    return;
  }
  Outgoing& out = outbox_.front();
  std::vector<int> raw;
  for (const Fd& fd : out.fds)
    raw.push_back(fd.get());
  ssize_t sent;
  do
    sent = send_with_fds(socket_.native_handle(), std::string_view(out.line).substr(0, 1), raw,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
  while (sent < 0 && errno == EINTR);
  if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
    socket_.async_wait(
        stream::socket::wait_write,
        [self = shared_from_this()](const error_code& e) { self->on_writable_for_fds(e); });
    return;
  }
  if (sent < 0) {
    writing_ = false;
    close(std::string("sendmsg (reply with fds): ") + std::strerror(errno), log::Level::debug);
    return;
  }
  // The fds are the client's now (closing ours does not close theirs); the
  // rest of the line follows as plain bytes.
  out.fds.clear();
  out.line.erase(0, 1);
  --unsent_bytes_;
  asio::async_write(
      socket_, asio::buffer(out.line),
      [self = shared_from_this()](const error_code& e, std::size_t) { self->on_written(e); });
}

void Session::on_written(const error_code& ec) {
  if (stage_ == Stage::closed) return;
  writing_ = false;
  ++write_gen_;
  error_code ignored;
  write_timer_.cancel(ignored);
  if (ec) {
    close("write: " + ec.message(), log::Level::debug);
    return;
  }
  unsent_bytes_ -= outbox_.front().line.size();
  outbox_.pop_front();
  (void)account_bytes(TenantLimits::Admission::always); // gives the reply's bytes back
  if (!outbox_.empty()) start_write();
  if (stage_ == Stage::waiting_for_writes) {
    if (close_reason_.empty())
      next();
    else if (outbox_.empty())
      close(close_reason_, log::Level::debug);
  } else if (stage_ == Stage::reading && srv_.stopping && outbox_.empty()) {
    // on_server_stop left the read alone while this reply was going out.
    close("daemon stopping", log::Level::debug);
  }
}

void Session::on_write_timer(std::uint64_t gen, const error_code& ec) {
  if (ec || gen != write_gen_ || !writing_) return;
  srv_.stats.write_timeouts.fetch_add(1, std::memory_order_relaxed);
  close("a " + std::to_string(outbox_.front().line.size()) +
            "-byte reply was not taken within write_timeout_ms (" +
            ms_text(srv_.limits.write_timeout) + "); " + std::to_string(outbox_.size()) +
            " reply(ies), " + std::to_string(unsent_bytes_) + " bytes unsent",
        log::Level::info);
}

void Session::close_when_sent(std::string why) {
  if (outbox_.empty()) {
    close(why, log::Level::debug);
    return;
  }
  stage_ = Stage::waiting_for_writes;
  close_reason_ = std::move(why);
}

} // namespace fdo::daemon
