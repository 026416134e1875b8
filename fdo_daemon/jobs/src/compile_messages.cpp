#include "fdo/daemon/compile_messages.h"

#include "fdo/jit/object_set.h"
#include "fdo/util/hash.h"
#include "fdo/util/profile_wire.h"
#include "message_body.h"

namespace fdo::daemon {

using namespace detail;
using wire::WireReader;
using wire::WireWriter;

namespace {

constexpr std::uint32_t kJobMagic = 0x314A5043u;   // "CPJ1"
constexpr std::uint32_t kReplyMagic = 0x31525043u; // "CPR1"

// Least bytes an element takes, for count checks.
constexpr std::size_t kStr = 4;
constexpr std::size_t kU64 = 8;

template <class E> std::uint8_t last_of(E last) {
  return static_cast<std::uint8_t>(last);
}

// A BLAKE3 hex key, or the read fails naming `what`.
std::string get_key(WireReader& r, std::string_view what) {
  std::string key = r.str();
  if (!r.failed() && !is_hex_key(key)) r.fail(std::string(what) + " is not a key");
  return key;
}

void put_prefix(WireWriter& w, const std::optional<PrefixRef>& prefix, std::uint64_t bytes) {
  w.boolean(prefix.has_value());
  if (!prefix) return;
  w.str(prefix->key);
  w.str(prefix->bitcode_hash);
  w.u64(bytes);
}

void get_prefix(WireReader& r, std::optional<PrefixRef>& prefix, std::uint64_t& bytes) {
  bytes = 0;
  if (!r.boolean()) return;
  PrefixRef p;
  p.key = get_key(r, "the prefix's key");
  p.bitcode_hash = get_key(r, "the prefix's bitcode hash");
  bytes = r.u64();
  prefix = std::move(p);
}

void put_job(WireWriter& w, const CompileJob& j, std::uint64_t program_bytes,
             std::uint64_t prefix_bytes) {
  w.u32(kJobMagic);
  w.u8(static_cast<std::uint8_t>(j.mode));
  w.boolean(j.profile != nullptr);
  if (j.profile) wire::put_compile_profile(w, *j.profile);
  w.u64(j.limits.max_program_bytes);
  w.u64(j.limits.max_functions);
  w.u64(j.limits.max_instructions);
  w.u32(j.threads);
  w.u32(j.parts);
  w.boolean(j.gpu.has_value());
  if (j.gpu) {
    w.i64(j.gpu->sm);
    w.i64(j.gpu->driver_version);
  }
  w.count(j.held.size());
  for (const HeldPartRef& p : j.held) {
    w.str(p.key);
    w.str(p.slice);
    w.str(p.object_hash);
  }
  put_prefix(w, j.prefix, prefix_bytes);
  w.u64(program_bytes);
}

void get_job(WireReader& r, CompileJob& j, std::uint64_t& program_bytes,
             std::uint64_t& prefix_bytes) {
  expect_magic(r, kJobMagic);
  j.mode = static_cast<CompileMode>(r.enum_u8(last_of(CompileMode::cs_instrumented), "mode"));
  if (r.boolean()) j.profile = std::make_shared<const ProfileDoc>(wire::get_compile_profile(r));
  j.limits.max_program_bytes = r.u64();
  j.limits.max_functions = r.u64();
  j.limits.max_instructions = r.u64();
  j.threads = r.u32();
  j.parts = r.u32();
  if (r.boolean()) {
    jit::GpuTarget gpu;
    // Compute capabilities and driver versions are small numbers.
    const std::int64_t sm = r.i64(), driver = r.i64();
    if (!r.failed() && (sm < 0 || sm > 10'000 || driver < 0 || driver > 1'000'000))
      r.fail("the GPU target is out of range");
    gpu.sm = static_cast<int>(sm);
    gpu.driver_version = static_cast<int>(driver);
    j.gpu = gpu;
  }
  j.held.resize(r.count(3 * kStr));
  for (std::size_t i = 0; i < j.held.size(); ++i) {
    const std::string part = "held part " + std::to_string(i) + "'s ";
    j.held[i].key = get_key(r, part + "key");
    j.held[i].slice = get_key(r, part + "slice");
    j.held[i].object_hash = get_key(r, part + "object hash");
  }
  get_prefix(r, j.prefix, prefix_bytes);
  program_bytes = r.u64();
}

void put_reply(WireWriter& w, const CompileReply& reply, std::uint64_t metadata_bytes,
               std::uint64_t prefix_bytes) {
  w.u32(kReplyMagic);
  w.str(reply.explanation);
  w.count(reply.parts.size());
  for (const jit::PartBuild& p : reply.parts) {
    w.str(p.key);
    w.str(p.slice);
    w.str(p.object_hash);
    w.u64(p.functions);
    w.str(p.first_function);
    w.u8(static_cast<std::uint8_t>(p.origin));
  }
  put_prefix(w, reply.prefix, prefix_bytes);
  w.u8(static_cast<std::uint8_t>(reply.prefix_origin));
  w.u64(metadata_bytes);
}

void get_reply(WireReader& r, CompileReply& reply, std::uint64_t& metadata_bytes,
               std::uint64_t& prefix_bytes) {
  expect_magic(r, kReplyMagic);
  reply.explanation = r.str();
  reply.parts.resize(r.count(3 * kStr + kU64 + kStr + 1));
  for (std::size_t i = 0; i < reply.parts.size(); ++i) {
    jit::PartBuild& p = reply.parts[i];
    const std::string part = "part " + std::to_string(i) + "'s ";
    p.key = get_key(r, part + "key");
    p.slice = get_key(r, part + "slice");
    p.object_hash = get_key(r, part + "object hash");
    p.functions = r.u64();
    p.first_function = r.str();
    p.origin =
        static_cast<jit::PartOrigin>(r.enum_u8(last_of(jit::PartOrigin::held_damaged), "origin"));
  }
  get_prefix(r, reply.prefix, prefix_bytes);
  reply.prefix_origin = static_cast<jit::PrefixOrigin>(
      r.enum_u8(last_of(jit::PrefixOrigin::held_damaged), "prefix origin"));
  metadata_bytes = r.u64();
}

Status check_bound(std::uint32_t v, std::uint32_t least, std::string_view what) {
  if (v < least || v > jit::kMaxPartitions)
    return make_error(Errc::invalid_argument, "compile job: " + std::string(what) + " must be " +
                                                  std::to_string(least) + " to " +
                                                  std::to_string(jit::kMaxPartitions));
  return ok();
}

} // namespace

Expected<Message> compile_job_message(const CompileJob& job, std::string_view program,
                                      std::string_view held_objects,
                                      std::string_view prefix_bitcode) {
  if (job.prefix.has_value() == prefix_bitcode.empty())
    return make_error(Errc::invalid_argument,
                      "compile job: a held prefix needs its bitcode, and bitcode its prefix");
  WireWriter w;
  put_job(w, job, program.size(), prefix_bitcode.size());
  Message m;
  FDO_TRY(m.payload, std::move(w).take());
  m.body = TypedBody{TypedOp::compile, m.payload.size()};
  m.payload.reserve(m.payload.size() + program.size() + prefix_bitcode.size() +
                    held_objects.size());
  m.payload.append(program).append(prefix_bitcode).append(held_objects);
  return m;
}

Expected<Message> compile_reply_message(const CompileReply& reply, std::string_view metadata,
                                        std::string_view object, std::string_view prefix_bitcode) {
  if (!reply.prefix && !prefix_bitcode.empty())
    return make_error(Errc::invalid_argument, "compile reply: prefix bitcode without a prefix");
  WireWriter w;
  put_reply(w, reply, metadata.size(), prefix_bitcode.size());
  Message m;
  FDO_TRY(m.payload, std::move(w).take());
  m.body = TypedBody{TypedOp::none, m.payload.size()};
  m.payload.reserve(m.payload.size() + metadata.size() + prefix_bitcode.size() + object.size());
  m.payload.append(metadata).append(prefix_bitcode).append(object);
  return m;
}

Expected<CompileJobView> compile_job_of(const Message& m) {
  if (!m.body || m.body->op != TypedOp::compile)
    return make_error(Errc::invalid_argument, "not a compile job");
  FDO_TRY(std::size_t n, body_length(m, Errc::invalid_argument, "compile job"));
  const std::string_view payload = m.payload;
  CompileJobView out;
  std::uint64_t program_bytes = 0, prefix_bytes = 0;
  WireReader r(payload.substr(0, n), "compile job");
  get_job(r, out.job, program_bytes, prefix_bytes);
  FDO_TRY_STATUS(r.finish());
  FDO_TRY_STATUS(check_bound(out.job.threads, 1, "threads"));
  if (out.job.parts != 0) FDO_TRY_STATUS(check_bound(out.job.parts, 1, "parts"));
  const std::string_view rest = payload.substr(n);
  if (program_bytes > rest.size())
    return make_error(Errc::invalid_argument,
                      "compile job: a program of " + std::to_string(program_bytes) + " bytes in " +
                          std::to_string(rest.size()) + " bytes of payload");
  out.program = rest.substr(0, program_bytes);
  const std::string_view after = rest.substr(program_bytes);
  if (out.job.prefix && (prefix_bytes == 0 || prefix_bytes > after.size()))
    return make_error(Errc::invalid_argument,
                      "compile job: a held prefix of " + std::to_string(prefix_bytes) +
                          " bytes in " + std::to_string(after.size()) + " bytes after the program");
  if (out.job.prefix)
    out.prefix = jit::HeldPrefix{out.job.prefix->key, out.job.prefix->bitcode_hash,
                                 after.substr(0, prefix_bytes)};
  const std::string_view held_objects = after.substr(prefix_bytes);
  if (out.job.held.empty()) {
    if (!held_objects.empty())
      return make_error(Errc::invalid_argument,
                        "compile job: bytes after the program and no held parts");
    return out;
  }
  auto objects = jit::unpack_objects(held_objects);
  if (!objects) {
    out.unreadable = objects.error().describe();
    return out;
  }
  if (objects->size() != out.job.held.size()) {
    out.unreadable = "the held object set has " + std::to_string(objects->size()) +
                     " objects for " + std::to_string(out.job.held.size()) + " parts";
    return out;
  }
  for (std::size_t i = 0; i < objects->size(); ++i) {
    const HeldPartRef& ref = out.job.held[i];
    out.held.push_back(jit::HeldPart{ref.key, ref.slice, ref.object_hash, (*objects)[i]});
  }
  return out;
}

Expected<CompileReplyView> compile_reply_of(const Message& m) {
  FDO_TRY(std::size_t n, body_length(m, Errc::corrupt, "compile reply"));
  const std::string_view payload = m.payload;
  CompileReplyView out;
  std::uint64_t metadata_bytes = 0, prefix_bytes = 0;
  WireReader r(payload.substr(0, n), "compile reply");
  get_reply(r, out.reply, metadata_bytes, prefix_bytes);
  FDO_TRY_STATUS(r.finish());
  const std::string_view rest = payload.substr(n);
  if (metadata_bytes > rest.size())
    return make_error(Errc::corrupt, "compile reply: metadata of " +
                                         std::to_string(metadata_bytes) + " bytes in " +
                                         std::to_string(rest.size()) + " bytes of payload");
  out.metadata = rest.substr(0, metadata_bytes);
  const std::string_view after = rest.substr(metadata_bytes);
  if (prefix_bytes > after.size())
    return make_error(Errc::corrupt, "compile reply: a prefix of " + std::to_string(prefix_bytes) +
                                         " bytes in " + std::to_string(after.size()) +
                                         " bytes after the metadata");
  out.prefix_bitcode = after.substr(0, prefix_bytes);
  out.object = after.substr(prefix_bytes);
  return out;
}

} // namespace fdo::daemon
