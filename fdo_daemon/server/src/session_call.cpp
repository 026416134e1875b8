// A session's calls as they end (session.h): the handler thread's end_call()
// writes the reply itself where it may and parks the end, or posts it; the io
// thread takes it (on_call_done) from the post, its watch on the socket, the
// deadline timer's look, or a stop; and the deadline answers a call whose
// handler has not written a byte (docs/fdod.md, "Replies written by their
// handler").
#include "session.h"

#include <boost/asio/post.hpp>

namespace fdo::daemon {

void Session::arm_call_look(std::uint64_t gen, Clock::time_point now) {
  // Re-arming aborts the wait pending, if any; on_deadline ignores that.
  deadline_timer_.expires_at(std::min(call_deadline_, now + srv_.limits.idle_timeout));
  deadline_timer_.async_wait(
      [self = shared_from_this(), gen](const error_code& ec) { self->on_deadline(gen, ec); });
}

void Session::on_limits_changed() {
  if (stage_ == Stage::calling) arm_call_look(call_gen_, Clock::now());
}

void Session::end_call(CallEnd end) {
  // Counted as running until its reply is out or handed on (release: a
  // stats() reading 0 also sees the counts made here).
  struct Ended {
    Server::Impl& srv;
    ~Ended() { srv.stats.running.fetch_sub(1, std::memory_order_release); }
  } ended{srv_};
  {
    std::lock_guard lk(reply_mu_);
    if (direct_ok_ && direct_gen_ == end.gen && end.reply && end.fds.empty() && fd_ >= 0) {
      // Nothing else writes on this socket while the call runs (start_call);
      // the deadline no longer answers the call once a byte is out.
      direct_ok_ = false;
      const std::size_t sent = send_now(fd_, *end.reply);
      if (sent > 0) answered_gen_ = end.gen;
      if (sent == end.reply->size()) {
        srv_.stats.replies_by_handler.fetch_add(1, std::memory_order_relaxed);
        end.written = true;
        end.reply.reset();
      } else {
        end.reply->erase(0, sent);
      }
      end.at = Clock::now();
    }
    if (end.written && watching_ && direct_gen_ == end.gen) {
      srv_.stats.ends_unwoken.fetch_add(1, std::memory_order_relaxed);
      parked_ = std::move(end);
      return;
    }
  }
  asio::post(srv_.io, [self = shared_from_this(), end = std::move(end)]() mutable {
    self->on_call_done(std::move(end));
  });
}

std::optional<Session::CallEnd> Session::take_parked(std::uint64_t gen) {
  std::lock_guard lk(reply_mu_);
  if (direct_gen_ == gen) watching_ = false;
  if (!parked_ || parked_->gen != gen) return std::nullopt;
  std::optional<CallEnd> end = std::move(parked_);
  parked_.reset();
  return end;
}

void Session::on_call_watch(std::uint64_t gen, const error_code& ec) {
  // Readable (the next request, or the peer gone) or cancelled: either way
  // the io thread stops watching; a handler still running posts its end.
  if (auto end = take_parked(gen)) {
    readable_now_ = !ec;
    on_call_done(std::move(*end));
    readable_now_ = false;
  }
}

void Session::on_call_done(CallEnd end) {
  --srv_.running_handlers;
  if (end.gen != call_gen_ || stage_ != Stage::calling) {
    log::info(who() + ": a handler finished after its client was answered (timed out or closed)");
    srv_.maybe_finish();
    return;
  }
  {
    std::lock_guard lk(reply_mu_);
    watching_ = false;
    direct_ok_ = false;
  }
  error_code ignored;
  deadline_timer_.cancel(ignored);
  if (end.written) replied_at_ = end.at;
  if (end.reply) queue_line(std::move(*end.reply), std::move(end.fds));
  next();
}

void Session::on_deadline(std::uint64_t gen, const error_code& ec) {
  if (ec == asio::error::operation_aborted || gen != call_gen_ || stage_ != Stage::calling) return;
  if (auto end = take_parked(gen)) {
    on_call_done(std::move(*end));
    return;
  }
  const auto now = Clock::now();
  bool answered = false;
  {
    std::lock_guard lk(reply_mu_);
    answered = answered_gen_ == gen; // its end is on the way
    // The handler may not write from now on: the deadline answers.
    if (!answered && now >= call_deadline_ && direct_gen_ == gen) direct_ok_ = false;
  }
  if (answered) return;
  if (now < call_deadline_) {
    arm_call_look(gen, now);
    return;
  }
  // Any later completion of this call is stale.
  ++call_gen_;
  timed_out("while running");
}

void Session::timed_out(const char* when) {
  srv_.stats.timed_out.fetch_add(1, std::memory_order_relaxed);
  log::warning(who() + ": '" + rpc::cut(current_method_) + "' id " +
               rpc::cut(id_text(current_id_)) + " exceeded request_timeout_ms (" +
               ms_text(current_timeout_) + ") " + when);
  if (!current_notification_)
    queue_reply(rpc::deadline_response(current_id_, current_method_, current_timeout_));
  next();
}

} // namespace fdo::daemon
