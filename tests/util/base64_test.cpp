#include "fdo/util/base64.h"

#include <catch2/catch.hpp>

using namespace fdo;

TEST_CASE("base64 round-trips binary data and rejects garbage", "[util][base64]") {
  CHECK(base64_encode("") == "");
  CHECK(base64_encode("f") == "Zg==");
  CHECK(base64_encode("foobar") == "Zm9vYmFy");
  std::string binary("\x00\xff\x10\x80zz", 6);
  auto back = base64_decode(base64_encode(binary));
  REQUIRE(back);
  CHECK(*back == binary);
  auto bad = base64_decode("Zm9v!mFy");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().code() == Errc::invalid_argument);
  CHECK_FALSE(base64_decode("Zm9"));
}
