// fdo.hpp, the C++ wrapper: RAII and exceptions over the C API.
#include "fdo/fdo.hpp"
#include "tools/fake_daemon.h"

#include <catch2/catch.hpp>

using nlohmann::json;
namespace test = fdo::ctl::test;

TEST_CASE("fdo.hpp: connect - register - execute - errors as exceptions") {
  test::TempDir dir;
  const std::string id(64, 'c'), pk(64, 'd');
  test::FakeDaemon d(dir.file("s.sock"), [&](const json& r) -> json {
    if (r["method"] == "hello")
      return {{"result",
               {{"server_version", "1.2.3"},
                {"protocol", {{"major", 1}, {"minor", 0}}},
                {"capabilities", {"execute"}}}}};
    if (r["method"] == "program.register")
      return {{"result", {{"program", id}, {"profile_key", pk}}}};
    if (r["method"] == "execute" && r["params"]["entry"] == "add")
      return {{"result",
               {{"returns", "i64"},
                {"value", r["params"]["args"][0].get<std::int64_t>() +
                              r["params"]["args"][1].get<std::int64_t>()}}}};
    return {
        {"error",
         {{"code", -32602}, {"message", "bad entry"}, {"data", {{"code", "invalid_argument"}}}}}};
  });
  fdo::api::Connection conn(dir.file("s.sock"), "cxx-test");
  CHECK(conn.server_version() == "1.2.3");
  CHECK(conn.has_capability("execute"));
  fdo::api::Program p = conn.register_program("define i64 @add(i64, i64) { ... }");
  CHECK(p.id == id);
  CHECK(p.profile_key == pk);
  fdo_value v = conn.execute(p.id, "add", {fdo::api::i64(40), fdo::api::i64(2)});
  CHECK(v.type == FDO_I64);
  CHECK(v.as.i64 == 42);
  try {
    conn.execute(p.id, "nope");
    FAIL("no exception");
  } catch (const fdo::api::Error& e) {
    CHECK(e.code() == FDO_ERR_INVALID_ARGUMENT);
    CHECK(e.rpc_code() == -32602);
    CHECK(std::string(e.what()) == "bad entry");
    CHECK(json::parse(e.data_json())["code"] == "invalid_argument");
  }
  CHECK_THROWS_AS(fdo::api::Connection(dir.file("missing.sock")), fdo::api::Error);
}
