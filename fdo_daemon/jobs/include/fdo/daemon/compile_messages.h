// The compile job and its reply, typed, with one encode and one decode each
// (wire.h's fixed layout; the profile's compile-affecting fields as
// profile_wire.h writes them). They travel as typed ipc.h messages
// (TypedBody {compile, n}; a reply's {none, n}) in "FDO3" envelopes:
//
//   job    payload: the typed CompileJob, the program (program_bytes), the
//          held pipeline prefix's bitcode (prefix_bytes; none without one),
//          then the object set of the held parts (fdo/jit/object_set.h), if any
//   reply  payload: the typed CompileReply, the compile metadata
//          (metadata_bytes: jit::metadata_to_json as text, as the daemon
//          stores it beside the object), the pipeline prefix's bitcode when
//          the compile ran it (prefix_bytes), then the object or object set
//
// A reply comes from a process that ran LLVM on client IR: compile_reply_of
// checks every length, key and enum (Errc::corrupt naming the offset). A held
// object set that does not unpack into exactly the parts the job names is no
// error: the compile then builds every part (docs/jit.md, "Incremental
// recompiles").
#pragma once

#include "fdo/daemon/ipc.h"
#include "fdo/jit/compiler.h"
#include "fdo/jit/nvptx.h"
#include "fdo/util/expected.h"
#include "fdo/util/profile.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fdo::daemon {

struct HeldPartRef {
  std::string key;
  std::string slice;
  std::string object_hash;
  bool operator==(const HeldPartRef&) const = default;
};

// A pipeline prefix (docs/jit.md, "The pipeline's prefix"): its key and its
// bitcode's BLAKE3.
struct PrefixRef {
  std::string key;
  std::string bitcode_hash;
  bool operator==(const PrefixRef&) const = default;
};

struct CompileJob {
  CompileMode mode = CompileMode::plain;
  // Only its compile-affecting fields travel (fdo::compile_view); shared, so
  // that fdod hands the job its current profile without a copy.
  std::shared_ptr<const ProfileDoc> profile;
  jit::Limits limits;
  std::uint32_t threads = 1; // 1 to jit::kMaxPartitions
  std::uint32_t parts = 0;   // 0: as many as threads; else 1 to jit::kMaxPartitions
  // The GPU fdod runs (used only when the program targets NVPTX).
  std::optional<jit::GpuTarget> gpu;
  // The parts of the program's last build fdod holds, in their order; their
  // objects follow the program in the payload as one object set.
  std::vector<HeldPartRef> held;
  // The pipeline prefix of the program's last build fdod holds; its bitcode
  // follows the program in the payload.
  std::optional<PrefixRef> prefix;
};

struct CompileReply {
  std::string explanation; // "" when the compile has nothing to say
  // How each part of a build split at the inliner was made; empty for a
  // build in one piece (or split for codegen only).
  std::vector<jit::PartBuild> parts;
  // A build split at the inliner with a PGO pipeline: its prefix and how it
  // came by it; the bitcode follows the metadata in the payload unless the
  // held one was taken (origin reused: none travels back).
  std::optional<PrefixRef> prefix;
  jit::PrefixOrigin prefix_origin = jit::PrefixOrigin::not_held;
};

// The job as a message: body, `program`, `prefix_bitcode` (that of
// job.prefix; required with it, refused without), then `held_objects` (the
// object set of job.held; empty when nothing is held).
Expected<Message> compile_job_message(const CompileJob& job, std::string_view program,
                                      std::string_view held_objects = {},
                                      std::string_view prefix_bitcode = {});
// The reply as a message: body, `metadata`, `prefix_bitcode` (only with
// reply.prefix), then `object`.
Expected<Message> compile_reply_message(const CompileReply& reply, std::string_view metadata,
                                        std::string_view object,
                                        std::string_view prefix_bitcode = {});

// A decoded job, its program and the held parts with their objects, as views
// into the message's payload (it must outlive them). `unreadable` says why
// the held objects were dropped (then `held` is empty), "" otherwise.
struct CompileJobView {
  CompileJob job;
  std::string_view program;
  std::vector<jit::HeldPart> held;
  std::string unreadable;
  // job.prefix with its bitcode, a view into the payload.
  std::optional<jit::HeldPrefix> prefix;
};
// Errc::invalid_argument for a message that is not a compile job, a body out
// of range or a threads/parts value out of range; the decoder's errors
// (Errc::corrupt) otherwise.
Expected<CompileJobView> compile_job_of(const Message& message);

struct CompileReplyView {
  CompileReply reply;
  std::string_view metadata;
  std::string_view prefix_bitcode; // empty unless the compile ran the prefix
  std::string_view object;
};
// Errc::corrupt for anything that does not decode or add up.
Expected<CompileReplyView> compile_reply_of(const Message& message);

} // namespace fdo::daemon
