// The fixed-layout codec (wire.h): what is written is read back, and a
// reader over short or lying bytes fails once, clearly, without allocating.
#include "fdo/util/wire.h"

#include <catch2/catch.hpp>

using namespace fdo;

TEST_CASE("wire: the reader checks every read and reports the first failure", "[util][wire]") {
  wire::WireWriter w;
  w.u8(5);
  w.u32(70000);
  w.u64(1ull << 50);
  w.f64(0.25);
  w.str("hello");
  w.opt_u64(std::nullopt);
  w.opt_u64(9);
  auto bytes = std::move(w).take();
  REQUIRE(bytes);
  wire::WireReader r(*bytes, "test message");
  CHECK(r.u8() == 5);
  CHECK(r.u32() == 70000);
  CHECK(r.u64() == (1ull << 50));
  CHECK(r.f64() == 0.25);
  CHECK(r.str() == "hello");
  CHECK_FALSE(r.opt_u64());
  CHECK(r.opt_u64() == std::optional<std::uint64_t>(9));
  CHECK(r.finish());

  // Reading past the end fails once; later reads give zero values.
  wire::WireReader short_read(std::string_view("\x01\x00", 2), "short");
  CHECK(short_read.u32() == 0);
  CHECK(short_read.u8() == 0);
  auto st = short_read.finish();
  REQUIRE_FALSE(st);
  CHECK(st.error().message() == "short: truncated: a u32 needs 4 byte(s), 2 left");
  // A count over its limit.
  wire::WireWriter c;
  c.count(10);
  auto counted = std::move(c).take();
  REQUIRE(counted);
  wire::WireReader limited(*counted, "limited"); // reads `counted`: it must outlive the reader
  CHECK(limited.count(0, 5) == 0);
  CHECK_THAT(limited.finish().error().message(), Catch::Contains("over the limit of 5"));
}
