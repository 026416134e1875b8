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

int Deadline::poll_timeout_ms() const {
  if (!when_) return -1;
  auto left = *when_ - Clock::now();
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

// Text, for error messages only (never on the wire).
std::string dump_header(const nlohmann::json& header) {
  // Replace invalid UTF-8 instead of throwing: a handler's error message may
  // quote arbitrary client bytes.
  return header.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// ---- CBOR pre-scan ----
//
// nlohmann's binary reader recurses once per nested array or map, and trusts
// declared lengths; a header from a worker that runs client code is hostile.
// This scan walks the encoding with an explicit stack, without building
// anything, and accepts only the subset encode_header produces:
//   unsigned and negative integers (a negative one must fit int64), text
//   strings holding valid UTF-8, arrays, maps with text keys, false, true,
//   null, half/single/double floats; definite lengths only.
// Rejected: indefinite lengths and "break", byte strings, tags, undefined and
// other simple values, reserved encodings, a length or count running past the
// buffer, nesting deeper than kMaxHeaderDepth, a top level that is not a map,
// bytes after the top-level map.

enum class ScanProblem { none, malformed, invalid_utf8, too_deep };

struct ScanResult {
  ScanProblem problem = ScanProblem::none;
  std::size_t offset = 0; // where the offending item starts
  const char* what = "";
};

// Valid UTF-8 (RFC 3629): no overlong forms, no surrogates, nothing past U+10FFFF.
bool valid_utf8(const std::uint8_t* p, std::size_t n) {
  std::size_t i = 0;
  while (i < n) {
    // ASCII, eight bytes at a time (headers are mostly ASCII).
    if (n - i >= 8) {
      std::uint64_t w;
      std::memcpy(&w, p + i, 8);
      if ((w & 0x8080808080808080ull) == 0) {
        i += 8;
        continue;
      }
    }
    const std::uint8_t c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t len;
    std::uint8_t lo = 0x80, hi = 0xBF; // bounds of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return false;
    }
    if (n - i < len) return false;
    if (p[i + 1] < lo || p[i + 1] > hi) return false;
    for (std::size_t k = 2; k < len; ++k)
      if ((p[i + k] & 0xC0) != 0x80) return false;
    i += len;
  }
  return true;
}

ScanResult scan_header(std::string_view bytes) {
  const auto* data = reinterpret_cast<const std::uint8_t*>(bytes.data());
  const std::size_t size = bytes.size();
  struct Level {
    std::uint64_t items_left; // a map counts keys and values
    bool map;
  };
  std::array<Level, kMaxHeaderDepth> stack{};
  std::size_t depth = 0;
  std::size_t pos = 0;
  auto fail = [](ScanProblem p, std::size_t at, const char* what) {
    return ScanResult{p, at, what};
  };
  bool top_done = false;
  while (!top_done) {
    const std::size_t at = pos;
    if (pos >= size) return fail(ScanProblem::malformed, at, "the encoding ends inside an item");
    const std::uint8_t ib = data[pos++];
    const unsigned major = ib >> 5;
    const unsigned info = ib & 0x1F;
    const bool is_key = depth > 0 && stack[depth - 1].map && stack[depth - 1].items_left % 2 == 0;
    if (depth == 0 && major != 5)
      return fail(ScanProblem::malformed, at, "the header is not a map");
    if (is_key && major != 3)
      return fail(ScanProblem::malformed, at, "a map key is not a text string");
    std::uint64_t arg = 0;
    if (major == 7) {
      // false, true, null; half, single, double floats.
      std::size_t extra;
      switch (info) {
      case 20:
      case 21:
      case 22: extra = 0; break;
      case 25: extra = 2; break;
      case 26: extra = 4; break;
      case 27: extra = 8; break;
      case 31: return fail(ScanProblem::malformed, at, "a break code outside an indefinite item");
      default: return fail(ScanProblem::malformed, at, "an unsupported simple value");
      }
      if (size - pos < extra)
        return fail(ScanProblem::malformed, at, "the encoding ends inside a float");
      pos += extra;
    } else {
      if (info < 24) {
        arg = info;
      } else if (info <= 27) {
        const std::size_t n = std::size_t{1} << (info - 24);
        if (size - pos < n)
          return fail(ScanProblem::malformed, at, "the encoding ends inside a length");
        for (std::size_t k = 0; k < n; ++k)
          arg = (arg << 8) | data[pos + k];
        pos += n;
      } else if (info == 31) {
        return fail(ScanProblem::malformed, at, "an indefinite length");
      } else {
        return fail(ScanProblem::malformed, at, "a reserved length encoding");
      }
      switch (major) {
      case 0: break;
      case 1:
        if (arg > static_cast<std::uint64_t>(INT64_MAX))
          return fail(ScanProblem::malformed, at, "a negative integer below -2^63");
        break;
      case 2: return fail(ScanProblem::malformed, at, "a byte string");
      case 3:
        if (arg > size - pos)
          return fail(ScanProblem::malformed, at, "a text string runs past the end");
        if (!valid_utf8(data + pos, static_cast<std::size_t>(arg)))
          return fail(ScanProblem::invalid_utf8, at, "a text string is not valid UTF-8");
        pos += static_cast<std::size_t>(arg);
        break;
      case 4:
      case 5: {
        if (depth == kMaxHeaderDepth)
          return fail(ScanProblem::too_deep, at, "nesting deeper than the limit");
        // Every item takes at least one byte: a count the rest cannot hold is a lie.
        const std::uint64_t items = major == 5 ? arg * 2 : arg;
        if (arg > size - pos || items > size - pos)
          return fail(ScanProblem::malformed, at, "a container count runs past the end");
        if (items > 0) {
          stack[depth++] = Level{items, major == 5};
          continue; // its items follow; nothing completed yet
        }
        if (depth == 0) top_done = true; // an empty top-level map
        break;
      }
      default: return fail(ScanProblem::malformed, at, "a tag");
      }
    }
    // One item completed: count it, and close every container it finished.
    while (depth > 0) {
      if (--stack[depth - 1].items_left > 0) break;
      --depth;
      if (depth == 0) top_done = true;
    }
  }
  if (pos != size) return fail(ScanProblem::malformed, pos, "bytes follow the header's map");
  return {};
}

Error scan_error(const ScanResult& r, std::size_t size) {
  return make_error(Errc::corrupt, "message header of " + std::to_string(size) +
                                       " bytes is not valid CBOR: " + r.what + " at byte " +
                                       std::to_string(r.offset));
}

Error scan_failure(const ScanResult& r, std::size_t size) {
  if (r.problem == ScanProblem::too_deep)
    return make_error(Errc::corrupt, "message header of " + std::to_string(size) +
                                         " bytes nests deeper than " +
                                         std::to_string(kMaxHeaderDepth) + " levels (at byte " +
                                         std::to_string(r.offset) + ")");
  return scan_error(r, size);
}

} // namespace

Status validate_header_encoding(std::string_view bytes) {
  ScanResult r = scan_header(bytes);
  if (r.problem != ScanProblem::none) return scan_failure(r, bytes.size());
  return ok();
}

Expected<nlohmann::json> decode_header(std::string_view bytes) {
  ScanResult r = scan_header(bytes);
  if (r.problem != ScanProblem::none) return scan_failure(r, bytes.size());
  // Only now, with nesting and every length bounded, may the recursive reader run.
  auto j = nlohmann::json::from_cbor(bytes.begin(), bytes.end(), /*strict=*/true,
                                     /*allow_exceptions=*/false);
  if (j.is_discarded())
    return make_error(Errc::corrupt, "message header of " + std::to_string(bytes.size()) +
                                         " bytes is not valid CBOR");
  return j;
}

Expected<std::string> encode_header(const nlohmann::json& header) {
  if (!header.is_object())
    return make_error(Errc::invalid_argument,
                      std::string("a message header must be an object, not ") +
                          header.type_name());
  std::string out;
  nlohmann::json::to_cbor(header, out);
  // The encoder copies strings as they are; the receiver rejects invalid
  // UTF-8. A handler's error message may quote arbitrary client bytes, so
  // such strings are replaced (U+FFFD) here, as the JSON text encoder did.
  // The scan of our own output is the receiver's, so what passes here passes there.
  ScanResult r = scan_header(out);
  if (r.problem == ScanProblem::invalid_utf8) {
    auto clean = nlohmann::json::parse(dump_header(header), nullptr, /*allow_exceptions=*/false);
    if (clean.is_discarded())
      return make_error(Errc::internal, "message header could not be made valid UTF-8");
    out.clear();
    nlohmann::json::to_cbor(clean, out);
    r = scan_header(out);
  }
  if (r.problem == ScanProblem::too_deep)
    return make_error(Errc::invalid_argument, "message header nests deeper than " +
                                                  std::to_string(kMaxHeaderDepth) + " levels");
  if (r.problem != ScanProblem::none) return scan_failure(r, out.size()).context("encode header");
  return out;
}

Expected<std::string> encode_header_with(const nlohmann::json& header, std::string_view key,
                                         std::string_view encoded_value) {
  if (!header.is_object() || header.contains(key) || header.size() >= 23)
    return make_error(Errc::invalid_argument,
                      "encode_header_with needs an object of fewer than 23 members without '" +
                          std::string(key) + "'");
  FDO_TRY(std::string out, encode_header(header));
  // A map of n < 24 members starts with the single byte 0xA0 + n: one more
  // member is the same map with that byte raised and the pair appended.
  out[0] = static_cast<char>(0xA0 + header.size() + 1);
  std::string key_bytes;
  nlohmann::json::to_cbor(nlohmann::json(key), key_bytes);
  out += key_bytes;
  out.append(encoded_value);
  return out;
}

std::array<std::uint8_t, kFramePrefixBytes> encode_frame_prefix(std::uint32_t header_len,
                                                                std::uint64_t payload_len) {
  std::array<std::uint8_t, kFramePrefixBytes> out{};
  put_u32(out.data(), kFrameMagic);
  put_u32(out.data() + 4, header_len);
  put_u64(out.data() + 8, payload_len);
  return out;
}

Expected<FramePrefix> decode_frame_prefix(std::span<const std::uint8_t, kFramePrefixBytes> bytes,
                                          const FrameLimits& limits) {
  std::uint32_t magic = get_u32(bytes.data());
  if (magic != kFrameMagic) {
    char buf[256];
    if (magic == kLegacyFrameMagic)
      std::snprintf(buf, sizeof buf,
                    "bad message magic 0x%08x \"FDO1\" (expected 0x%08x \"FDO2\"): the peer "
                    "speaks the old JSON-header wire format (fdod and fdo-worker from different "
                    "builds?)",
                    magic, kFrameMagic);
    else
      std::snprintf(buf, sizeof buf,
                    "bad message magic 0x%08x (expected 0x%08x \"FDO2\"): the stream is not a "
                    "worker channel or is out of sync",
                    magic, kFrameMagic);
    return make_error(Errc::corrupt, buf);
  }
  FramePrefix p;
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

Expected<std::string> encode_message(const Message& message) {
  FDO_TRY(std::string header, encode_header(message.header));
  if (header.size() > UINT32_MAX)
    return make_error(Errc::resource_exhausted, "message header of " +
                                                    std::to_string(header.size()) +
                                                    " bytes does not fit the 32-bit length field");
  auto prefix =
      encode_frame_prefix(static_cast<std::uint32_t>(header.size()), message.payload.size());
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
  FDO_TRY(m.header, decode_header(frame.substr(kFramePrefixBytes, p.header_len)));
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

// Reads exactly `len` bytes into `buf`; `part` names what is being read for
// error messages, `before` counts bytes of this message already received.
// With `fds`, reads take the descriptors that come with the bytes (recvmsg).
Status read_exact(int fd, char* buf, std::size_t len, Deadline deadline, int peer_exit_fd,
                  const char* part, std::uint64_t before, std::vector<Fd>* fds = nullptr) {
  std::size_t got = 0;
  auto truncated = [&] {
    if (before == 0 && got == 0) return closed_error();
    return make_error(Errc::corrupt, "truncated message: the peer closed the connection after " +
                                         std::to_string(got) + " of " + std::to_string(len) + " " +
                                         part + " bytes");
  };
  while (got < len) {
    FDO_TRY(Ready r, wait_for(fd, POLLIN, deadline, peer_exit_fd));
    if (r == Ready::timed_out) {
      if (before == 0 && got == 0)
        return make_error(Errc::timeout, "timed out waiting for a message");
      return make_error(Errc::timeout, "timed out after receiving " + std::to_string(got) + " of " +
                                           std::to_string(len) + " " + part + " bytes");
    }
    if (r == Ready::peer_exited) {
      // The process is gone; take what is still buffered, then give up.
      ssize_t n = ::recv(fd, buf + got, len - got, MSG_DONTWAIT);
      if (n > 0) {
        got += static_cast<std::size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      // End of stream, nothing buffered, or a reset: the peer is gone either way.
      if (before == 0 && got == 0) return make_error(Errc::unavailable, "peer process exited");
      return truncated();
    }
    ssize_t n;
    if (fds != nullptr) {
      bool truncated = false;
      const std::size_t had = fds->size();
      n = receive_with_fds(fd, std::span<char>(buf + got, len - got), kMaxMessageFds + 1, 0, *fds,
                           truncated);
      if (truncated || fds->size() > kMaxMessageFds)
        return make_error(Errc::resource_exhausted,
                          "a message came with more than " + std::to_string(kMaxMessageFds) +
                              " file descriptors (" + std::to_string(fds->size() - had) +
                              (truncated ? " or more" : "") + " on one read)");
    } else {
      n = ::read(fd, buf + got, len - got);
    }
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      if (errno == ECONNRESET) return before == 0 && got == 0 ? closed_error() : truncated();
      return Error::from_errno(std::string("read message ") + part, errno);
    }
    if (n == 0) return truncated();
    got += static_cast<std::size_t>(n);
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
                          Deadline deadline, std::span<const int> fds) {
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
      encode_frame_prefix(static_cast<std::uint32_t>(header_bytes.size()), payload.size());
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

Status send_message(int fd, const Message& message, Deadline deadline) {
  return send_frame(fd, message.header, message.payload, deadline, message.fds);
}

Expected<Message> recv_message(int fd, const FrameLimits& limits, Deadline deadline,
                               int peer_exit_fd, std::vector<Fd>* fds) {
  std::array<std::uint8_t, kFramePrefixBytes> raw{};
  const std::size_t fds_before = fds != nullptr ? fds->size() : 0;
  FDO_TRY_STATUS(read_exact(fd, reinterpret_cast<char*>(raw.data()), raw.size(), deadline,
                            peer_exit_fd, "prefix", 0, fds));
  FDO_TRY(FramePrefix p, decode_frame_prefix(raw, limits));
  // Allocation happens only now, after every length passed its limit.
  std::string header(p.header_len, '\0');
  FDO_TRY_STATUS(read_exact(fd, header.data(), header.size(), deadline, peer_exit_fd, "header",
                            kFramePrefixBytes));
  Message m;
  FDO_TRY(m.header, decode_header(header));
  if (fds != nullptr)
    for (std::size_t i = fds_before; i < fds->size(); ++i)
      m.fds.push_back((*fds)[i].get());
  m.payload.resize(p.payload_len);
  FDO_TRY_STATUS(read_exact(fd, m.payload.data(), m.payload.size(), deadline, peer_exit_fd,
                            "payload", kFramePrefixBytes + p.header_len));
  return m;
}

Expected<SocketPair> make_socket_pair() {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0)
    return Error::from_errno("socketpair", errno);
  return SocketPair{Fd(fds[0]), Fd(fds[1])};
}

// ---------------------------------------------------------------------------
// Job protocol

nlohmann::json to_json(const JobLimits& l) {
  return {{"wall_ms", static_cast<std::uint64_t>(std::max<std::int64_t>(l.wall.count(), 0))},
          {"address_space_bytes", l.address_space_bytes},
          {"max_output_bytes", l.max_output_bytes},
          {"cpu_seconds", l.cpu_seconds}};
}

Expected<JobLimits> job_limits_from_json(const nlohmann::json& j) {
  if (!j.is_object()) return make_error(Errc::invalid_argument, "job limits must be an object");
  auto field = [&](const char* name) -> Expected<std::uint64_t> {
    auto it = j.find(name);
    // Parsed JSON holds non-negative integers as unsigned; JSON built in
    // memory may hold them as signed.
    bool ok = it != j.end() && (it->is_number_unsigned() ||
                                (it->is_number_integer() && it->get<std::int64_t>() >= 0));
    if (!ok)
      return make_error(Errc::invalid_argument,
                        std::string("job limits: '") + name + "' must be a non-negative integer");
    return it->get<std::uint64_t>();
  };
  JobLimits l;
  FDO_TRY(std::uint64_t wall, field("wall_ms"));
  if (wall > static_cast<std::uint64_t>(INT64_MAX / 1000000))
    return make_error(Errc::invalid_argument, "job limits: 'wall_ms' is out of range");
  l.wall = std::chrono::milliseconds(static_cast<std::int64_t>(wall));
  FDO_TRY(l.address_space_bytes, field("address_space_bytes"));
  FDO_TRY(l.max_output_bytes, field("max_output_bytes"));
  FDO_TRY(l.cpu_seconds, field("cpu_seconds"));
  return l;
}

Status validate(const JobLimits& l) {
  if (l.wall.count() <= 0)
    return make_error(Errc::invalid_argument, "job wall-time limit must be positive");
  if (l.max_output_bytes == 0)
    return make_error(Errc::invalid_argument, "job output limit must be positive");
  return ok();
}

std::uint64_t effective_cpu_seconds(const JobLimits& l) {
  if (l.cpu_seconds != 0) return l.cpu_seconds;
  auto secs = std::chrono::ceil<std::chrono::seconds>(l.wall).count();
  return static_cast<std::uint64_t>(std::max<std::int64_t>(secs, 0)) + 1;
}

std::optional<Errc> parse_errc(std::string_view name) {
  for (int i = 0; i <= static_cast<int>(Errc::internal); ++i) {
    auto code = static_cast<Errc>(i);
    if (to_string(code) == name) return code;
  }
  return std::nullopt;
}

nlohmann::json error_to_json(const Error& e) {
  return {{"code", std::string(to_string(e.code()))}, {"message", e.message()}};
}

Error error_from_json(const nlohmann::json& j) {
  if (!j.is_object() || !j.contains("code") || !j["code"].is_string() || !j.contains("message") ||
      !j["message"].is_string())
    return make_error(Errc::internal, "malformed error object from worker: " + dump_header(j));
  auto name = j["code"].get<std::string>();
  auto message = j["message"].get<std::string>();
  if (auto code = parse_errc(name)) return Error(*code, std::move(message));
  return make_error(Errc::internal,
                    "worker reported unknown error code '" + name + "': " + message);
}

std::string format_bytes(std::uint64_t bytes) {
  if (bytes >= kMiB) {
    if (bytes % kMiB == 0) return std::to_string(bytes / kMiB) + " MiB";
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / double(kMiB));
    return buf;
  }
  if (bytes >= kKiB && bytes % kKiB == 0) return std::to_string(bytes / kKiB) + " KiB";
  return std::to_string(bytes) + " bytes";
}

} // namespace fdo::daemon
