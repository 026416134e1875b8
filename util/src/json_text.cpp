#include "fdo/util/json_text.h"

#include <cassert>
#include <charconv>

namespace fdo {

namespace {

// nlohmann's serialiser for what the fast paths leave to it; invalid UTF-8
// replaced, as fdod's replies are (rpc's dump).
void append_dump(std::string& out, const nlohmann::json& v) {
  out += v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
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

JsonText& JsonText::key(std::string_view k) {
  assert(!open_.empty() && open_.back().object && !after_key_);
  if (open_.back().nonempty) out_ += ',';
  open_.back().nonempty = true;
  // A key is a string; string() must not see it as an array element.
  after_key_ = true;
  string(k);
  out_ += ':';
  after_key_ = true;
  return *this;
}

JsonText& JsonText::string(std::string_view s) {
  before_value();
  for (unsigned char c : s)
    if (c >= 0x80) {
      append_dump(out_, nlohmann::json(std::string(s)));
      return *this;
    }
  static constexpr char kHex[] = "0123456789abcdef";
  out_.reserve(out_.size() + s.size() + 2);
  out_ += '"';
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
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
      if (c < 0x20) {
        out_ += "\\u00";
        out_ += kHex[c >> 4];
        out_ += kHex[c & 0xf];
      } else {
        out_ += ch;
      }
    }
  }
  out_ += '"';
  return *this;
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
  append_dump(out_, nlohmann::json(v));
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
    append_dump(out_, v);
    return *this;
  }
}

} // namespace fdo
