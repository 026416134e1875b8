// Message headers (ipc.h): CBOR encoding, and the iterative pre-scan every
// received header passes (validate_header_encoding) before nlohmann's
// recursive CBOR reader may decode it.
#include "fdo/daemon/ipc.h"
#include "header_text.h"

#include <algorithm>
#include <climits>
#include <cstring>

namespace fdo::daemon {

namespace detail {

// Text, for error messages only (never on the wire).
std::string dump_header(const nlohmann::json& header) {
  // Replace invalid UTF-8 instead of throwing: a handler's error message may
  // quote arbitrary client bytes.
  return header.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

} // namespace detail

using detail::dump_header;

namespace {

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
      case 22:
        extra = 0;
        break;
      case 25:
        extra = 2;
        break;
      case 26:
        extra = 4;
        break;
      case 27:
        extra = 8;
        break;
      case 31:
        return fail(ScanProblem::malformed, at, "a break code outside an indefinite item");
      default:
        return fail(ScanProblem::malformed, at, "an unsupported simple value");
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
      case 0:
        break;
      case 1:
        if (arg > static_cast<std::uint64_t>(INT64_MAX))
          return fail(ScanProblem::malformed, at, "a negative integer below -2^63");
        break;
      case 2:
        return fail(ScanProblem::malformed, at, "a byte string");
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
      default:
        return fail(ScanProblem::malformed, at, "a tag");
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
                      std::string("a message header must be an object, not ") + header.type_name());
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

namespace {

// CBOR items as encode_job_envelope writes them (RFC 8949): a text string of
// fewer than 24 bytes, an unsigned integer in its shortest form.
void put_short_text(std::string& out, std::string_view s) {
  out += static_cast<char>(0x60 + s.size());
  out += s;
}

void put_uint(std::string& out, std::uint64_t v) {
  auto put_be = [&](std::uint8_t head, int bytes) {
    out += static_cast<char>(head);
    for (int i = bytes - 1; i >= 0; --i)
      out += static_cast<char>(v >> (8 * i));
  };
  if (v < 24)
    out += static_cast<char>(v);
  else if (v <= 0xff)
    put_be(0x18, 1);
  else if (v <= 0xffff)
    put_be(0x19, 2);
  else if (v <= 0xffffffffu)
    put_be(0x1a, 4);
  else
    put_be(0x1b, 8);
}

} // namespace

Expected<std::string> encode_job_envelope(std::uint64_t id, const JobLimits& limits,
                                          std::string_view job_header, const nlohmann::json& bind) {
  if (job_header.empty() || (static_cast<std::uint8_t>(job_header[0]) & 0xe0) != 0xa0)
    return make_error(Errc::invalid_argument, "a job's header must be an encoded map");
  std::string bind_bytes;
  if (!bind.is_null()) {
    FDO_TRY(bind_bytes, encode_header(bind));
  }
  std::string out;
  out.reserve(64 + job_header.size() + bind_bytes.size());
  out += static_cast<char>(bind_bytes.empty() ? 0xa3 : 0xa4);
  put_short_text(out, "id");
  put_uint(out, id);
  put_short_text(out, "limits");
  out += static_cast<char>(0xa4);
  put_short_text(out, "wall_ms");
  put_uint(out, static_cast<std::uint64_t>(std::max<std::int64_t>(limits.wall.count(), 0)));
  put_short_text(out, "address_space_bytes");
  put_uint(out, limits.address_space_bytes);
  put_short_text(out, "max_output_bytes");
  put_uint(out, limits.max_output_bytes);
  put_short_text(out, "cpu_seconds");
  put_uint(out, limits.cpu_seconds);
  put_short_text(out, "job");
  out.append(job_header);
  if (!bind_bytes.empty()) {
    put_short_text(out, "bind");
    out += bind_bytes;
  }
  // What the receiver's scan refuses (a job header nested one level too deep
  // once inside the envelope) is refused here, as encode_header would.
  ScanResult r = scan_header(out);
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

} // namespace fdo::daemon
