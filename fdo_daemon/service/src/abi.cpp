#include "fdo/daemon/abi.h"

#include "fdo/util/base64.h"
#include "fdo/util/enum_names.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

namespace fdo::daemon {

using nlohmann::json;

namespace {
// LLVM's spellings print; f32/f64 are accepted too.
constexpr EnumNames<ScalarType, 11> kScalarNames{{{{ScalarType::i1, "i1"},
                                                   {ScalarType::i8, "i8"},
                                                   {ScalarType::i16, "i16"},
                                                   {ScalarType::i32, "i32"},
                                                   {ScalarType::i64, "i64"},
                                                   {ScalarType::f32, "float"},
                                                   {ScalarType::f64, "double"},
                                                   {ScalarType::ptr, "ptr"},
                                                   {ScalarType::void_, "void"},
                                                   {ScalarType::f32, "f32"},
                                                   {ScalarType::f64, "f64"}}}};
constexpr EnumNames<ElemType, 10> kElemNames{{{{ElemType::i8, "i8"},
                                               {ElemType::u8, "u8"},
                                               {ElemType::i16, "i16"},
                                               {ElemType::u16, "u16"},
                                               {ElemType::i32, "i32"},
                                               {ElemType::u32, "u32"},
                                               {ElemType::i64, "i64"},
                                               {ElemType::u64, "u64"},
                                               {ElemType::f32, "f32"},
                                               {ElemType::f64, "f64"}}}};
} // namespace

std::string_view to_string(ScalarType t) {
  return kScalarNames.name(t);
}

Expected<ScalarType> parse_scalar_type(std::string_view s) {
  if (auto t = kScalarNames.parse(s)) return *t;
  return make_error(Errc::invalid_argument, "unsupported type '" + std::string(s) + "'");
}

std::string_view to_string(ElemType t) {
  return kElemNames.name(t);
}

Expected<ElemType> parse_elem_type(std::string_view s) {
  if (auto t = kElemNames.parse(s)) return *t;
  return make_error(Errc::invalid_argument, "unknown buffer element type '" + std::string(s) +
                                                "' (expected " + kElemNames.alternatives() + ")");
}

std::size_t elem_size(ElemType t) {
  switch (t) {
  case ElemType::i8:
  case ElemType::u8:
    return 1;
  case ElemType::i16:
  case ElemType::u16:
    return 2;
  case ElemType::i32:
  case ElemType::u32:
  case ElemType::f32:
    return 4;
  case ElemType::i64:
  case ElemType::u64:
  case ElemType::f64:
    return 8;
  }
  return 1;
}

namespace {
Error arg_error(std::size_t i, const std::string& what) {
  return make_error(Errc::invalid_argument, "args[" + std::to_string(i) + "]: " + what);
}

bool is_signed_elem(ElemType t) {
  return t == ElemType::i8 || t == ElemType::i16 || t == ElemType::i32 || t == ElemType::i64;
}

unsigned int_bits(ScalarType t) {
  switch (t) {
  case ScalarType::i1:
    return 1;
  case ScalarType::i8:
    return 8;
  case ScalarType::i16:
    return 16;
  case ScalarType::i32:
    return 32;
  default:
    return 64;
  }
}

// Integer JSON value -> two's complement bits, range-checked for the width
// (either the signed or the unsigned range is accepted).
Expected<std::uint64_t> int_bits_of(const json& v, unsigned bits, const std::string& where) {
  if (v.is_boolean()) return v.get<bool>() ? 1u : 0u;
  if (!v.is_number_integer())
    return make_error(Errc::invalid_argument, where + ": expected an integer");
  if (v.is_number_unsigned()) {
    std::uint64_t u = v.get<std::uint64_t>();
    if (bits < 64 && u >= (std::uint64_t(1) << bits))
      return make_error(Errc::invalid_argument, where + ": " + std::to_string(u) +
                                                    " does not fit in " + std::to_string(bits) +
                                                    " bits");
    return u;
  }
  std::int64_t s = v.get<std::int64_t>();
  if (bits < 64) {
    std::int64_t lo = bits == 1 ? 0 : -(std::int64_t(1) << (bits - 1));
    if (s < lo)
      return make_error(Errc::invalid_argument, where + ": " + std::to_string(s) +
                                                    " does not fit in " + std::to_string(bits) +
                                                    " bits");
    return static_cast<std::uint64_t>(s) & ((std::uint64_t(1) << bits) - 1);
  }
  return static_cast<std::uint64_t>(s);
}

// {"memfd": k [, "length": n]}: the request's k-th attached buffer.
Expected<Buffer> attached_buffer(const std::string& where, const json& b, Buffer buf,
                                 std::size_t budget, std::span<const std::string> attached,
                                 std::vector<bool>& used) {
  const json& k = b["memfd"];
  if (!k.is_number_integer() || k.get<std::int64_t>() < 0)
    return make_error(Errc::invalid_argument,
                      where + ".memfd: expected the index of a descriptor sent with the request");
  const auto idx = k.get<std::uint64_t>();
  if (idx >= attached.size())
    return make_error(Errc::invalid_argument,
                      where + ".memfd: descriptor " + std::to_string(idx) + " out of range (" +
                          std::to_string(attached.size()) + " came with the request)");
  const std::string& bytes = attached[idx];
  const std::size_t es = elem_size(buf.elem);
  if (bytes.size() % es != 0)
    return make_error(Errc::invalid_argument, where + ".memfd: " + std::to_string(bytes.size()) +
                                                  " bytes is not a whole number of " +
                                                  std::string(to_string(buf.elem)) + " elements");
  if (auto len = b.find("length"); len != b.end()) {
    if (!len->is_number_integer() || len->get<std::int64_t>() < 0)
      return make_error(Errc::invalid_argument, where + ".length: expected a non-negative integer");
    if (len->get<std::uint64_t>() != bytes.size() / es)
      return make_error(Errc::invalid_argument,
                        where + ": length " + std::to_string(len->get<std::uint64_t>()) +
                            " but the memfd holds " + std::to_string(bytes.size() / es) + " " +
                            std::string(to_string(buf.elem)) + " elements (" +
                            std::to_string(bytes.size()) + " bytes)");
  }
  if (bytes.size() > budget)
    return make_error(Errc::resource_exhausted, where + ": buffer exceeds the size limit");
  used[idx] = true;
  buf.bytes = bytes;
  return buf;
}

Expected<Buffer> parse_buffer(std::size_t i, const json& b, std::size_t budget,
                              std::span<const std::string> attached, std::vector<bool>& used) {
  std::string where = "buffers[" + std::to_string(i) + "]";
  if (!b.is_object()) return make_error(Errc::invalid_argument, where + ": expected an object");
  auto type = b.find("type");
  if (type == b.end() || !type->is_string())
    return make_error(Errc::invalid_argument, where + ".type: expected an element type string");
  FDO_TRY(ElemType elem, parse_elem_type(type->get<std::string>()));
  Buffer buf;
  buf.elem = elem;
  std::size_t es = elem_size(elem);
  const bool memfd = b.contains("memfd");
  int forms = b.contains("data") + b.contains("base64") + memfd + (!memfd && b.contains("length"));
  if (forms != 1)
    return make_error(Errc::invalid_argument,
                      where +
                          ": give exactly one of \"data\", \"base64\", \"memfd\" or \"length\"");
  if (memfd) return attached_buffer(where, b, std::move(buf), budget, attached, used);
  if (auto len = b.find("length"); len != b.end()) {
    if (!len->is_number_unsigned() && !(len->is_number_integer() && len->get<long long>() >= 0))
      return make_error(Errc::invalid_argument, where + ".length: expected a non-negative integer");
    std::uint64_t n = len->get<std::uint64_t>();
    if (n > budget / es)
      return make_error(Errc::resource_exhausted, where + ": buffer exceeds the size limit");
    buf.bytes.assign(n * es, '\0');
    return buf;
  }
  if (auto text = b.find("base64"); text != b.end()) {
    if (!text->is_string())
      return make_error(Errc::invalid_argument, where + ".base64: expected a string");
    FDO_TRY(std::string bytes, base64_decode(text->get<std::string>()));
    if (bytes.size() % es != 0)
      return make_error(Errc::invalid_argument, where + ".base64: " + std::to_string(bytes.size()) +
                                                    " bytes is not a whole number of " +
                                                    std::string(to_string(elem)) + " elements");
    if (bytes.size() > budget)
      return make_error(Errc::resource_exhausted, where + ": buffer exceeds the size limit");
    buf.bytes = std::move(bytes);
    return buf;
  }
  const json& data = b["data"];
  if (!data.is_array())
    return make_error(Errc::invalid_argument, where + ".data: expected an array of numbers");
  if (data.size() > budget / es)
    return make_error(Errc::resource_exhausted, where + ": buffer exceeds the size limit");
  buf.bytes.resize(data.size() * es);
  for (std::size_t k = 0; k < data.size(); ++k) {
    std::string at = where + ".data[" + std::to_string(k) + "]";
    char* dst = buf.bytes.data() + k * es;
    if (elem == ElemType::f32 || elem == ElemType::f64) {
      if (!data[k].is_number())
        return make_error(Errc::invalid_argument, at + ": expected a number");
      if (elem == ElemType::f32) {
        float f = data[k].get<float>();
        std::memcpy(dst, &f, 4);
      } else {
        double d = data[k].get<double>();
        std::memcpy(dst, &d, 8);
      }
      continue;
    }
    FDO_TRY(std::uint64_t bits, int_bits_of(data[k], static_cast<unsigned>(es * 8), at));
    if (!is_signed_elem(elem) && data[k].is_number_integer() && !data[k].is_number_unsigned() &&
        data[k].get<std::int64_t>() < 0)
      return make_error(Errc::invalid_argument, at + ": negative value in an unsigned buffer");
    std::memcpy(dst, &bits, es); // little-endian host
  }
  return buf;
}
} // namespace

Expected<PreparedCall> prepare_call(const Signature& sig, const json& args, const json& buffers,
                                    const CallLimits& limits,
                                    std::span<const std::string> attached) {
  PreparedCall call;
  json no_args = json::array();
  const json& a = args.is_null() ? no_args : args;
  if (!a.is_array()) return make_error(Errc::invalid_argument, "args: expected an array");
  if (a.size() != sig.params.size())
    return make_error(Errc::invalid_argument, "entry '" + sig.name + "' takes " +
                                                  std::to_string(sig.params.size()) +
                                                  " argument(s), got " + std::to_string(a.size()));
  if (!buffers.is_null() && !buffers.is_array())
    return make_error(Errc::invalid_argument, "buffers: expected an array");
  std::size_t budget = limits.max_buffer_bytes;
  std::vector<bool> used(attached.size(), false);
  if (buffers.is_array()) {
    for (std::size_t i = 0; i < buffers.size(); ++i) {
      FDO_TRY(Buffer b, parse_buffer(i, buffers[i], budget, attached, used));
      budget -= b.bytes.size();
      call.buffers.push_back(std::move(b));
    }
  }
  // A descriptor no buffer names is a client mistake (or a wrong index):
  // better told than silently dropped.
  for (std::size_t k = 0; k < used.size(); ++k)
    if (!used[k])
      return make_error(
          Errc::invalid_argument,
          "descriptor " + std::to_string(k) + " of the " + std::to_string(used.size()) +
              " sent with the request is named by no buffer (\"memfd\": " + std::to_string(k) +
              ")");
  for (std::size_t i = 0; i < sig.params.size(); ++i) {
    ScalarType t = sig.params[i];
    const json& v = a[i];
    call.buffer_of_param.push_back(-1);
    switch (t) {
    case ScalarType::ptr: {
      if (!v.is_object() || !v.contains("buffer") || !v["buffer"].is_number_integer())
        return arg_error(i, "pointer parameter: expected {\"buffer\": index}");
      long long idx = v["buffer"].get<long long>();
      if (idx < 0 || static_cast<std::size_t>(idx) >= call.buffers.size())
        return arg_error(i, "buffer index " + std::to_string(idx) + " out of range (" +
                                std::to_string(call.buffers.size()) + " buffers)");
      call.buffer_of_param.back() = static_cast<int>(idx);
      call.slots.push_back(0);
      break;
    }
    case ScalarType::f32: {
      if (!v.is_number()) return arg_error(i, "expected a number for float");
      call.slots.push_back(std::bit_cast<std::uint32_t>(v.get<float>()));
      break;
    }
    case ScalarType::f64: {
      if (!v.is_number()) return arg_error(i, "expected a number for double");
      call.slots.push_back(std::bit_cast<std::uint64_t>(v.get<double>()));
      break;
    }
    case ScalarType::void_:
      return arg_error(i, "void is not a parameter type");
    default: {
      FDO_TRY(std::uint64_t bits,
              int_bits_of(v, int_bits(t),
                          "args[" + std::to_string(i) + "] (" + std::string(to_string(t)) + ")"));
      call.slots.push_back(bits);
    }
    }
  }
  return call;
}

json decode_return(ScalarType ret, std::uint64_t slot) {
  switch (ret) {
  case ScalarType::void_:
    return nullptr;
  case ScalarType::f32:
    return static_cast<double>(std::bit_cast<float>(static_cast<std::uint32_t>(slot)));
  case ScalarType::f64:
    return std::bit_cast<double>(slot);
  case ScalarType::ptr:
    return slot;
  case ScalarType::i1:
    return (slot & 1) != 0;
  case ScalarType::i8:
    return static_cast<std::int64_t>(static_cast<std::int8_t>(slot));
  case ScalarType::i16:
    return static_cast<std::int64_t>(static_cast<std::int16_t>(slot));
  case ScalarType::i32:
    return static_cast<std::int64_t>(static_cast<std::int32_t>(slot));
  case ScalarType::i64:
    return static_cast<std::int64_t>(slot);
  }
  return nullptr;
}

json buffer_to_json(const Buffer& buffer, BufferEncoding encoding) {
  json out = {{"type", std::string(to_string(buffer.elem))}};
  if (encoding == BufferEncoding::base64) {
    out["base64"] = base64_encode(buffer.bytes);
    return out;
  }
  json data = json::array();
  std::size_t es = elem_size(buffer.elem);
  for (std::size_t off = 0; off + es <= buffer.bytes.size(); off += es) {
    const char* p = buffer.bytes.data() + off;
    switch (buffer.elem) {
    case ElemType::i8:
      data.push_back(static_cast<std::int8_t>(*p));
      break;
    case ElemType::u8:
      data.push_back(static_cast<std::uint8_t>(*p));
      break;
    case ElemType::i16: {
      std::int16_t v;
      std::memcpy(&v, p, 2);
      data.push_back(v);
      break;
    }
    case ElemType::u16: {
      std::uint16_t v;
      std::memcpy(&v, p, 2);
      data.push_back(v);
      break;
    }
    case ElemType::i32: {
      std::int32_t v;
      std::memcpy(&v, p, 4);
      data.push_back(v);
      break;
    }
    case ElemType::u32: {
      std::uint32_t v;
      std::memcpy(&v, p, 4);
      data.push_back(v);
      break;
    }
    case ElemType::i64: {
      std::int64_t v;
      std::memcpy(&v, p, 8);
      data.push_back(v);
      break;
    }
    case ElemType::u64: {
      std::uint64_t v;
      std::memcpy(&v, p, 8);
      data.push_back(v);
      break;
    }
    case ElemType::f32: {
      float v;
      std::memcpy(&v, p, 4);
      data.push_back(v);
      break;
    }
    case ElemType::f64: {
      double v;
      std::memcpy(&v, p, 8);
      data.push_back(v);
      break;
    }
    }
  }
  out["data"] = std::move(data);
  return out;
}

} // namespace fdo::daemon
