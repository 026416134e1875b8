#include "fdo/util/json_text.h"

#include <array>
#include <cassert>
#include <charconv>
#include <cstdint>
#include <cstring>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

namespace fdo {

namespace {

// nlohmann's serialiser for what the fast paths leave to it.
void append_dump(std::string& out, const nlohmann::json& v, InvalidUtf8 invalid) {
  out += v.dump(-1, ' ', false,
                invalid == InvalidUtf8::replace ? nlohmann::json::error_handler_t::replace
                                                : nlohmann::json::error_handler_t::strict);
}

// The bytes a JSON string takes as they are: printable ASCII but '"' and '\\'.
constexpr std::array<bool, 256> kPlain = [] {
  std::array<bool, 256> t{};
  for (int c = 0x20; c < 0x80; ++c)
    t[static_cast<std::size_t>(c)] = c != '"' && c != '\\';
  return t;
}();

// Whether any byte of `w` is zero (the classic bit trick: a byte borrows
// into its top bit only if it was 0).
constexpr std::uint64_t kOnes = 0x0101010101010101ull;
constexpr std::uint64_t kTops = 0x8080808080808080ull;
constexpr bool has_zero_byte(std::uint64_t w) {
  return ((w - kOnes) & ~w & kTops) != 0;
}

// The end of the run of plain bytes in `s` from `i`: eight bytes at a time
// while none is special (below 0x20, '"', '\\' or not ASCII), then byte by byte.
[[gnu::always_inline]] inline std::size_t plain_prefix(std::string_view s, std::size_t i) {
  const char* p = s.data();
  const std::size_t n = s.size();
#ifdef __SSE2__
  // Sixteen bytes at a time: a signed compare below 0x20 catches control
  // bytes and every byte from 0x80 (negative as signed) at once.
  const __m128i space = _mm_set1_epi8(0x20), quote = _mm_set1_epi8('"'),
                backslash = _mm_set1_epi8('\\');
  while (n - i >= 16) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i));
    const __m128i special =
        _mm_or_si128(_mm_cmplt_epi8(v, space),
                     _mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash)));
    if (const int mask = _mm_movemask_epi8(special); mask != 0)
      return i + static_cast<std::size_t>(__builtin_ctz(static_cast<unsigned>(mask)));
    i += 16;
  }
#endif
  while (n - i >= 8) {
    std::uint64_t w;
    std::memcpy(&w, p + i, 8);
    const bool special = (w & kTops) != 0 || ((w - 0x20 * kOnes) & kTops) != 0 ||
                         has_zero_byte(w ^ ('"' * kOnes)) || has_zero_byte(w ^ ('\\' * kOnes));
    if (special) break;
    i += 8;
  }
  while (i < n && kPlain[static_cast<unsigned char>(p[i])])
    ++i;
  return i;
}

template <class I> void append_integer(std::string& out, I v) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  (void)ec; // 24 bytes hold any 64-bit integer
  out.append(buf, end);
}

} // namespace

void JsonText::before_value() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!open_.empty()) {
    assert(!open_.back().object && "a member needs a key");
    if (open_.back().nonempty) out_ += ',';
    open_.back().nonempty = true;
  }
}

JsonText& JsonText::begin_object() {
  before_value();
  out_ += '{';
  open_.push_back({true, false});
  return *this;
}

JsonText& JsonText::end_object() {
  assert(!open_.empty() && open_.back().object && !after_key_);
  open_.pop_back();
  out_ += '}';
  return *this;
}

JsonText& JsonText::begin_array() {
  before_value();
  out_ += '[';
  open_.push_back({false, false});
  return *this;
}

JsonText& JsonText::end_array() {
  assert(!open_.empty() && !open_.back().object && !after_key_);
  open_.pop_back();
  out_ += ']';
  return *this;
}

JsonText::JsonText(InvalidUtf8 invalid) : invalid_(invalid) {
  // A stage's reply is 1-2 KiB: grown from empty it was copied four times.
  out_.reserve(kInitialBytes);
  open_.reserve(8);
}

JsonText& JsonText::key(std::string_view k) {
  assert(!open_.empty() && open_.back().object && !after_key_);
  const bool comma = open_.back().nonempty;
  open_.back().nonempty = true;
  // A key is a string followed by ':' (and preceded by ',' after a member).
  if (plain_prefix(k, 0) == k.size()) { // the usual case: one copy
    const std::size_t start = out_.size();
    out_.resize(start + k.size() + 3 + (comma ? 1 : 0));
    char* d = out_.data() + start;
    if (comma) *d++ = ',';
    *d++ = '"';
    std::memcpy(d, k.data(), k.size());
    d[k.size()] = '"';
    d[k.size() + 1] = ':';
  } else {
    if (comma) out_ += ',';
    append_string(k);
    out_ += ':';
  }
  after_key_ = true;
  return *this;
}

JsonText& JsonText::string(std::string_view s) {
  before_value();
  append_string(s);
  return *this;
}

void JsonText::append_string(std::string_view s) {
  // Keys and most values are ASCII with nothing to escape: the bytes between
  // escapes are copied in runs, not one by one.
  const std::size_t start = out_.size();
  std::size_t i = plain_prefix(s, 0);
  if (i == s.size()) { // nothing to escape (the usual case): one copy
    out_.resize(start + s.size() + 2);
    char* d = out_.data() + start;
    d[0] = '"';
    std::memcpy(d + 1, s.data(), s.size());
    d[s.size() + 1] = '"';
    return;
  }
  static constexpr char kHex[] = "0123456789abcdef";
  out_.reserve(start + s.size() + 2);
  out_ += '"';
  std::size_t run = 0;
  for (;; i = plain_prefix(s, i + 1)) {
    if (i == s.size()) break;
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      // UTF-8 (valid or not) goes through nlohmann, which replaces or
      // refuses what is invalid.
      out_.resize(start);
      append_dump(out_, nlohmann::json(std::string(s)), invalid_);
      return;
    }
    out_.append(s.data() + run, i - run);
    run = i + 1;
    switch (c) {
    case '"':
      out_ += "\\\"";
      break;
    case '\\':
      out_ += "\\\\";
      break;
    case '\b':
      out_ += "\\b";
      break;
    case '\f':
      out_ += "\\f";
      break;
    case '\n':
      out_ += "\\n";
      break;
    case '\r':
      out_ += "\\r";
      break;
    case '\t':
      out_ += "\\t";
      break;
    default:
      out_ += "\\u00";
      out_ += kHex[c >> 4];
      out_ += kHex[c & 0xf];
    }
  }
  out_.append(s.data() + run, s.size() - run);
  out_ += '"';
}

JsonText& JsonText::number(std::int64_t v) {
  before_value();
  append_integer(out_, v);
  return *this;
}

JsonText& JsonText::number(std::uint64_t v) {
  before_value();
  append_integer(out_, v);
  return *this;
}

JsonText& JsonText::number(double v) {
  before_value();
  append_dump(out_, nlohmann::json(v), invalid_);
  return *this;
}

JsonText& JsonText::boolean(bool v) {
  before_value();
  out_ += v ? "true" : "false";
  return *this;
}

JsonText& JsonText::null() {
  before_value();
  out_ += "null";
  return *this;
}

JsonText& JsonText::value(const nlohmann::json& v) {
  switch (v.type()) {
  case nlohmann::json::value_t::null:
    return null();
  case nlohmann::json::value_t::boolean:
    return boolean(v.get<bool>());
  case nlohmann::json::value_t::number_integer:
    return number(v.get<std::int64_t>());
  case nlohmann::json::value_t::number_unsigned:
    return number(v.get<std::uint64_t>());
  case nlohmann::json::value_t::string:
    return string(v.get_ref<const std::string&>());
  default:
    before_value();
    append_dump(out_, v, invalid_);
    return *this;
  }
}

} // namespace fdo
