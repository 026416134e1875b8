// The "FDO3" envelope of a typed job and of its successful reply (ipc.h):
// fixed-shape fields written and read with the wire codec, the CBOR map of a
// bind request or report the only part that still goes through the pre-scan.
#include "fdo/daemon/ipc.h"
#include "fdo/util/wire.h"

#include <algorithm>
#include <climits>

namespace fdo::daemon {

namespace {

constexpr auto kLastOp = static_cast<std::uint8_t>(TypedOp::compile);
constexpr auto kLastKind = static_cast<std::uint8_t>(TypedEnvelope::Kind::reply);

} // namespace

std::string_view to_string(TypedOp op) {
  switch (op) {
  case TypedOp::none:
    return "none";
  case TypedOp::exec:
    return "exec";
  case TypedOp::compile:
    return "compile";
  }
  return "unknown";
}

std::string job_op(const Message& job) {
  if (job.body) return job.body->op == TypedOp::none ? "" : std::string(to_string(job.body->op));
  auto op = job.header.find("op");
  return op != job.header.end() && op->is_string() ? op->get<std::string>() : "";
}

Expected<std::string> encode_typed_envelope(const TypedEnvelope& e, const TypedBody& body) {
  if (static_cast<std::uint8_t>(body.op) > kLastOp)
    return make_error(Errc::invalid_argument, "typed envelope: op " +
                                                  std::to_string(static_cast<int>(body.op)) +
                                                  " is not one this build knows");
  if (e.kind != TypedEnvelope::Kind::job && e.kind != TypedEnvelope::Kind::reply)
    return make_error(Errc::invalid_argument, "typed envelope: unknown kind");
  std::string extra;
  if (!e.extra.is_null()) {
    // encode_header refuses what is not an object or nests too deep.
    FDO_TRY(extra, encode_header(e.extra));
  }
  wire::WireWriter w;
  w.u8(static_cast<std::uint8_t>(e.kind));
  w.u64(e.id);
  w.u8(static_cast<std::uint8_t>(body.op));
  w.u64(body.bytes);
  if (e.kind == TypedEnvelope::Kind::job) {
    w.u64(static_cast<std::uint64_t>(std::max<std::int64_t>(e.limits.wall.count(), 0)));
    w.u64(e.limits.address_space_bytes);
    w.u64(e.limits.max_output_bytes);
    w.u64(e.limits.cpu_seconds);
  } else {
    w.str(e.retire);
  }
  w.str(extra);
  return std::move(w).take();
}

Expected<std::pair<TypedEnvelope, TypedBody>> decode_typed_envelope(std::string_view bytes) {
  wire::WireReader r(bytes, "typed envelope");
  TypedEnvelope e;
  TypedBody body;
  e.kind = static_cast<TypedEnvelope::Kind>(r.enum_u8(kLastKind, "its kind"));
  if (!r.failed() && static_cast<std::uint8_t>(e.kind) == 0) r.fail("kind 0 is not a kind");
  e.id = r.u64();
  body.op = static_cast<TypedOp>(r.enum_u8(kLastOp, "its op"));
  body.bytes = r.u64();
  if (e.kind == TypedEnvelope::Kind::job) {
    const std::size_t at = r.offset();
    const std::uint64_t wall = r.u64();
    if (!r.failed() && wall > static_cast<std::uint64_t>(INT64_MAX / 1000000))
      r.fail("the wall limit at byte " + std::to_string(at) + " is out of range");
    e.limits.wall = std::chrono::milliseconds(static_cast<std::int64_t>(wall));
    e.limits.address_space_bytes = r.u64();
    e.limits.max_output_bytes = r.u64();
    e.limits.cpu_seconds = r.u64();
  } else {
    e.retire = r.str();
  }
  const std::string_view extra = r.str_view();
  FDO_TRY_STATUS(r.finish());
  if (!extra.empty()) {
    auto decoded = decode_header(extra);
    if (!decoded) return std::move(decoded).error().context("typed envelope's CBOR part");
    e.extra = std::move(*decoded);
  }
  return std::pair{std::move(e), body};
}

} // namespace fdo::daemon
