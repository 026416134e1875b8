// The C API (include/fdo/fdo.h) against a fake daemon: connecting, errors.
#include "fdo/fdo.h"
#include "tools/fake_daemon.h"

#include <catch2/catch.hpp>
#include <string>

using nlohmann::json;
namespace test = fdo::ctl::test;

TEST_CASE("fdo_connect to a missing socket reports unavailable with advice") {
  test::TempDir dir;
  fdo_conn* conn = reinterpret_cast<fdo_conn*>(0x1);
  fdo_error* err = nullptr;
  REQUIRE(fdo_connect(dir.file("nope.sock").c_str(), &conn, &err) == -1);
  CHECK(conn == nullptr);
  REQUIRE(err != nullptr);
  CHECK(fdo_error_get_code(err) == FDO_ERR_UNAVAILABLE);
  CHECK(std::string(fdo_error_code_name(fdo_error_get_code(err))) == "unavailable");
  CHECK_THAT(fdo_error_message(err), Catch::Contains("cannot connect to"));
  CHECK(fdo_error_rpc_code(err) == 0);
  CHECK(std::string(fdo_error_data_json(err)) == "null");
  fdo_error_free(err);
  // err may be NULL: the failure is still reported by the return value.
  REQUIRE(fdo_connect(dir.file("nope.sock").c_str(), &conn, nullptr) == -1);
  REQUIRE(fdo_connect(dir.file("x").c_str(), nullptr, &err) == -1);
  CHECK(fdo_error_get_code(err) == FDO_ERR_INVALID_ARGUMENT);
  fdo_error_free(err);
}

TEST_CASE("error code names cover every code") {
  CHECK(std::string(fdo_error_code_name(FDO_ERR_INVALID_ARGUMENT)) == "invalid_argument");
  CHECK(std::string(fdo_error_code_name(FDO_ERR_NOT_FOUND)) == "not_found");
  CHECK(std::string(fdo_error_code_name(FDO_ERR_INTERNAL)) == "internal");
  CHECK(std::string(fdo_error_code_name(static_cast<fdo_error_code>(0))) == "unknown");
  fdo_error_free(nullptr);
  fdo_close(nullptr);
}
