#include "fdo/util/expected.h"

#include <catch2/catch.hpp>
#include <cerrno>
#include <memory>

using namespace fdo;

namespace {
Expected<int> parse_positive(int v) {
  if (v <= 0) return make_error(Errc::invalid_argument, "not positive: " + std::to_string(v));
  return v;
}

Expected<int> doubled(int v) {
  FDO_TRY(int x, parse_positive(v));
  return 2 * x;
}

Status check(int v) {
  FDO_TRY_STATUS(parse_positive(v));
  return ok();
}
} // namespace

TEST_CASE("Expected holds a value or an error", "[util][expected]") {
  Expected<int> good = parse_positive(3);
  REQUIRE(good.has_value());
  CHECK(*good == 3);
  Expected<int> bad = parse_positive(-1);
  REQUIRE_FALSE(bad);
  CHECK(bad.error().code() == Errc::invalid_argument);
  CHECK(bad.error().message() == "not positive: -1");
  CHECK(bad.value_or(7) == 7);
}

TEST_CASE("FDO_TRY propagates errors and unwraps values", "[util][expected]") {
  CHECK(*doubled(4) == 8);
  auto e = doubled(0);
  REQUIRE_FALSE(e);
  CHECK(e.error().describe() == "invalid_argument: not positive: 0");
  CHECK(check(1).has_value());
  CHECK_FALSE(check(-5).has_value());
}

TEST_CASE("Expected works with move-only types", "[util][expected]") {
  Expected<std::unique_ptr<int>> p = std::make_unique<int>(5);
  REQUIRE(p);
  std::unique_ptr<int> owned = std::move(p).value();
  CHECK(*owned == 5);
}

TEST_CASE("Error context and errno mapping", "[util][expected]") {
  Error e = Error::from_errno("open /x", ENOENT);
  CHECK(e.code() == Errc::not_found);
  CHECK(e.message().find("/x") != std::string::npos);
  Error c = std::move(e).context("load cache");
  CHECK(c.message().rfind("load cache: open /x", 0) == 0);
  CHECK(Error::from_errno("x", EACCES).code() == Errc::permission_denied);
  CHECK(Error::from_errno("x", EIO).code() == Errc::io);
  CHECK(to_string(Errc::conflict) == "conflict");
}
