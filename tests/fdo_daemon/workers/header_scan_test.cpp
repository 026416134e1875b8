// The CBOR header pre-scan (validate_header_encoding / decode_header): every
// header fdod receives from a worker is hostile, and nlohmann's CBOR reader
// recurses per nesting level and trusts declared lengths, so the scan must
// reject anything it cannot bound before the reader runs.
#include "fdo/daemon/ipc.h"

#include <catch2/catch.hpp>
#include <string>

using namespace fdo;
using namespace fdo::daemon;
using nlohmann::json;

namespace {

std::string bytes(std::initializer_list<int> list) {
  std::string s;
  for (int b : list)
    s.push_back(static_cast<char>(b));
  return s;
}

// {"k": <value>}: a valid top level around the item under test.
std::string in_map(const std::string& value) {
  return bytes({0xA1, 0x61, 'k'}) + value;
}

void check_corrupt(const std::string& header, const std::string& says) {
  INFO("says: " << says);
  auto st = validate_header_encoding(header);
  REQUIRE_FALSE(st);
  CHECK(st.error().code() == Errc::corrupt);
  CHECK_THAT(st.error().message(), Catch::Contains(says));
  // decode_header refuses it the same way (the recursive reader never runs).
  auto d = decode_header(header);
  REQUIRE_FALSE(d);
  CHECK(d.error().code() == Errc::corrupt);
  CHECK(d.error().message() == st.error().message());
}

json nested_arrays(std::size_t levels) {
  json j = json::array();
  for (std::size_t i = 1; i < levels; ++i)
    j = json::array({std::move(j)});
  return j;
}

} // namespace

TEST_CASE("header scan: accepts everything encode_header produces", "[ipc][header_scan]") {
  json h = {{"id", 18446744073709551615ull},
            {"neg", INT64_MIN},
            {"small", -1},
            {"f", 1.5},
            {"big_f", 1e300},
            {"t", true},
            {"nothing", nullptr},
            {"s", "text \xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"},
            {"empty", json::object()},
            {"list", {1, "two", json::array(), {{"x", false}}}},
            {"long", std::string(70000, 'z')}};
  auto enc = encode_header(h);
  REQUIRE(enc);
  CHECK(validate_header_encoding(*enc));
  auto back = decode_header(*enc);
  REQUIRE(back);
  CHECK(*back == h);
  auto empty = encode_header(json::object());
  REQUIRE(empty);
  CHECK(*empty == bytes({0xA0}));
  CHECK(decode_header(*empty));
}

TEST_CASE("header scan: nesting is bounded by kMaxHeaderDepth", "[ipc][header_scan]") {
  // The top-level map is level 1: 63 more levels fit, 64 more do not.
  auto fits = encode_header(json{{"k", nested_arrays(kMaxHeaderDepth - 1)}});
  REQUIRE(fits);
  CHECK(decode_header(*fits));
  auto deep = json{{"k", nested_arrays(kMaxHeaderDepth)}};
  std::string raw;
  json::to_cbor(deep, raw);
  check_corrupt(raw, "nests deeper than 64 levels");
  // The sender refuses to produce it, too.
  auto refused = encode_header(deep);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code() == Errc::invalid_argument);
  // Empty containers count: the 65th level is refused even when it is empty.
  check_corrupt(in_map(std::string(kMaxHeaderDepth - 1, '\x81') + bytes({0x80})), "nests deeper");
  check_corrupt(in_map(std::string(kMaxHeaderDepth - 1, '\x81') + bytes({0xA0})), "nests deeper");
  // A hostile worker's million levels: refused at once, no stack exhausted.
  check_corrupt(in_map(std::string(1000000, '\x81') + bytes({0x00})), "nests deeper");
  check_corrupt(in_map(std::string(1000000, '\x9F')), "indefinite length");
  std::string maps;
  for (int i = 0; i < 100000; ++i)
    maps += bytes({0xA1, 0x61, 'k'});
  check_corrupt(maps + bytes({0x00}), "nests deeper");
}

TEST_CASE("header scan: every truncation of a valid header is refused", "[ipc][header_scan]") {
  auto enc = encode_header(json{{"id", 1187},
                                {"ok", true},
                                {"result", {{"ret", 117423227}, {"names", {"a", "bc"}}}},
                                {"f", 0.25},
                                {"big", 1ull << 40}});
  REQUIRE(enc);
  for (std::size_t n = 0; n < enc->size(); ++n) {
    INFO("first " << n << " of " << enc->size() << " bytes");
    auto st = validate_header_encoding(std::string_view(*enc).substr(0, n));
    REQUIRE_FALSE(st);
    CHECK(st.error().code() == Errc::corrupt);
  }
  check_corrupt(in_map(bytes({0x19, 0x01})), "ends inside a length");
  check_corrupt(in_map(bytes({0xFB, 0x00, 0x00})), "ends inside a float");
  check_corrupt(in_map(bytes({0x65, 'a', 'b'})), "runs past the end");
}

TEST_CASE("header scan: indefinite lengths are refused", "[ipc][header_scan]") {
  check_corrupt(bytes({0xBF, 0x61, 'k', 0x01, 0xFF}), "indefinite length"); // map
  check_corrupt(in_map(bytes({0x9F, 0x01, 0xFF})), "indefinite length");     // array
  check_corrupt(in_map(bytes({0x7F, 0x61, 'a', 0xFF})), "indefinite length"); // text
  check_corrupt(in_map(bytes({0x5F, 0x41, 'a', 0xFF})), "indefinite length"); // bytes
  check_corrupt(in_map(bytes({0xFF})), "break code");
}

TEST_CASE("header scan: declared lengths past the buffer are refused", "[ipc][header_scan]") {
  const auto all_ones = bytes({0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF});
  check_corrupt(in_map(bytes({0x7B}) + all_ones), "text string runs past the end");
  check_corrupt(in_map(bytes({0x9B}) + all_ones), "container count runs past the end");
  // 2^63 pairs: twice that would wrap a u64.
  check_corrupt(in_map(bytes({0xBB, 0x80, 0, 0, 0, 0, 0, 0, 0})), "container count runs past");
  check_corrupt(bytes({0xBA, 0xFF, 0xFF, 0xFF, 0xFF}), "container count runs past the end");
  // A count the remaining bytes could hold, but the items are not there.
  check_corrupt(in_map(bytes({0x82, 0x62, 'a', 'b'})), "ends inside an item");
  check_corrupt(bytes({0xA2, 0x62, 'a', 'b', 0x01}), "ends inside an item");
}

TEST_CASE("header scan: text must be valid UTF-8 - keys included", "[ipc][header_scan]") {
  check_corrupt(in_map(bytes({0x62, 0xFF, 'a'})), "not valid UTF-8");
  check_corrupt(in_map(bytes({0x62, 0xC0, 0x80})), "not valid UTF-8");       // overlong NUL
  check_corrupt(in_map(bytes({0x63, 0xE0, 0x80, 0xAF})), "not valid UTF-8"); // overlong '/'
  check_corrupt(in_map(bytes({0x63, 0xED, 0xA0, 0x80})), "not valid UTF-8"); // surrogate
  check_corrupt(in_map(bytes({0x64, 0xF4, 0x90, 0x80, 0x80})), "not valid UTF-8"); // > U+10FFFF
  check_corrupt(in_map(bytes({0x62, 'a', 0xC3})), "not valid UTF-8"); // cut-off sequence
  check_corrupt(bytes({0xA1, 0x61, 0x80, 0x01}), "not valid UTF-8");  // in a key
  CHECK(validate_header_encoding(in_map(bytes({0x64, 0xF4, 0x8F, 0xBF, 0xBF})))); // U+10FFFF
}

TEST_CASE("header scan: bytes after the map are refused", "[ipc][header_scan]") {
  check_corrupt(bytes({0xA0, 0x00}), "bytes follow the header's map");
  check_corrupt(in_map(bytes({0x01})) + bytes({0xA0}), "bytes follow the header's map");
}

TEST_CASE("header scan: the top level must be a map", "[ipc][header_scan]") {
  check_corrupt("", "ends inside an item");
  check_corrupt(bytes({0x80}), "not a map");
  check_corrupt(bytes({0x01}), "not a map");
  check_corrupt(bytes({0x60}), "not a map");
  check_corrupt(bytes({0xF6}), "not a map");
  check_corrupt(bytes({0x81, 0xA0}), "not a map");
}

TEST_CASE("header scan: what encode_header never produces is refused", "[ipc][header_scan]") {
  check_corrupt(in_map(bytes({0x41, 'a'})), "byte string");
  check_corrupt(in_map(bytes({0xC1, 0x01})), "a tag");
  check_corrupt(in_map(bytes({0xF7})), "unsupported simple value"); // undefined
  check_corrupt(in_map(bytes({0xF8, 0x20})), "unsupported simple value");
  check_corrupt(in_map(bytes({0xE0})), "unsupported simple value");
  check_corrupt(in_map(bytes({0x1C})), "reserved length encoding");
  check_corrupt(bytes({0xA1, 0x01, 0x02}), "map key is not a text string");
  // A negative integer must fit int64: -2^63 does, -2^63 - 1 does not.
  CHECK(validate_header_encoding(
      in_map(bytes({0x3B, 0x7F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}))));
  check_corrupt(in_map(bytes({0x3B, 0x80, 0, 0, 0, 0, 0, 0, 0})), "below -2^63");
}

TEST_CASE("header scan: encode_header_with splices an encoded member", "[ipc][header_scan]") {
  auto result = encode_header(json{{"ret", 3}, {"names", {"a"}}});
  REQUIRE(result);
  auto spliced = encode_header_with(json{{"id", 7}, {"ok", true}}, "result", *result);
  REQUIRE(spliced);
  auto back = decode_header(*spliced);
  REQUIRE(back);
  CHECK(*back == json{{"id", 7}, {"ok", true}, {"result", {{"ret", 3}, {"names", {"a"}}}}});
  auto dup = encode_header_with(json{{"result", 1}}, "result", *result);
  REQUIRE_FALSE(dup);
  CHECK(dup.error().code() == Errc::invalid_argument);
}
