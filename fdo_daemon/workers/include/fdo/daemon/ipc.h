// The channel between the daemon and its worker processes: length-prefixed
// messages over a Unix stream socket (socketpair), each a header (a JSON value,
// encoded as CBOR, RFC 8949) plus an opaque binary payload (an ELF object,
// argument buffers, ...).
//
// Wire format of one message (all integers little-endian):
//
//   u32 magic "FDO2" | u32 header_len | u64 payload_len | header (CBOR map) | payload
//   u32 magic "FDO3" | u32 header_len | u64 payload_len | typed envelope     | payload
//
// "FDO3" carries a typed job or its successful reply (exec_messages.h,
// compile_messages.h): the envelope is fixed-shape fields (TypedEnvelope
// below), not a CBOR map, so neither side builds a tree for it; CBOR remains
// only for what stays variable (a bind request or report inside the envelope,
// errors, fatal reports, the hello, and the jobs that are not typed).
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
#include <utility>
#include <vector>

namespace fdo::daemon {

inline constexpr std::uint64_t kKiB = 1024;
inline constexpr std::uint64_t kMiB = 1024 * kKiB;
inline constexpr std::uint64_t kGiB = 1024 * kMiB;

// "FDO2" read as a little-endian u32: CBOR headers.
inline constexpr std::uint32_t kFrameMagic = 0x324F4446u;
// "FDO3": a typed envelope instead of a CBOR header.
inline constexpr std::uint32_t kTypedFrameMagic = 0x334F4446u;
// "FDO1": the former JSON-text headers; only recognised, to say so in the error.
inline constexpr std::uint32_t kLegacyFrameMagic = 0x314F4446u;
inline constexpr std::size_t kFramePrefixBytes = 16;

// Deepest nesting of arrays and maps (the top-level map counts as 1) a header
// may have. The pre-scan refuses deeper headers before the recursive decoder
// runs, so a hostile worker cannot exhaust fdod's stack.
inline constexpr std::size_t kMaxHeaderDepth = 64;

// Most descriptors one message may carry (the daemon's own per-request limit).
inline constexpr std::size_t kMaxMessageFds = 16;

// The job a typed message asks for (none on a reply).
enum class TypedOp : std::uint8_t { none = 0, exec = 1, compile = 2 };
std::string_view to_string(TypedOp op);

// What a typed message says about itself in place of a header: its op and the
// length of its typed body, which starts the payload (the bytes after it are
// the message's own: an object, buffers).
struct TypedBody {
  TypedOp op = TypedOp::none;
  std::uint64_t bytes = 0;
  bool operator==(const TypedBody&) const = default;
};

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

// The envelope of an "FDO3" frame: a typed job ({"id", "limits", "job",
// "bind"} of a CBOR request) or its successful reply ({"id", "ok": true,
// "result", "retire", "bound"}). Fixed-shape fields, little-endian:
//
//   u8 kind | u64 id | u8 op | u64 body bytes
//   job:   u64 wall_ms | u64 address_space_bytes | u64 max_output_bytes | u64 cpu_seconds
//   reply: u32 length + why the worker must be replaced (empty: reusable)
//   u32 length + CBOR map: a job's bind request, a reply's bind report (0: none)
//
// The one variable part (the CBOR map, on a worker's first job only) goes
// through the pre-scan and decode_header like any header. A failed job's
// reply, fatal reports and the hello stay CBOR: they are rare and variable.
struct TypedEnvelope {
  enum class Kind : std::uint8_t { job = 1, reply = 2 };
  Kind kind = Kind::job;
  std::uint64_t id = 0;
  JobLimits limits{};             // a job's (a reply's are not sent)
  std::string retire;             // a reply's
  nlohmann::json extra = nullptr; // a job's bind request, a reply's bind report
};

struct Message;

// A job's op: its TypedBody's (none is ""), else its header's "op" ("" when
// it has none or it is not a string).
std::string job_op(const Message& job);

struct Message {
  nlohmann::json header = nlohmann::json::object();
  std::string payload; // binary-safe bytes
  // Descriptors that travel with the message, never owned by it. Sending: the
  // sender keeps them open until the send returns. Received: the raw values of
  // the Fds that recv_message put in its `fds` (valid while those live).
  std::vector<int> fds{};
  // Set on a typed message, whose `header` is then empty: the pool and the
  // worker loop send it in an "FDO3" frame (TypedEnvelope), not a CBOR one.
  std::optional<TypedBody> body{};
  // A received "FDO3" frame's envelope (its body in `body`). Set on a typed
  // message, send_message and encode_message send it in that envelope.
  std::optional<TypedEnvelope> envelope{};
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

// What follows a frame's prefix: a CBOR header ("FDO2") or a typed envelope ("FDO3").
enum class FrameKind : std::uint8_t { cbor, typed };

struct FramePrefix {
  std::uint32_t header_len = 0;
  std::uint64_t payload_len = 0;
  FrameKind kind = FrameKind::cbor;
};

std::array<std::uint8_t, kFramePrefixBytes> encode_frame_prefix(std::uint32_t header_len,
                                                                std::uint64_t payload_len,
                                                                FrameKind kind = FrameKind::cbor);
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

// One whole frame as bytes (header via encode_header; a message with a typed
// body and an `envelope` set goes as "FDO3" with that envelope).
Expected<std::string> encode_message(const Message& message);
// Exactly one frame: Errc::corrupt when truncated, followed by trailing bytes, or
// when the header fails decode_header (an envelope decode_typed_envelope).
Expected<Message> decode_message(std::string_view frame, const FrameLimits& limits);

// ---- Blocking I/O with deadlines (EINTR and short reads/writes handled) ----

// Sends one message ("FDO3" when it has a typed body and an envelope). On sockets uses MSG_NOSIGNAL
// (a dead peer is Errc::unavailable, never SIGPIPE) and honours the deadline for every chunk.
Status send_message(int fd, const Message& message, Deadline deadline = Deadline::never());
// Same, with the header given as JSON or as already-encoded header bytes
// (from encode_header / encode_header_with: a sender that sends the same
// header often can encode it once).
// `fds` (at most kMaxMessageFds; only on a socket) go with the first bytes.
Status send_frame(int fd, const nlohmann::json& header, std::string_view payload,
                  Deadline deadline = Deadline::never(), std::span<const int> fds = {});
Status send_frame_encoded(int fd, std::string_view header_bytes, std::string_view payload,
                          Deadline deadline = Deadline::never(), std::span<const int> fds = {},
                          FrameKind kind = FrameKind::cbor);
// A typed message in its "FDO3" envelope (encode_typed_envelope).
Status send_typed_frame(int fd, const TypedEnvelope& envelope, const TypedBody& body,
                        std::string_view payload, Deadline deadline = Deadline::never(),
                        std::span<const int> fds = {});

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
// A small message is read in one call: the first read takes up to 16 KiB
// after the prefix. A channel carries one message at a time, so bytes read
// beyond the message are the peer's next one, out of turn: with `trailing`
// null that is Errc::corrupt ("... bytes after its message"); otherwise the
// message is returned, the bytes dropped and their count put in `*trailing`
// (0 when there were none), for the caller to stop trusting the channel.
Expected<Message> recv_message(int fd, const FrameLimits& limits,
                               Deadline deadline = Deadline::never(), int peer_exit_fd = -1,
                               std::vector<Fd>* fds = nullptr, std::size_t* trailing = nullptr);

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

// Errc::invalid_argument for an op out of range or an `extra` that is not null
// or an object (or nests too deep).
Expected<std::string> encode_typed_envelope(const TypedEnvelope& envelope, const TypedBody& body);
// Errc::corrupt naming the field for anything out of shape: an unknown kind
// or op, a length past the end, bytes left over, a wall limit out of range, a
// CBOR part that fails the pre-scan or is not a map.
Expected<std::pair<TypedEnvelope, TypedBody>> decode_typed_envelope(std::string_view bytes);
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
