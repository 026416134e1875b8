#include "fdo/util/hash.h"

#include <catch2/catch.hpp>

using namespace fdo;

TEST_CASE("BLAKE3 matches the reference test vectors", "[util][hash]") {
  // Official BLAKE3 vector for the empty input.
  CHECK(blake3_hex("") == "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262");
  // b3sum of "abc".
  CHECK(blake3_hex("abc") == "6437b3ac38465133ffb63b75273a8db548c558465d79db03fd359c6cd5bd9d85");
}

TEST_CASE("Hasher is incremental and framed", "[util][hash]") {
  Hasher a;
  a.update("ab").update("c");
  CHECK(a.hex() == blake3_hex("abc"));
  Hasher f1, f2;
  f1.update_field("ab").update_field("c");
  f2.update_field("a").update_field("bc");
  CHECK(f1.hex() != f2.hex());
  Hasher n1, n2;
  n1.update_u64(1);
  n2.update_u64(256);
  CHECK(n1.hex() != n2.hex());
  CHECK(is_hex_key(a.hex()));
  CHECK(a.digest64() != 0);
}

TEST_CASE("hex round trip and validation", "[util][hash]") {
  std::string raw("\x00\x01\xfe\xff", 4);
  std::string hex = to_hex({reinterpret_cast<const std::uint8_t*>(raw.data()), raw.size()});
  CHECK(hex == "0001feff");
  auto back = from_hex("0001FEff");
  REQUIRE(back);
  CHECK(*back == raw);
  CHECK_FALSE(from_hex("abc"));
  CHECK_FALSE(from_hex("zz"));
  CHECK_FALSE(is_hex_key("ABC"));
  CHECK_FALSE(is_hex_key(std::string(64, 'g')));
  CHECK(is_hex_key(std::string(64, 'a')));
}
