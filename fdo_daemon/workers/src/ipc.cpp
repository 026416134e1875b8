// The framed channel (ipc.h): deadlines, the frame prefix and its limits,
// whole messages encoded to and decoded from bytes, and sending and receiving
// them (with file descriptors) over a socket within a deadline.
#include "fdo/daemon/ipc.h"

#include "fdo/util/scm_rights.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

namespace fdo::daemon {

void PauseClock::pause() {
  std::lock_guard lk(mu_);
  if (!since_) since_ = Clock::now();
}

void PauseClock::resume() {
  std::lock_guard lk(mu_);
  if (!since_) return;
  total_ += Clock::now() - *since_;
  since_.reset();
}

PauseClock::Clock::duration PauseClock::paused() const {
  std::lock_guard lk(mu_);
  return since_ ? total_ + (Clock::now() - *since_) : total_;
}

Deadline Deadline::following(std::shared_ptr<const PauseClock> pauses) const {
  Deadline d = *this;
  d.pauses_ = std::move(pauses);
  return d;
}

std::optional<Deadline::Clock::time_point> Deadline::when() const {
  if (!when_ || !pauses_) return when_;
  return *when_ + pauses_->paused();
}

int Deadline::poll_timeout_ms() const {
  auto w = when();
  if (!w) return -1;
  auto left = *w - Clock::now();
  if (left <= Clock::duration::zero()) return 0;
  // Round up so poll never returns "timed out" just before the deadline.
  auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return static_cast<int>(std::min<std::int64_t>(ms, INT_MAX));
}

// ---------------------------------------------------------------------------
// Pure framing

namespace {

void put_u32(std::uint8_t* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i)
    p[i] = static_cast<std::uint8_t>(v >> (8 * i));
}
void put_u64(std::uint8_t* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i)
    p[i] = static_cast<std::uint8_t>(v >> (8 * i));
}
std::uint32_t get_u32(const std::uint8_t* p) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= std::uint32_t(p[i]) << (8 * i);
  return v;
}
std::uint64_t get_u64(const std::uint8_t* p) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i)
    v |= std::uint64_t(p[i]) << (8 * i);
  return v;
}

} // namespace

std::array<std::uint8_t, kFramePrefixBytes>
encode_frame_prefix(std::uint32_t header_len, std::uint64_t payload_len, FrameKind kind) {
  std::array<std::uint8_t, kFramePrefixBytes> out{};
  put_u32(out.data(), kind == FrameKind::typed ? kTypedFrameMagic : kFrameMagic);
  put_u32(out.data() + 4, header_len);
  put_u64(out.data() + 8, payload_len);
  return out;
}

Expected<FramePrefix> decode_frame_prefix(std::span<const std::uint8_t, kFramePrefixBytes> bytes,
                                          const FrameLimits& limits) {
  std::uint32_t magic = get_u32(bytes.data());
  if (magic != kFrameMagic && magic != kTypedFrameMagic) {
    char buf[256];
    if (magic == kLegacyFrameMagic)
      std::snprintf(buf, sizeof buf,
                    "bad message magic 0x%08x \"FDO1\" (expected 0x%08x \"FDO2\"): the peer "
                    "speaks the old JSON-header wire format (fdod and fdo-worker from different "
                    "builds?)",
                    magic, kFrameMagic);
    else
      std::snprintf(
          buf, sizeof buf,
          "bad message magic 0x%08x (expected 0x%08x \"FDO2\" or \"FDO3\"): the stream is not a "
          "worker channel or is out of sync",
          magic, kFrameMagic);
    return make_error(Errc::corrupt, buf);
  }
  FramePrefix p;
  p.kind = magic == kTypedFrameMagic ? FrameKind::typed : FrameKind::cbor;
  p.header_len = get_u32(bytes.data() + 4);
  p.payload_len = get_u64(bytes.data() + 8);
  if (p.header_len == 0) return make_error(Errc::corrupt, "message has an empty header");
  if (p.header_len > limits.max_header_bytes)
    return make_error(Errc::resource_exhausted,
                      "message header of " + std::to_string(p.header_len) +
                          " bytes exceeds the limit of " + std::to_string(limits.max_header_bytes) +
                          " bytes");
  if (p.payload_len > limits.max_payload_bytes)
    return make_error(Errc::resource_exhausted,
                      "message payload of " + std::to_string(p.payload_len) +
                          " bytes exceeds the limit of " +
                          std::to_string(limits.max_payload_bytes) + " bytes");
  // Written to avoid overflow: header_len + payload_len may not fit in u64.
  if (p.header_len > limits.max_total_bytes ||
      p.payload_len > limits.max_total_bytes - p.header_len) {
    std::string total = p.payload_len > UINT64_MAX - p.header_len
                            ? std::string("more than 2^64")
                            : std::to_string(std::uint64_t(p.header_len) + p.payload_len);
    return make_error(Errc::resource_exhausted,
                      "message of " + total + " bytes exceeds the limit of " +
                          std::to_string(limits.max_total_bytes) + " bytes");
  }
  return p;
}

namespace {

// A frame's header into `m`: the CBOR header, or the typed envelope and body.
Status decode_frame_header(FrameKind kind, std::string_view bytes, Message& m) {
  if (kind == FrameKind::cbor) {
    FDO_TRY(m.header, decode_header(bytes));
    return ok();
  }
  FDO_TRY(auto typed, decode_typed_envelope(bytes));
  m.body = typed.second;
  m.envelope = std::move(typed.first);
  return ok();
}

} // namespace

Expected<std::string> encode_message(const Message& message) {
  const bool typed = message.body && message.envelope;
  std::string header;
  if (typed) {
    FDO_TRY(header, encode_typed_envelope(*message.envelope, *message.body));
  } else {
    FDO_TRY(header, encode_header(message.header));
  }
  if (header.size() > UINT32_MAX)
    return make_error(Errc::resource_exhausted, "message header of " +
                                                    std::to_string(header.size()) +
                                                    " bytes does not fit the 32-bit length field");
  auto prefix =
      encode_frame_prefix(static_cast<std::uint32_t>(header.size()), message.payload.size(),
                          typed ? FrameKind::typed : FrameKind::cbor);
  std::string out;
  out.reserve(prefix.size() + header.size() + message.payload.size());
  out.append(reinterpret_cast<const char*>(prefix.data()), prefix.size());
  out.append(header);
  out.append(message.payload);
  return out;
}

Expected<Message> decode_message(std::string_view frame, const FrameLimits& limits) {
  if (frame.size() < kFramePrefixBytes)
    return make_error(Errc::corrupt, "truncated message: " + std::to_string(frame.size()) + " of " +
                                         std::to_string(kFramePrefixBytes) + " prefix bytes");
  std::span<const std::uint8_t, kFramePrefixBytes> prefix(
      reinterpret_cast<const std::uint8_t*>(frame.data()), kFramePrefixBytes);
  FDO_TRY(FramePrefix p, decode_frame_prefix(prefix, limits));
  std::uint64_t body = frame.size() - kFramePrefixBytes;
  std::uint64_t want = std::uint64_t(p.header_len) + p.payload_len;
  if (body < want)
    return make_error(Errc::corrupt, "truncated message: " + std::to_string(body) + " of " +
                                         std::to_string(want) + " body bytes");
  if (body > want)
    return make_error(Errc::corrupt, "message is followed by " + std::to_string(body - want) +
                                         " unexpected bytes");
  Message m;
  FDO_TRY_STATUS(decode_frame_header(p.kind, frame.substr(kFramePrefixBytes, p.header_len), m));
  m.payload.assign(frame.substr(kFramePrefixBytes + p.header_len));
  return m;
}

// ---------------------------------------------------------------------------
// I/O

namespace {

enum class Ready { yes, timed_out, peer_exited };

Expected<Ready> wait_for(int fd, short events, Deadline deadline, int peer_exit_fd) {
  for (;;) {
    pollfd p[2] = {{fd, events, 0}, {peer_exit_fd, POLLIN, 0}};
    int n = ::poll(p, peer_exit_fd >= 0 ? 2 : 1, deadline.poll_timeout_ms());
    if (n < 0) {
      if (errno == EINTR) continue;
      return Error::from_errno("poll", errno);
    }
    // The socket first: a peer that wrote its answer and then exited must
    // still have the answer read.
    if (p[0].revents != 0) return Ready::yes;
    if (peer_exit_fd >= 0 && p[1].revents != 0) return Ready::peer_exited;
    if (n == 0 && deadline.expired()) return Ready::timed_out;
  }
}

Error closed_error() {
  return make_error(Errc::unavailable, "peer closed the connection");
}

// One buffer of a message being read, and what it is called in errors.
struct ReadPart {
  char* data;
  std::size_t len;
  const char* name;
};

// Where a read may put what the socket has beyond the parts (the bytes after
// a message's prefix, read in the same call), and how many it put there.
struct Spill {
  std::span<char> buffer;
  std::size_t used = 0;
};

// Reads exactly the parts' bytes, in order, filling several parts with one
// call where the socket has them; `before` counts bytes of this message
// received before the parts, `already` bytes of the parts filled already.
// With `fds`, reads take the descriptors that come with the bytes (recvmsg;
// one part only). With `spill`, a read may take more than the parts: the rest
// goes to the spill buffer, which must follow the last part in memory when
// `fds` is given.
Status read_exact(int fd, std::span<const ReadPart> parts, Deadline deadline, int peer_exit_fd,
                  std::uint64_t before, std::vector<Fd>* fds = nullptr, Spill* spill = nullptr,
                  std::size_t already = 0) {
  std::size_t len = 0;
  for (const ReadPart& p : parts)
    len += p.len;
  std::size_t got = already;
  // Where `got` stands in the parts, for error messages: the part being read
  // and how much of it has arrived.
  auto position = [&]() -> std::pair<const ReadPart*, std::size_t> {
    std::size_t at = got;
    for (const ReadPart& p : parts) {
      if (at < p.len || &p == &parts.back()) return {&p, at};
      at -= p.len;
    }
    return {nullptr, 0};
  };
  auto describe = [&] {
    auto [part, at] = position();
    return std::to_string(at) + " of " + std::to_string(part->len) + " " + part->name + " bytes";
  };
  auto truncated = [&] {
    if (before == 0 && got == 0) return closed_error();
    return make_error(Errc::corrupt,
                      "truncated message: the peer closed the connection after " + describe());
  };
  // The buffers still to fill, from `got` on (at most the parts' count), and
  // the spill buffer after them.
  std::array<iovec, 5> iov{};
  auto remaining = [&]() -> int {
    std::size_t at = got;
    int n = 0;
    for (const ReadPart& p : parts) {
      if (at >= p.len) {
        at -= p.len;
        continue;
      }
      iov[static_cast<std::size_t>(n++)] = {p.data + at, p.len - at};
      at = 0;
    }
    if (spill != nullptr && !spill->buffer.empty())
      iov[static_cast<std::size_t>(n++)] = {spill->buffer.data(), spill->buffer.size()};
    return n;
  };
  // Counts a read: the parts first, the rest spilled (only the read that
  // fills the parts can spill, so the spill buffer fills from its start).
  auto count = [&](std::size_t n) {
    got += n;
    if (got > len) {
      spill->used = got - len;
      got = len;
    }
  };
  auto recv_iov = [&](int flags) {
    msghdr msg{};
    msg.msg_iov = iov.data();
    msg.msg_iovlen = static_cast<std::size_t>(remaining());
    return ::recvmsg(fd, &msg, flags);
  };
  // The rest of a message (its header and payload, after the prefix) is
  // usually in the socket already: read it without polling first, and poll
  // only when a read would block (a socket: recv with MSG_DONTWAIT).
  bool try_first = (before != 0 || already != 0) && fds == nullptr;
  // With nothing to watch but the socket and no deadline, a blocking read
  // waits as well as poll would, in one call instead of two.
  bool wait_in_read = deadline.is_never() && peer_exit_fd < 0;
  while (got < len) {
    if (try_first) {
      ssize_t n = recv_iov(MSG_DONTWAIT);
      if (n > 0) {
        count(static_cast<std::size_t>(n));
        continue;
      }
      if (n == 0) return truncated();
      if (errno == EINTR) continue;
      // Would block, not a socket, or an error: poll and read from now on
      // (the read after the poll reports an error).
      try_first = false;
    }
    if (!wait_in_read) {
      FDO_TRY(Ready r, wait_for(fd, POLLIN, deadline, peer_exit_fd));
      if (r == Ready::timed_out) {
        if (before == 0 && got == 0)
          return make_error(Errc::timeout, "timed out waiting for a message");
        return make_error(Errc::timeout, "timed out after receiving " + describe());
      }
      if (r == Ready::peer_exited) {
        // The process is gone; take what is still buffered, then give up.
        ssize_t n = recv_iov(MSG_DONTWAIT);
        if (n > 0) {
          count(static_cast<std::size_t>(n));
          continue;
        }
        if (n < 0 && errno == EINTR) continue;
        // End of stream, nothing buffered, or a reset: the peer is gone either way.
        if (before == 0 && got == 0) return make_error(Errc::unavailable, "peer process exited");
        return truncated();
      }
    }
    ssize_t n;
    const int n_iov = remaining();
    if (fds != nullptr) {
      // One part only (the prefix): iov[0] is what is left of it, and the
      // spill buffer, if any, follows it in memory.
      bool truncated = false;
      const std::size_t had = fds->size();
      const std::size_t room = iov[0].iov_len + (n_iov > 1 ? iov[1].iov_len : 0);
      n = receive_with_fds(fd, std::span<char>(static_cast<char*>(iov[0].iov_base), room),
                           kMaxMessageFds + 1, 0, *fds, truncated);
      if (truncated || fds->size() > kMaxMessageFds)
        return make_error(Errc::resource_exhausted,
                          "a message came with more than " + std::to_string(kMaxMessageFds) +
                              " file descriptors (" + std::to_string(fds->size() - had) +
                              (truncated ? " or more" : "") + " on one read)");
    } else {
      n = ::readv(fd, iov.data(), n_iov);
    }
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) wait_in_read = false; // a non-blocking fd
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      if (errno == ECONNRESET) return before == 0 && got == 0 ? closed_error() : truncated();
      return Error::from_errno(std::string("read message ") + position().first->name, errno);
    }
    if (n == 0) return truncated();
    count(static_cast<std::size_t>(n));
  }
  return ok();
}

// `fds` go with the first sendmsg that sends anything (on a socket only).
Status write_iov(int fd, iovec* iov, int count, Deadline deadline, std::span<const int> fds) {
  bool is_socket = true;
  std::vector<char> control;
  if (!fds.empty()) {
    control.assign(CMSG_SPACE(fds.size() * sizeof(int)), 0);
    msghdr m{};
    m.msg_control = control.data();
    m.msg_controllen = control.size();
    cmsghdr* cm = CMSG_FIRSTHDR(&m);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(fds.size() * sizeof(int));
    std::memcpy(CMSG_DATA(cm), fds.data(), fds.size() * sizeof(int));
  }
  while (count > 0) {
    if (iov[0].iov_len == 0) {
      ++iov;
      --count;
      continue;
    }
    ssize_t n;
    if (is_socket) {
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = static_cast<std::size_t>(count);
      if (!control.empty()) {
        msg.msg_control = control.data();
        msg.msg_controllen = control.size();
      }
      // Non-blocking per call so a peer that stops reading cannot hold us past
      // the deadline; no SIGPIPE when the peer is gone.
      n = ::sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0 && errno == ENOTSOCK) {
        if (!control.empty())
          return make_error(Errc::invalid_argument,
                            "file descriptors can only be sent over a socket");
        is_socket = false;
        continue;
      }
      if (n > 0) control.clear(); // the descriptors went with these bytes
    } else {
      FDO_TRY(Ready r, wait_for(fd, POLLOUT, deadline, -1));
      if (r == Ready::timed_out) return make_error(Errc::timeout, "timed out sending a message");
      n = ::writev(fd, iov, count);
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        FDO_TRY(Ready r, wait_for(fd, POLLOUT, deadline, -1));
        if (r == Ready::timed_out)
          return make_error(Errc::timeout, "timed out sending a message (the peer is not reading)");
        continue;
      }
      if (errno == EPIPE || errno == ECONNRESET) return closed_error();
      return Error::from_errno("send message", errno);
    }
    auto done = static_cast<std::size_t>(n);
    while (count > 0 && done >= iov[0].iov_len) {
      done -= iov[0].iov_len;
      ++iov;
      --count;
    }
    if (count > 0) {
      iov[0].iov_base = static_cast<char*>(iov[0].iov_base) + done;
      iov[0].iov_len -= done;
    }
  }
  return ok();
}

} // namespace

Status send_frame_encoded(int fd, std::string_view header_bytes, std::string_view payload,
                          Deadline deadline, std::span<const int> fds, FrameKind kind) {
  if (header_bytes.empty()) return make_error(Errc::invalid_argument, "empty message header");
  if (fds.size() > kMaxMessageFds)
    return make_error(Errc::invalid_argument,
                      "a message may carry at most " + std::to_string(kMaxMessageFds) +
                          " file descriptors, not " + std::to_string(fds.size()));
  if (header_bytes.size() > UINT32_MAX)
    return make_error(Errc::resource_exhausted, "message header of " +
                                                    std::to_string(header_bytes.size()) +
                                                    " bytes does not fit the 32-bit length field");
  auto prefix =
      encode_frame_prefix(static_cast<std::uint32_t>(header_bytes.size()), payload.size(), kind);
  iovec iov[3] = {
      {prefix.data(), prefix.size()},
      {const_cast<char*>(header_bytes.data()), header_bytes.size()},
      {const_cast<char*>(payload.data()), payload.size()},
  };
  return write_iov(fd, iov, 3, deadline, fds);
}

Status send_frame(int fd, const nlohmann::json& header, std::string_view payload, Deadline deadline,
                  std::span<const int> fds) {
  FDO_TRY(std::string bytes, encode_header(header));
  return send_frame_encoded(fd, bytes, payload, deadline, fds);
}

Status send_typed_frame(int fd, const TypedEnvelope& envelope, const TypedBody& body,
                        std::string_view payload, Deadline deadline, std::span<const int> fds) {
  FDO_TRY(std::string bytes, encode_typed_envelope(envelope, body));
  return send_frame_encoded(fd, bytes, payload, deadline, fds, FrameKind::typed);
}

Status send_message(int fd, const Message& message, Deadline deadline) {
  if (message.body && message.envelope)
    return send_typed_frame(fd, *message.envelope, *message.body, message.payload, deadline,
                            message.fds);
  return send_frame(fd, message.header, message.payload, deadline, message.fds);
}

Expected<Message> recv_message(int fd, const FrameLimits& limits, Deadline deadline,
                               int peer_exit_fd, std::vector<Fd>* fds, std::size_t* trailing) {
  // The first read takes the prefix and whatever follows it in the socket,
  // up to a few KiB: a small message (a warm stage's job and reply) arrives
  // in one call. The prefix and the spill buffer are one array, so a read
  // that takes descriptors (one buffer) can fill both.
  constexpr std::size_t kFirstRead = 16 * kKiB;
  std::array<char, kFramePrefixBytes + kFirstRead> first;
  const std::size_t fds_before = fds != nullptr ? fds->size() : 0;
  const ReadPart prefix[] = {{first.data(), kFramePrefixBytes, "prefix"}};
  Spill spill{std::span<char>(first.data() + kFramePrefixBytes, kFirstRead)};
  FDO_TRY_STATUS(read_exact(fd, prefix, deadline, peer_exit_fd, 0, fds, &spill));
  std::span<const std::uint8_t, kFramePrefixBytes> raw(
      reinterpret_cast<const std::uint8_t*>(first.data()), kFramePrefixBytes);
  FDO_TRY(FramePrefix p, decode_frame_prefix(raw, limits));
  // Allocation happens only now, after every length passed its limit; what
  // the first read took of the header and payload is copied in, the rest
  // read into place (header and payload together, usually one call).
  std::string header(p.header_len, '\0');
  Message m;
  m.payload.resize(p.payload_len);
  std::string_view spilled(spill.buffer.data(), spill.used);
  const std::size_t to_header = std::min<std::size_t>(spilled.size(), header.size());
  std::memcpy(header.data(), spilled.data(), to_header);
  spilled.remove_prefix(to_header);
  const std::size_t to_payload = std::min<std::size_t>(spilled.size(), m.payload.size());
  std::memcpy(m.payload.data(), spilled.data(), to_payload);
  spilled.remove_prefix(to_payload);
  if (!spilled.empty()) {
    // Bytes of whatever the peer sent next: this channel carries one message
    // at a time, so the stream is out of step with it.
    if (trailing == nullptr)
      return make_error(Errc::corrupt, "the peer sent " + std::to_string(spilled.size()) +
                                           " bytes after its message: the stream is out of sync");
    *trailing = spilled.size();
  } else if (trailing != nullptr) {
    *trailing = 0;
  }
  const ReadPart body[] = {{header.data(), header.size(), "header"},
                           {m.payload.data(), m.payload.size(), "payload"}};
  FDO_TRY_STATUS(read_exact(fd, body, deadline, peer_exit_fd, kFramePrefixBytes, nullptr, nullptr,
                            to_header + to_payload));
  FDO_TRY_STATUS(decode_frame_header(p.kind, header, m));
  if (fds != nullptr)
    for (std::size_t i = fds_before; i < fds->size(); ++i)
      m.fds.push_back((*fds)[i].get());
  return m;
}

Expected<SocketPair> make_socket_pair() {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0)
    return Error::from_errno("socketpair", errno);
  return SocketPair{Fd(fds[0]), Fd(fds[1])};
}

} // namespace fdo::daemon
