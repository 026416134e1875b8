// One connection of the socket server. Private to the library.
#pragma once

#include "fdo/daemon/framing.h"
#include "fdo/util/log.h"
#include "server_impl.h"

#include <deque>
#include <mutex>
#include <optional>

namespace fdo::daemon {

// Reads lines and handles them strictly one at a time, in order (parsing and
// handlers on the pools, deadlines here); replies go out beside that through
// an outbox, so a pipelining client's next request runs while earlier replies
// drain, until more than max_unsent_bytes wait (then nothing more is read).
// Owned by Server::Impl::sessions; callbacks hold a shared_ptr so a session
// outlives any handler still running for it. Everything but the pool jobs
// runs on the io thread; a pool job's end_call() writes its reply and parks
// its end under reply_mu_, the one lock the two sides share.
class Session : public std::enable_shared_from_this<Session> {
public:
  Session(Server::Impl& srv, stream::socket socket, CallContext peer, std::uint64_t id,
          TenantLimits::Lease connection);
  // Tells the dispatcher's disconnect hooks: no handler of this connection
  // runs any more (each holds a reference to its session).
  ~Session();

  void start() { next(); }

  // The server is stopping: a session waiting for a request closes once its
  // replies are sent; a busy one closes after sending the reply of the
  // request it is running (next() checks srv_.stopping).
  void on_server_stop();

  void abort(const std::string& why) { close(why, log::Level::debug); }

  // set_limits changed the limits: a running call's next look for a parked
  // end follows the new idle_timeout.
  void on_limits_changed();

private:
  // What the request side is doing; the reply side (outbox_) runs beside it.
  enum class Stage {
    idle,
    reading,
    parsing,
    calling,
    waiting_for_writes, // unsent replies over the bound, or closing once they are sent
    closed
  };

  struct Pending {
    Frame frame;
    Clock::time_point received;
    // Descriptors that came with the line's bytes (execute's memfd buffers),
    // or why they were refused (more than kMaxRequestFds).
    std::vector<Fd> fds;
    std::string fd_error;
    // Not a line: descriptors that came with none (fd_error says so).
    bool no_request = false;
  };

  void next();
  void do_read();
  // The socket is readable: recvmsg takes bytes and any descriptors sent
  // with them (SCM_RIGHTS), then on_read frames them.
  void on_readable(const error_code& ec);
  void on_read(const error_code& ec, std::size_t n, std::vector<Fd> fds, bool fds_truncated);
  // Gives descriptors that arrived with a chunk to the line holding its last
  // byte (docs/fdod-protocol.md): a frame just completed, or the line still
  // in progress.
  void attach_fds(std::size_t first_new_frame, bool chunk_ended_line, std::vector<Fd> fds,
                  bool truncated);
  void on_read_timer(std::uint64_t gen, const error_code& ec);
  void start_parse(std::string line, Clock::time_point received);
  void on_parsed(ParsedLine parsed, Clock::time_point received);
  void start_call(Request req, Clock::time_point received);
  // An immediate method: invoked here on the io thread, its reply queued.
  void call_now(const Request& req, Clock::time_point deadline, const std::vector<Fd>& request_fds);
  void refuse_call(const Request& req, const Error& why, const nlohmann::json& data);
  // How a call ended, from its handler thread: the reply, or what its
  // handler could not write itself (docs/fdod.md, "Replies written by their
  // handler").
  struct CallEnd {
    std::uint64_t gen = 0;
    std::optional<std::string> reply; // what is left to send, "\n" included; none: nothing
    std::vector<Fd> fds;
    bool written = false; // the handler thread sent the whole reply
    Clock::time_point at{};
  };
  // On the handler thread, when the call's handler returns: writes the reply
  // on the socket itself if it may (direct_ok_), then hands the end to the io
  // thread, by a post unless the io thread watches the socket for this call
  // (then it finds the end parked when it looks next).
  void end_call(CallEnd end);
  // io thread: the end of the running call, however it arrived.
  void on_call_done(CallEnd end);
  // io thread: the socket became readable (or the watch was cancelled) while
  // call `gen` ran; takes its end if parked.
  void on_call_watch(std::uint64_t gen, const error_code& ec);
  // io thread: the parked end of call `gen`, if any; stops the watch.
  std::optional<CallEnd> take_parked(std::uint64_t gen);
  // io thread: the deadline timer of call `gen` fires at its deadline or,
  // sooner, after idle_timeout from `now`: a look for an end its handler
  // parked (the connection is idle from then on).
  void arm_call_look(std::uint64_t gen, Clock::time_point now);
  void on_deadline(std::uint64_t gen, const error_code& ec);
  void timed_out(const char* when);
  void queue_reply(std::string response, std::vector<Fd> fds = {});
  // A reply line with its "\n" (or the rest of one) to go out next.
  void queue_line(std::string line, std::vector<Fd> fds);
  void start_write();
  // The front reply carries fds: its first byte goes out alone with them
  // (sendmsg, SCM_RIGHTS) once the socket is writable, then the rest.
  void on_writable_for_fds(const error_code& ec);
  void on_written(const error_code& ec);
  void on_write_timer(std::uint64_t gen, const error_code& ec);
  // Closes now if nothing waits to be sent, else once the outbox is empty.
  void close_when_sent(std::string why);
  void close(const std::string& why, log::Level level);
  // Brings this connection's charge in its uid's byte budget
  // (max_buffered_bytes_per_uid) to what it holds now: the line being read
  // and the replies not yet sent. With Admission::check, growth past the
  // budget is refused and nothing is charged.
  Status account_bytes(TenantLimits::Admission admission);
  // A read took the uid past its byte budget: the client is told in one
  // best-effort line and the connection closed (its buffers freed).
  void over_byte_budget(const Error& why);
  std::string who() const; // "connection 7 (uid 1000)"

  Server::Impl& srv_;
  Dispatcher& dispatcher_; // outlives the server, so every session
  stream::socket socket_;
  asio::steady_timer deadline_timer_; // the running request's request_timeout
  asio::steady_timer read_timer_;     // read_timeout while a line is begun, else idle_timeout
  asio::steady_timer write_timer_;    // write_timeout of the reply being written
  CallContext peer_;
  std::uint64_t id_;
  TenantLimits::Lease connection_; // this connection's slot in its uid's quota

  FrameParser parser_;
  std::vector<char> read_buf_;
  std::vector<Frame> frames_;
  std::deque<Pending> pending_;
  // Descriptors of the line in progress, until it completes.
  std::vector<Fd> line_fds_;
  std::string line_fd_error_;
  // Those of the request being parsed or called (one at a time).
  std::vector<Fd> call_fds_;
  std::string call_fd_error_;
  Stage stage_ = Stage::idle;
  bool eof_ = false;
  bool paused_ = false; // in waiting_for_writes because of max_unsent_bytes
  std::string close_reason_;
  // Read deadline bookkeeping: when the current read began, and how long the
  // line in progress has been waited for in earlier reads.
  Clock::time_point read_started_{};
  Clock::duration line_waited_{};
  std::uint64_t read_gen_ = 0;

  // Replies in order, each with its "\n" and the fds its handler attached;
  // the front one is being written while writing_. unsent_bytes_ is their
  // total.
  struct Outgoing {
    std::string line;
    std::vector<Fd> fds; // sent with the line's first byte
  };
  std::deque<Outgoing> outbox_;
  std::size_t unsent_bytes_ = 0;
  std::uint64_t charged_bytes_ = 0; // this connection's share of its uid's byte budget
  bool writing_ = false;
  std::uint64_t write_gen_ = 0;

  std::uint64_t call_gen_ = 0;
  Clock::time_point call_deadline_{};
  // Set when the last call's reply was written by its handler thread and
  // the io thread learnt of it later: the idle timeout counts from then.
  std::optional<Clock::time_point> replied_at_;
  // The watch just saw the socket readable: do_read reads at once.
  bool readable_now_ = false;

  // Shared with the running call's handler thread, under reply_mu_ (the only
  // session state that thread touches besides what its job captured).
  std::mutex reply_mu_;
  int fd_ = -1;            // the socket's descriptor; -1 once closed
  bool direct_ok_ = false; // call direct_gen_'s handler may write its reply itself
  bool watching_ = false;  // the io thread watches the socket during call direct_gen_
  std::uint64_t direct_gen_ = 0;
  std::uint64_t answered_gen_ = 0; // the last call whose handler wrote reply bytes
  std::optional<CallEnd> parked_;  // an end the io thread has not taken yet
  nlohmann::json current_id_;
  std::string current_method_;
  bool current_notification_ = false;
  std::chrono::milliseconds current_timeout_{0};
};

} // namespace fdo::daemon
