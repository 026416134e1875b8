// Compact JSON text written straight into a string, for replies on the hot
// path (execute, feedback.submit) that would otherwise build an
// nlohmann::json tree only to serialise it once. The text is what
// nlohmann::json::dump() gives for the same values (no spaces; strings
// escaped the same way, invalid UTF-8 replaced by U+FFFD or refused;
// doubles in the same shortest form), except that members come in the order
// written, not sorted. Strings with bytes >= 0x80, doubles and embedded trees
// are handed to nlohmann's serialiser, so only the ASCII fast path is ours.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace fdo {

// What a string that is not valid UTF-8 becomes: a reply replaces the bad
// bytes (U+FFFD), as rpc's dump does; stored text refuses it, as
// canonical_json does (nlohmann::json::type_error thrown from the call that
// wrote it).
enum class InvalidUtf8 { replace, refuse };

class JsonText {
public:
  explicit JsonText(InvalidUtf8 invalid = InvalidUtf8::replace);
  JsonText& begin_object();
  JsonText& end_object();
  JsonText& begin_array();
  JsonText& end_array();
  // The next member's key (inside an object only; the value follows).
  JsonText& key(std::string_view k);

  JsonText& string(std::string_view s);
  JsonText& number(std::int64_t v);
  JsonText& number(std::uint64_t v);
  JsonText& number(double v);
  JsonText& boolean(bool v);
  JsonText& null();
  // A tree built elsewhere (small shared pieces of a reply).
  JsonText& value(const nlohmann::json& v);

  // key(k) then the value.
  JsonText& field(std::string_view k, std::string_view v) { return key(k).string(v); }
  JsonText& field(std::string_view k, const char* v) { return key(k).string(v); }
  JsonText& field(std::string_view k, const std::string& v) { return key(k).string(v); }
  JsonText& field(std::string_view k, bool v) { return key(k).boolean(v); }
  JsonText& field(std::string_view k, double v) { return key(k).number(v); }
  JsonText& field(std::string_view k, const nlohmann::json& v) { return key(k).value(v); }
  template <class I>
  requires(std::is_integral_v<I> && !std::is_same_v<I, bool>) JsonText& field(std::string_view k,
                                                                              I v) {
    if constexpr (std::is_signed_v<I>)
      return key(k).number(static_cast<std::int64_t>(v));
    else
      return key(k).number(static_cast<std::uint64_t>(v));
  }
  JsonText& null_field(std::string_view k) { return key(k).null(); }

  // Room for `bytes` of text in all (a big document's writer, which knows
  // about how long it will be, saves the copies of growing into it).
  void reserve(std::size_t bytes) { out_.reserve(bytes); }

  // Bytes written so far (a writer marks where a member begins and ends).
  std::size_t size() const { return out_.size(); }
  // The text; every container must have been closed.
  const std::string& text() const { return out_; }
  std::string take() && { return std::move(out_); }

private:
  static constexpr std::size_t kInitialBytes = 2048;
  void before_value();
  // `s` quoted and escaped, with nothing before it.
  void append_string(std::string_view s);

  std::string out_;
  InvalidUtf8 invalid_;
  struct Open {
    bool object;   // else an array
    bool nonempty; // an element or member has been written in it
  };
  std::vector<Open> open_;
  bool after_key_ = false;
};

} // namespace fdo
