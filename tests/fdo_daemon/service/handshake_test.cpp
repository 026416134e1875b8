// hello: the protocol handshake (docs/fdod-protocol.md, "Handshake").
#include "fdo/util/protocol.h"
#include "service_harness.h"

#include <catch2/catch.hpp>

using namespace fdo;
using namespace fdo::daemon;
using namespace fdo::daemon::testing;
using nlohmann::json;

TEST_CASE("hello: the same major protocol version is welcome", "[service][hello]") {
  Harness h;
  auto r =
      h.call("hello", {{"client", "test 1"},
                       {"protocol", {{"major", kProtocolMajor}, {"minor", kProtocolMinor + 5}}}});
  REQUIRE(r);
  CHECK((*r)["server_version"].is_string());
  CHECK((*r)["protocol"]["major"] == kProtocolMajor);
  CHECK((*r)["protocol"]["minor"] == kProtocolMinor);
  REQUIRE((*r)["capabilities"].is_array());
  CHECK(std::find((*r)["capabilities"].begin(), (*r)["capabilities"].end(), "execute") !=
        (*r)["capabilities"].end());
  CHECK(h.dispatcher.method_class("hello") == MethodClass::immediate);
}

TEST_CASE("hello: another major version is refused naming both versions", "[service][hello]") {
  Harness h;
  auto r = h.call("hello", {{"client", "libfdo 9.1"},
                            {"protocol", {{"major", kProtocolMajor + 1}, {"minor", 3}}}});
  REQUIRE_FALSE(r);
  json err = json::parse(r.error().message());
  CHECK(err["code"] == -32014);
  CHECK(err["data"]["code"] == "unsupported");
  std::string msg = err["message"];
  CHECK_THAT(msg, Catch::Contains("protocol version mismatch") && Catch::Contains("libfdo 9.1") &&
                      Catch::Contains("protocol " + std::to_string(kProtocolMajor + 1) + ".3") &&
                      Catch::Contains("speaks protocol " + std::to_string(kProtocolMajor) + "." +
                                      std::to_string(kProtocolMinor)));
}

TEST_CASE("hello: malformed params get a clear invalid-params error", "[service][hello]") {
  Harness h;
  for (const json& params :
       {json::object(), json{{"client", 1}, {"protocol", {{"major", 1}, {"minor", 0}}}},
        json{{"client", "c"}}, json{{"client", "c"}, {"protocol", {{"major", "1"}, {"minor", 0}}}},
        json{{"client", "c"}, {"protocol", {{"major", 1}, {"minor", -1}}}}}) {
    auto r = h.call("hello", params);
    REQUIRE_FALSE(r);
    json err = json::parse(r.error().message());
    CHECK(err["data"]["code"] == "invalid_argument");
    CHECK_THAT(err["message"].get<std::string>(), Catch::StartsWith("hello: "));
  }
}
