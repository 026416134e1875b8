// program.source: a program's registered IR, for its owner (and operators)
// only, whatever the profile sharing.
#include "fdo/util/base64.h"
#include "service_harness.h"

#include <catch2/catch.hpp>

using namespace fdo;
using namespace fdo::daemon;
using namespace fdo::daemon::testing;
using nlohmann::json;

TEST_CASE("service: program.source returns the owner's IR, base64, with its keys",
          "[service][program.source]") {
  Harness h;
  auto reg = h.call("program.register", {{"ir", "program a"}, {"name", "alpha"}});
  REQUIRE(reg);
  const std::string ik = (*reg)["program"];
  auto got = h.call("program.source", {{"program", ik}});
  REQUIRE(got);
  CHECK((*got)["program"] == ik);
  CHECK((*got)["profile_key"] == (*reg)["profile_key"]);
  CHECK((*got)["name"] == "alpha");
  CHECK((*got)["owner"] == 1000);
  CHECK((*got)["format"] == "text");
  CHECK((*got)["size"] == 9);
  auto bytes = base64_decode((*got)["ir_base64"].get<std::string>());
  REQUIRE(bytes);
  CHECK(*bytes == "program a");

  // Bitcode comes back as such.
  const std::string bitcode("BC\xC0\xDE rest", 9);
  auto bc = h.call("program.register", {{"ir_base64", base64_encode(bitcode)}});
  REQUIRE(bc);
  auto bc_source = h.call("program.source", {{"program", (*bc)["program"]}});
  REQUIRE(bc_source);
  CHECK((*bc_source)["format"] == "bitcode");
  CHECK(*base64_decode((*bc_source)["ir_base64"].get<std::string>()) == bitcode);
}

TEST_CASE("service: program.source hides another tenant's IR, also with shared profiles",
          "[service][program.source][tenancy]") {
  for (bool shared : {false, true}) {
    Config c = Harness::base_config();
    c.share_profiles_across_tenants = shared;
    Harness h(c);
    auto reg = h.call("program.register", {{"ir", "program a"}});
    REQUIRE(reg);
    const std::string ik = (*reg)["program"];
    auto theirs = h.call("program.source", {{"program", ik}}, 1001);
    REQUIRE_FALSE(theirs);
    // The harness hands back the JSON-RPC error object as the message.
    CHECK_THAT(theirs.error().message(), Catch::Contains(R"("code":"not_found")"));
    CHECK_THAT(theirs.error().message(), Catch::Contains("no program " + ik));
    // Unknown ids and bad params are errors too, and nothing was lost.
    auto unknown = h.call("program.source", {{"program", std::string(64, 'a')}});
    REQUIRE_FALSE(unknown);
    CHECK_THAT(unknown.error().message(), Catch::Contains(R"("code":"not_found")"));
    CHECK_FALSE(h.call("program.source", json::object()));
    CHECK(h.call("program.source", {{"program", ik}}));
    // Operators (root) may read any program's IR.
    CHECK(h.call("program.source", {{"program", ik}}, 0));
  }
}
