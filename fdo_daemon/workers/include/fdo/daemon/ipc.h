// The channel between the daemon and its worker processes: length-prefixed
// messages over a Unix stream socket (socketpair), each a header (a JSON value,
// encoded as CBOR, RFC 8949) plus an opaque binary payload (an ELF object,
// argument buffers, ...).
//
// Wire format of one message (all integers little-endian):
//
//   u32 magic "FDO2" | u32 header_len | u64 payload_len | header (CBOR map) | payload
//
// CBOR, not JSON text, since "FDO2": a warm execute's job and reply headers
// encode + decode in 0.5-0.8 of JSON text's time, pre-scan included
// (bench/service/ipc_codec; building nlohmann's tree dominates both).
// "FDO1" (JSON text headers) is refused with an error naming both formats.
//
// A message may carry file descriptors (SCM_RIGHTS on its first bytes): the
// daemon hands an exec worker a client's sealed memfd buffer this way instead
// of copying its bytes into the payload.
//
// Lengths are checked against FrameLimits before anything is allocated, so a
// lying or corrupt prefix is an error, never a huge allocation. A worker that
// runs client code is untrusted: everything it sends goes through these checks,
// and every header through an iterative pre-scan (validate_header_encoding)
// before nlohmann's recursive CBOR reader sees it.
//
// On top of the framing sits the small job protocol spoken by WorkerPool and
// run_worker_loop (envelopes, JobLimits, error headers); see docs/workers.md.
#pragma once

#include "fdo/util/expected.h"
#include "fdo/util/fd.h"

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace fdo::daemon {

inline constexpr std::uint64_t kKiB = 1024;
inline constexpr std::uint64_t kMiB = 1024 * kKiB;
inline constexpr std::uint64_t kGiB = 1024 * kMiB;

// "FDO2" read as a little-endian u32: CBOR headers.
inline constexpr std::uint32_t kFrameMagic = 0x324F4446u;
// "FDO1": the former JSON-text headers; only recognised, to say so in the error.
inline constexpr std::uint32_t kLegacyFrameMagic = 0x314F4446u;
inline constexpr std::size_t kFramePrefixBytes = 16;

// Deepest nesting of arrays and maps (the top-level map counts as 1) a header
// may have. The pre-scan refuses deeper headers before the recursive decoder
// runs, so a hostile worker cannot exhaust fdod's stack.
inline constexpr std::size_t kMaxHeaderDepth = 64;

// Most descriptors one message may carry (the daemon's own per-request limit).
inline constexpr std::size_t kMaxMessageFds = 16;

struct Message {
  nlohmann::json header = nlohmann::json::object();
  std::string payload; // binary-safe bytes
  // Descriptors that travel with the message, never owned by it. Sending: the
  // sender keeps them open until the send returns. Received: the raw values of
  // the Fds that recv_message put in its `fds` (valid while those live).
  std::vector<int> fds{};
};

// Upper bounds a receiver accepts; checked on the prefix, before allocating.
struct FrameLimits {
  std::uint64_t max_header_bytes = 16 * kMiB;
  std::uint64_t max_payload_bytes = 1 * kGiB;
  std::uint64_t max_total_bytes = UINT64_MAX; // header + payload
};

// The time something spent paused: a background job its pool stopped while
// foreground jobs ran (job_runner.h). Thread-safe.
class PauseClock {
public:
  using Clock = std::chrono::steady_clock;
  void pause();  // no effect while paused
  void resume(); // no effect unless paused
  // In all, a pause under way included.
  Clock::duration paused() const;

private:
  mutable std::mutex mu_;
  Clock::duration total_{};
  std::optional<Clock::time_point> since_;
};

// A point in time after which I/O gives up with Errc::timeout.
class Deadline {
public:
  using Clock = std::chrono::steady_clock;
  static Deadline never() { return Deadline(); }
  static Deadline at(Clock::time_point when) { return Deadline(when); }
  static Deadline after(std::chrono::milliseconds d) { return Deadline(Clock::now() + d); }
  // The same deadline, later by the time `pauses` spends paused, as it goes
  // (a stopped job's wall limit counts only the time it could run).
  Deadline following(std::shared_ptr<const PauseClock> pauses) const;

  bool is_never() const { return !when_.has_value(); }
  bool expired() const {
    auto w = when();
    return w && Clock::now() >= *w;
  }
  std::optional<Clock::time_point> when() const;
  // Timeout for poll(2): -1 when never, else the milliseconds left rounded up (0 once expired).
  int poll_timeout_ms() const;

private:
  Deadline() = default;
  explicit Deadline(Clock::time_point when) : when_(when) {}
  std::optional<Clock::time_point> when_;
  std::shared_ptr<const PauseClock> pauses_;
};

// ---- Pure framing functions (no I/O) ----

struct FramePrefix {
  std::uint32_t header_len = 0;
  std::uint64_t payload_len = 0;
};

std::array<std::uint8_t, kFramePrefixBytes> encode_frame_prefix(std::uint32_t header_len,
                                                                std::uint64_t payload_len);
// Checks the magic and every length against `limits`:
// Errc::corrupt for a bad magic or an empty header, Errc::resource_exhausted
// for a length over a limit.
Expected<FramePrefix> decode_frame_prefix(std::span<const std::uint8_t, kFramePrefixBytes> bytes,
                                          const FrameLimits& limits);
// ---- Header codec (CBOR) ----

// The header as CBOR. Invalid UTF-8 in strings is replaced (U+FFFD), not
// thrown. Errc::invalid_argument when it is not an object or nests deeper than
// kMaxHeaderDepth (the receiver would refuse either).
Expected<std::string> encode_header(const nlohmann::json& header);
// `header` (an object of fewer than 23 members without `key`) plus the member
// `key` whose value is `encoded_value`, already CBOR (e.g. a handler's result
// header from encode_header): saves decoding and re-encoding a large value.
Expected<std::string> encode_header_with(const nlohmann::json& header, std::string_view key,
                                         std::string_view encoded_value);
// The pre-scan: iterative, builds nothing. Accepts exactly one CBOR map using
// only definite lengths, integers (negative ones within int64), UTF-8 text
// strings, arrays, maps with text keys, false/true/null and floats, nested at
// most kMaxHeaderDepth deep, every length and count within `bytes`, nothing
// after the map. Anything else (indefinite lengths, byte strings, tags, other
// simple values, truncation, trailing bytes) is Errc::corrupt naming the byte.
Status validate_header_encoding(std::string_view bytes);
// validate_header_encoding, then nlohmann's decoder.
Expected<nlohmann::json> decode_header(std::string_view bytes);

// One whole frame as bytes (header via encode_header).
Expected<std::string> encode_message(const Message& message);
// Exactly one frame: Errc::corrupt when truncated, followed by trailing bytes, or
// when the header fails decode_header.
Expected<Message> decode_message(std::string_view frame, const FrameLimits& limits);

// ---- Blocking I/O with deadlines (EINTR and short reads/writes handled) ----

// Sends one message. On sockets uses MSG_NOSIGNAL (a dead peer is
// Errc::unavailable, never SIGPIPE) and honours the deadline for every chunk.
Status send_message(int fd, const Message& message, Deadline deadline = Deadline::never());
// Same, with the header given as JSON or as already-encoded header bytes
// (from encode_header / encode_header_with: a sender that sends the same
// header often can encode it once).
// `fds` (at most kMaxMessageFds; only on a socket) go with the first bytes.
Status send_frame(int fd, const nlohmann::json& header, std::string_view payload,
                  Deadline deadline = Deadline::never(), std::span<const int> fds = {});
Status send_frame_encoded(int fd, std::string_view header_bytes, std::string_view payload,
                          Deadline deadline = Deadline::never(), std::span<const int> fds = {});

// Receives one message.
//   end of stream before the first byte -> Errc::unavailable "peer closed the connection"
//   end of stream inside a message      -> Errc::corrupt "truncated message: ..."
//   deadline passed                     -> Errc::timeout
//   bad magic / lengths / header        -> see decode_frame_prefix / decode_header
// `peer_exit_fd` (optional, e.g. a pidfd) is watched too: when it becomes
// readable and the socket has nothing more to read, the result is
// Errc::unavailable "peer process exited" (a grandchild holding the socket
// open cannot make us wait for the deadline).
// `fds`: null (the default) discards any descriptor the peer attached (the
// kernel closes them: the pool never takes descriptors from a worker);
// otherwise the descriptors that came with the message's prefix are appended
// to it (close-on-exec, owned by the caller) and their raw values put in the
// Message's `fds`. More than kMaxMessageFds: Errc::resource_exhausted (the
// extra ones are closed, the message is not read).
Expected<Message> recv_message(int fd, const FrameLimits& limits,
                               Deadline deadline = Deadline::never(), int peer_exit_fd = -1,
                               std::vector<Fd>* fds = nullptr);

// AF_UNIX SOCK_STREAM pair, both ends close-on-exec. (Stream, not SEQPACKET:
// payloads such as object files exceed the kernel's datagram size limits.)
struct SocketPair {
  Fd first;
  Fd second;
};
Expected<SocketPair> make_socket_pair();

// ---- Job protocol shared by WorkerPool and run_worker_loop ----

inline constexpr int kWorkerProtocolVersion = 1;
// Set by WorkerPool in each worker's environment: the daemon's pid, so the
// worker can tell whether its parent died before PR_SET_PDEATHSIG took effect.
inline constexpr const char* kWorkerParentPidEnv = "FDO_WORKER_PARENT_PID";

struct JobLimits {
  // Wall-clock time for the whole job (sending, running, answering). On expiry
  // the worker is SIGKILLed and replaced.
  std::chrono::milliseconds wall{30000};
  // Address space the job may add on top of what the worker already maps when
  // the job starts (RLIMIT_AS soft limit = current + this). 0 = unlimited.
  std::uint64_t address_space_bytes = 0;
  // Largest response (result header + payload) the pool accepts. Must be > 0.
  std::uint64_t max_output_bytes = 64 * kMiB;
  // CPU seconds the job may use (RLIMIT_CPU soft limit, a backstop behind the
  // wall limit). 0 = derived from `wall`: ceil(wall in s) + 1.
  std::uint64_t cpu_seconds = 0;
};
nlohmann::json to_json(const JobLimits& limits);
// Errc::invalid_argument naming the field when a field is missing or mistyped.
Expected<JobLimits> job_limits_from_json(const nlohmann::json& j);
// A job request's header, {"id", "limits", "job"[, "bind"]} (worker_loop.h),
// written as CBOR directly: the pool sends one per job, and building the tree
// only to encode it cost more than the rest of the envelope. `job_header` is
// the job's own header already encoded (encode_header); `bind` is null or the
// bind request. Decodes to the same header as encode_header of the tree.
Expected<std::string> encode_job_envelope(std::uint64_t id, const JobLimits& limits,
                                          std::string_view job_header,
                                          const nlohmann::json& bind = nullptr);
// Checks the invariants above (wall > 0, max_output_bytes > 0).
Status validate(const JobLimits& limits);
// The CPU-second limit actually applied (cpu_seconds, or derived from wall).
std::uint64_t effective_cpu_seconds(const JobLimits& limits);

// Error <-> {"code": "<errc name>", "message": "..."}.
std::optional<Errc> parse_errc(std::string_view name);
nlohmann::json error_to_json(const Error& error);
// An unknown code or a malformed object becomes Errc::internal saying so.
Error error_from_json(const nlohmann::json& j);

// "64 MiB", "1.5 MiB", "512 bytes": how limits are named in messages.
std::string format_bytes(std::uint64_t bytes);

} // namespace fdo::daemon
