#include "fdo/util/json_text.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

using fdo::JsonText;
using json = nlohmann::json;

namespace {

// Writes `v` element by element (never through value() for a container), so
// the text is JsonText's own; objects in nlohmann's (sorted) order.
void write(JsonText& t, const json& v) {
  switch (v.type()) {
  case json::value_t::object:
    t.begin_object();
    for (auto it = v.begin(); it != v.end(); ++it) {
      t.key(it.key());
      write(t, it.value());
    }
    t.end_object();
    return;
  case json::value_t::array:
    t.begin_array();
    for (const json& e : v)
      write(t, e);
    t.end_array();
    return;
  case json::value_t::string:
    t.string(v.get_ref<const std::string&>());
    return;
  case json::value_t::number_float:
    t.number(v.get<double>());
    return;
  case json::value_t::number_integer:
    t.number(v.get<std::int64_t>());
    return;
  case json::value_t::number_unsigned:
    t.number(v.get<std::uint64_t>());
    return;
  case json::value_t::boolean:
    t.boolean(v.get<bool>());
    return;
  default:
    t.null();
  }
}

std::string dumped(const json& v) {
  return v.dump(-1, ' ', false, json::error_handler_t::replace);
}

} // namespace

TEST_CASE("JsonText writes what nlohmann's dump writes for the same values", "[json_text]") {
  std::string every_ascii;
  for (int c = 0; c < 0x80; ++c)
    every_ascii += static_cast<char>(c);
  const json doc = {
      {"ascii", every_ascii},
      {"empty", ""},
      {"utf8", "gr\xc3\xbc\xc3\x9f \xe2\x82\xac \xf0\x9f\x98\x80"},
      {"invalid_utf8", std::string("a\xff\xfe b \xc3", 7)},
      // Runs between escapes, escapes at both ends, and UTF-8 after escapes
      // already written (the plain path's text is dropped for nlohmann's).
      {"runs", "\"plain run\\ then \n more\ttext\x01end\""},
      {"escape_then_utf8", "a\tb\\c \xc3\xbc d\n"},
      {"utf8_then_escape", "\xe2\x82\xac\"x\""},
      {"key \"with\" escapes\n", 1},
      {"ints",
       {0, -1, 1, std::numeric_limits<std::int64_t>::min(),
        std::numeric_limits<std::int64_t>::max()}},
      {"uint_max", std::numeric_limits<std::uint64_t>::max()},
      {"doubles", {0.0, -0.0, 0.1, 1.0, 1.5e300, -2.5e-300, 123456789.125, 1e-5}},
      {"nan", std::nan("")},
      {"bools", {true, false}},
      {"null", nullptr},
      {"nested", {{"a", json::array()}, {"b", json::object()}, {"c", {{"d", {1, {2, 3}}}}}}}};
  JsonText t;
  write(t, doc);
  CHECK(t.text() == dumped(doc));
  CHECK(json::parse(t.text()) == json::parse(dumped(doc)));

  // Each piece alone, so a failure names the value.
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    JsonText one;
    write(one, it.value());
    CHECK(one.text() == dumped(it.value()));
    JsonText embedded; // the same value handed over as a tree
    embedded.value(it.value());
    CHECK(embedded.text() == dumped(it.value()));
  }
}

TEST_CASE("JsonText fields and separators", "[json_text]") {
  JsonText t;
  t.begin_object()
      .field("s", "x")
      .field("i", -3)
      .field("u", std::uint64_t{7})
      .field("d", 0.5)
      .field("b", true)
      .null_field("n")
      .field("tree", json{{"k", {1, 2}}});
  t.key("arr").begin_array().number(std::int64_t{1}).begin_object().end_object().null().end_array();
  t.key("empty").begin_array().end_array();
  t.end_object();
  CHECK(t.text() == R"({"s":"x","i":-3,"u":7,"d":0.5,"b":true,"n":null,"tree":{"k":[1,2]},)"
                    R"("arr":[1,{},null],"empty":[]})");
  const json parsed = json::parse(std::move(t).take());
  CHECK(parsed["arr"] == json::parse("[1,{},null]"));
}

TEST_CASE("JsonText escapes a special byte wherever it falls in a long string or key",
          "[json_text]") {
  // Every byte value at every position of strings longer than the 16- and
  // 8-byte scans, as a value and as a key: the same text as nlohmann's.
  for (std::size_t len : {15u, 16u, 17u, 40u}) {
    for (int byte = 0; byte < 0x100; ++byte) {
      for (std::size_t at = 0; at < len; ++at) {
        std::string s(len, 'x');
        s[at] = static_cast<char>(byte);
        INFO("length " << len << ", byte " << byte << " at " << at);
        JsonText value;
        value.string(s);
        REQUIRE(value.text() == dumped(json(s)));
        JsonText key;
        key.begin_object().key(s).number(std::int64_t{1}).key(s).null().end_object();
        REQUIRE(key.text() == "{" + dumped(json(s)) + ":1," + dumped(json(s)) + ":null}");
      }
    }
  }
}
