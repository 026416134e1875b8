#include "fdo/ctl/call_args.h"

#include "fdo/util/base64.h"
#include "fdo/util/fd.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <set>

namespace fdo::ctl {

using nlohmann::json;

namespace {

struct ElemInfo {
  std::string_view name;
  unsigned bits;
  bool is_signed;
  bool is_float;
};

constexpr ElemInfo kElems[] = {
    {"i8", 8, true, false},    {"u8", 8, false, false},   {"i16", 16, true, false},
    {"u16", 16, false, false}, {"i32", 32, true, false},  {"u32", 32, false, false},
    {"i64", 64, true, false},  {"u64", 64, false, false}, {"f32", 32, true, true},
    {"f64", 64, true, true},
};

const ElemInfo* find_elem(std::string_view name) {
  for (const auto& e : kElems)
    if (e.name == name) return &e;
  return nullptr;
}

std::string trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t'))
    s.remove_suffix(1);
  return std::string(s);
}

// Integer text -> JSON number (signed when negative). Accepts decimal and 0x
// hex with an optional leading '-'.
Expected<json> parse_integer(std::string_view text, const std::string& where) {
  std::string t = trim(text);
  bool negative = !t.empty() && t[0] == '-';
  std::string_view digits = std::string_view(t).substr(negative ? 1 : 0);
  if (!negative && !digits.empty() && digits[0] == '+') digits.remove_prefix(1);
  int base = 10;
  if (digits.size() > 2 && digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X')) {
    base = 16;
    digits.remove_prefix(2);
  }
  std::uint64_t magnitude = 0;
  auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), magnitude, base);
  if (digits.empty() || ec == std::errc::invalid_argument || ptr != digits.data() + digits.size())
    return make_error(Errc::invalid_argument, where + ": '" + std::string(text) +
                                                  "' is not an integer (decimal or 0x hex)");
  if (ec == std::errc::result_out_of_range)
    return make_error(Errc::invalid_argument,
                      where + ": '" + std::string(text) + "' does not fit in 64 bits");
  if (!negative) return json(magnitude);
  if (magnitude > std::uint64_t(1) << 63)
    return make_error(Errc::invalid_argument,
                      where + ": '" + std::string(text) + "' does not fit in 64 bits");
  return json(static_cast<std::int64_t>(0 - magnitude));
}

// Which ranges of a width a value may fall in: an element type has one;
// a scalar argument takes either, as fdod does.
enum class Range { signed_only, unsigned_only, either };

Status check_width(const json& v, unsigned bits, const std::string& where, Range range) {
  const bool allow_signed = range != Range::unsigned_only;
  const bool allow_unsigned = range != Range::signed_only;
  if (bits >= 64) {
    if (v.is_number_unsigned() && !allow_unsigned &&
        v.get<std::uint64_t>() > std::uint64_t(std::numeric_limits<std::int64_t>::max()))
      return make_error(Errc::invalid_argument, where + ": " + v.dump() + " does not fit in i64");
    if (!v.is_number_unsigned() && !allow_signed)
      return make_error(Errc::invalid_argument,
                        where + ": " + v.dump() + " is negative; the type is unsigned");
    return ok();
  }
  if (v.is_number_unsigned()) {
    std::uint64_t u = v.get<std::uint64_t>();
    std::uint64_t limit =
        allow_unsigned ? (std::uint64_t(1) << bits) - 1 : (std::uint64_t(1) << (bits - 1)) - 1;
    if (u > limit)
      return make_error(Errc::invalid_argument, where + ": " + v.dump() + " does not fit in " +
                                                    std::to_string(bits) + " bits");
    return ok();
  }
  if (!allow_signed)
    return make_error(Errc::invalid_argument,
                      where + ": " + v.dump() + " is negative; the type is unsigned");
  std::int64_t s = v.get<std::int64_t>();
  std::int64_t lo = bits == 1 ? 0 : -(std::int64_t(1) << (bits - 1));
  if (s < lo)
    return make_error(Errc::invalid_argument, where + ": " + v.dump() + " does not fit in " +
                                                  std::to_string(bits) + " bits");
  return ok();
}

Expected<json> parse_float(std::string_view text, const std::string& where) {
  std::string t = trim(text);
  if (t.empty())
    return make_error(Errc::invalid_argument, where + ": empty value, expected a number");
  char* end = nullptr;
  errno = 0;
  double d = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size())
    return make_error(Errc::invalid_argument,
                      where + ": '" + std::string(text) + "' is not a number");
  if (!std::isfinite(d))
    // JSON has no inf/nan: fdod could not receive them.
    return make_error(Errc::invalid_argument,
                      where + ": '" + std::string(text) +
                          "' is not finite; JSON (and so fdod) carries finite numbers only");
  return json(d);
}

// Integer width fdod uses for an iN parameter (the thunk slot's type).
unsigned slot_bits(unsigned bits) {
  if (bits == 1) return 1;
  if (bits <= 8) return 8;
  if (bits <= 16) return 16;
  if (bits <= 32) return 32;
  return 64;
}

} // namespace

Expected<json> parse_buffer_spec(std::string_view spec) {
  std::string where = "--buffer '" + std::string(spec) + "'";
  auto colon = spec.find(':');
  if (colon == std::string_view::npos)
    return make_error(Errc::invalid_argument,
                      where + ": expected TYPE:v1,v2,... | TYPE:zeros=N | u8:text=STRING | "
                              "TYPE:file=PATH");
  std::string type = trim(spec.substr(0, colon));
  std::string_view body = spec.substr(colon + 1);
  const ElemInfo* elem = find_elem(type);
  if (elem == nullptr)
    return make_error(Errc::invalid_argument,
                      where + ": unknown element type '" + type +
                          "' (expected i8, u8, i16, u16, i32, u32, i64, u64, f32 or f64)");
  if (body.starts_with("zeros=")) {
    auto n = parse_integer(body.substr(6), where + " zeros");
    if (!n || !n->is_number_unsigned())
      return make_error(Errc::invalid_argument,
                        where + ": zeros=N needs a non-negative element count");
    return json{{"type", type}, {"length", n->get<std::uint64_t>()}};
  }
  if (body.starts_with("text=")) {
    if (elem->bits != 8)
      return make_error(Errc::invalid_argument,
                        where + ": text= fills bytes; use u8 or i8 as the element type");
    return json{{"type", type}, {"base64", base64_encode(body.substr(5))}};
  }
  if (body.starts_with("file=")) {
    std::string path(body.substr(5));
    auto bytes = read_file(path);
    if (!bytes) return std::move(bytes).error().context(where);
    std::size_t es = elem->bits / 8;
    if (bytes->size() % es != 0)
      return make_error(Errc::invalid_argument,
                        where + ": " + path + " holds " + std::to_string(bytes->size()) +
                            " bytes, not a whole number of " + std::to_string(es) + "-byte " +
                            type + " elements");
    return json{{"type", type}, {"base64", base64_encode(*bytes)}};
  }
  json data = json::array();
  if (!trim(body).empty()) {
    std::size_t start = 0, index = 0;
    while (start <= body.size()) {
      std::size_t comma = body.find(',', start);
      std::string_view item = body.substr(
          start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
      std::string at = where + " element " + std::to_string(index);
      if (elem->is_float) {
        FDO_TRY(json v, parse_float(item, at));
        data.push_back(std::move(v));
      } else {
        FDO_TRY(json v, parse_integer(item, at));
        FDO_TRY_STATUS(check_width(v, elem->bits, at + " (" + type + ")",
                                   elem->is_signed ? Range::signed_only : Range::unsigned_only));
        data.push_back(std::move(v));
      }
      ++index;
      if (comma == std::string_view::npos) break;
      start = comma + 1;
    }
  }
  return json{{"type", type}, {"data", std::move(data)}};
}

Expected<json> parse_arg(std::string_view text, std::string_view param_type, std::size_t index,
                         std::size_t buffer_count) {
  std::string where = "--arg " + std::to_string(index) + " (" + std::string(param_type) + ")";
  if (param_type == "ptr") {
    std::string t = trim(text);
    if (t.size() < 2 || t[0] != '@')
      return make_error(Errc::invalid_argument,
                        where +
                            ": a pointer parameter takes @N, the N-th --buffer (0-based); got '" +
                            std::string(text) + "'");
    auto n = parse_integer(std::string_view(t).substr(1), where);
    if (!n || !n->is_number_unsigned())
      return make_error(Errc::invalid_argument, where + ": '" + t + "' is not @N");
    std::uint64_t i = n->get<std::uint64_t>();
    if (i >= buffer_count)
      return make_error(Errc::invalid_argument,
                        where + ": " + t + " names buffer " + std::to_string(i) + " but " +
                            std::to_string(buffer_count) + " --buffer value(s) were given");
    return json{{"buffer", i}};
  }
  if (param_type == "float" || param_type == "double") return parse_float(text, where);
  if (param_type.size() >= 2 && param_type[0] == 'i') {
    unsigned bits = 0;
    auto digits = param_type.substr(1);
    auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), bits);
    if (ec == std::errc() && p == digits.data() + digits.size() && bits >= 1 && bits <= 64) {
      std::string t = trim(text);
      if (bits == 1 && (t == "true" || t == "false")) return json(t == "true");
      FDO_TRY(json v, parse_integer(text, where));
      FDO_TRY_STATUS(check_width(v, slot_bits(bits), where, Range::either));
      return v;
    }
  }
  return make_error(Errc::unsupported, where + ": fdoctl cannot pass a parameter of type '" +
                                           std::string(param_type) + "'");
}

Expected<CallParams> build_call(std::string_view entry, const std::vector<std::string>& param_types,
                                const std::vector<std::string>& arg_texts,
                                const std::vector<std::string>& buffer_specs) {
  CallParams call;
  for (const auto& spec : buffer_specs) {
    FDO_TRY(json b, parse_buffer_spec(spec));
    call.buffers.push_back(std::move(b));
  }
  if (arg_texts.size() != param_types.size()) {
    std::string sig;
    for (const auto& t : param_types)
      sig += (sig.empty() ? "" : ", ") + t;
    return make_error(Errc::invalid_argument,
                      std::string(entry) + "(" + sig + ") takes " +
                          std::to_string(param_types.size()) + " argument(s); " +
                          std::to_string(arg_texts.size()) +
                          " --arg value(s) given (pointer parameters take @N, the N-th --buffer)");
  }
  std::set<std::uint64_t> used;
  for (std::size_t i = 0; i < param_types.size(); ++i) {
    FDO_TRY(json a, parse_arg(arg_texts[i], param_types[i], i, call.buffers.size()));
    if (a.is_object()) used.insert(a["buffer"].get<std::uint64_t>());
    call.args.push_back(std::move(a));
  }
  for (std::size_t b = 0; b < call.buffers.size(); ++b)
    if (!used.contains(b))
      return make_error(Errc::invalid_argument,
                        "--buffer " + std::to_string(b) + " ('" + buffer_specs[b] +
                            "') is not passed to any pointer parameter (use --arg @" +
                            std::to_string(b) + ")");
  return call;
}

} // namespace fdo::ctl
