// The exec job and its reply, typed, with one encode and one decode each
// (wire.h's fixed layout). They travel as typed ipc.h messages (TypedBody
// {exec, n}; a reply's {none, n}) in "FDO3" envelopes: the typed body leads
// the payload, followed by the job's object (when attached) and argument
// buffers, or by the reply's returned buffers. No JSON tree is built on
// either side for a stage, nor for its envelope.
//
// A reply comes from a process that runs client code: decode_exec_reply checks
// every length and count against the bytes there are, every enum against its
// range, and refuses trailing bytes (Errc::corrupt naming the offset).
#pragma once

#include "fdo/daemon/ipc.h"
#include "fdo/daemon/stage_observation.h"
#include "fdo/daemon/stage_sampling.h"
#include "fdo/util/expected.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fdo::daemon {

// Linked programs an exec worker keeps when a job does not say.
inline constexpr std::uint64_t kDefaultExecPrograms = 16;

struct ExecBufferSpec {
  std::uint64_t size = 0;
  // Index into the job's descriptors: a sealed memfd of exactly `size` bytes,
  // mapped copy-on-write. None: the bytes follow in the payload.
  std::optional<std::uint32_t> fd;
  bool operator==(const ExecBufferSpec&) const = default;
};

struct ExecJob {
  std::string key;   // storage key of the compiled output
  std::string entry; // the entry to call
  std::vector<std::uint64_t> slots;
  std::vector<std::int32_t> buffer_of_param; // per slot: a buffer index, or -1
  std::vector<ExecBufferSpec> buffers;
  bool return_buffers = false;
  bool verbose = false; // keep each event's reason text in the reply
  std::vector<std::string> events;
  std::uint64_t cache_entries = kDefaultExecPrograms; // 0: keep nothing linked
  std::optional<StageSamplingRequest> sampling;
  bool function_ranges = true; // with sampling: send the object's function ranges
  // Set when the object is attached (its bytes lead the payload after the
  // body); `metadata` is then its compile metadata (jit::metadata_to_json as text).
  std::optional<std::uint64_t> object_size;
  std::string metadata;
  bool operator==(const ExecJob&) const = default;
};

enum class ExecOutcome : std::uint8_t {
  ran,            // observation holds the stage
  missing_object, // sent by key, and this worker does not hold it linked: send the object
};

struct ExecReply {
  ExecOutcome outcome = ExecOutcome::ran;
  StageObservation observation;
};

Expected<std::string> encode_exec_job(const ExecJob& job);
Expected<ExecJob> decode_exec_job(std::string_view bytes);
Expected<std::string> encode_exec_reply(const ExecReply& reply);
Expected<ExecReply> decode_exec_reply(std::string_view bytes);

// The job as a message: header and body; the caller appends the object and
// the buffers' bytes to the payload and the buffers' descriptors to fds.
Expected<Message> exec_job_message(const ExecJob& job);
// The reply as a job result: body, then `buffers` (the returned buffers' bytes).
Expected<Message> exec_reply_message(const ExecReply& reply, std::string_view buffers = {});

// A decoded message and the payload bytes after its body.
template <class T> struct Decoded {
  T value;
  std::string_view rest;
};
// Errc::invalid_argument when the message is not an exec job (or its body
// length is out of range); the decoders' errors otherwise.
Expected<Decoded<ExecJob>> exec_job_of(const Message& message);
Expected<Decoded<ExecReply>> exec_reply_of(const Message& message);

} // namespace fdo::daemon
