#include "fdo/daemon/abi.h"

#include <bit>
#include <catch2/catch.hpp>
#include <cstring>

using namespace fdo;
using namespace fdo::daemon;
using nlohmann::json;

TEST_CASE("scalar arguments become thunk slots", "[daemon][abi]") {
  Signature sig{"f",
                ScalarType::i32,
                {ScalarType::i32, ScalarType::i64, ScalarType::f32, ScalarType::f64, ScalarType::i8,
                 ScalarType::i1}};
  auto call = prepare_call(sig, json::parse("[-1, 9000000000, 1.5, -2.25, 255, true]"), nullptr);
  REQUIRE(call);
  REQUIRE(call->slots.size() == 6);
  CHECK(call->slots[0] == 0xffffffffULL);
  CHECK(call->slots[1] == 9000000000ULL);
  CHECK(call->slots[2] == std::bit_cast<std::uint32_t>(1.5f));
  CHECK(call->slots[3] == std::bit_cast<std::uint64_t>(-2.25));
  CHECK(call->slots[4] == 255);
  CHECK(call->slots[5] == 1);
}

TEST_CASE("bad arguments are named", "[daemon][abi]") {
  Signature sig{"g", ScalarType::void_, {ScalarType::i8, ScalarType::ptr}};
  auto msg = [&](const char* args, const char* buffers = "null") {
    auto r = prepare_call(sig, json::parse(args), json::parse(buffers));
    REQUIRE_FALSE(r);
    CHECK(r.error().code() != Errc::internal);
    return r.error().message();
  };
  CHECK(msg("[1]").find("takes 2 argument(s), got 1") != std::string::npos);
  CHECK(msg("[300, {\"buffer\":0}]", "[{\"type\":\"u8\",\"length\":1}]").find("args[0]") !=
        std::string::npos);
  CHECK(msg("[\"x\", {\"buffer\":0}]", "[{\"type\":\"u8\",\"length\":1}]").find("integer") !=
        std::string::npos);
  CHECK(msg("[1, 5]").find("pointer parameter") != std::string::npos);
  CHECK(msg("[1, {\"buffer\":3}]").find("out of range") != std::string::npos);
  CHECK(msg("[1, {\"buffer\":0}]", "[{\"type\":\"q8\",\"length\":1}]").find("q8") !=
        std::string::npos);
  CHECK(msg("[1, {\"buffer\":0}]", "[{\"type\":\"u8\",\"data\":[1],\"length\":1}]")
            .find("exactly one") != std::string::npos);
  CHECK(msg("[1, {\"buffer\":0}]", "[{\"type\":\"u32\",\"data\":[-1]}]").find("unsigned") !=
        std::string::npos);
  CHECK(
      msg("[1, {\"buffer\":0}]", "[{\"type\":\"u16\",\"base64\":\"AAAA\"}]").find("whole number") !=
      std::string::npos);
}

TEST_CASE("buffers are encoded and size-limited", "[daemon][abi]") {
  Signature sig{"h", ScalarType::i64, {ScalarType::ptr, ScalarType::ptr, ScalarType::ptr}};
  json buffers = json::parse(R"([{"type":"i64","data":[1,-2,3]},
                                 {"type":"f64","length":2},
                                 {"type":"u8","base64":"AQID"}])");
  auto call =
      prepare_call(sig, json::parse(R"([{"buffer":0},{"buffer":1},{"buffer":2}])"), buffers);
  REQUIRE(call);
  REQUIRE(call->buffers.size() == 3);
  CHECK(call->buffer_of_param == std::vector<int>{0, 1, 2});
  std::int64_t second;
  std::memcpy(&second, call->buffers[0].bytes.data() + 8, 8);
  CHECK(second == -2);
  CHECK(call->buffers[1].bytes == std::string(16, '\0'));
  CHECK(call->buffers[2].bytes == std::string("\x01\x02\x03"));
  CHECK(buffer_to_json(call->buffers[0], BufferEncoding::array)["data"] == json::parse("[1,-2,3]"));
  CHECK(buffer_to_json(call->buffers[2], BufferEncoding::base64)["base64"] == "AQID");

  CallLimits tiny{16};
  auto big = prepare_call(sig, json::parse(R"([{"buffer":0},{"buffer":0},{"buffer":0}])"),
                          json::parse(R"([{"type":"i64","length":3}])"), tiny);
  REQUIRE_FALSE(big);
  CHECK(big.error().code() == Errc::resource_exhausted);
}

TEST_CASE("return slots decode by type", "[daemon][abi]") {
  CHECK(decode_return(ScalarType::i32, 0xffffffffULL) == -1);
  CHECK(decode_return(ScalarType::i64, 42) == 42);
  CHECK(decode_return(ScalarType::i8, 0x1ff) == -1);
  CHECK(decode_return(ScalarType::f64, std::bit_cast<std::uint64_t>(2.5)) == 2.5);
  CHECK(decode_return(ScalarType::f32, std::bit_cast<std::uint32_t>(0.5f)) == 0.5);
  CHECK(decode_return(ScalarType::void_, 7).is_null());
  CHECK(decode_return(ScalarType::i1, 3) == true);
  CHECK(parse_scalar_type("double").value() == ScalarType::f64);
  CHECK_FALSE(parse_scalar_type("i128"));
}

TEST_CASE("memfd buffers take the request's attached bytes and are checked", "[daemon][abi]") {
  Signature sig{"m", ScalarType::void_, {ScalarType::ptr, ScalarType::ptr}};
  const json args = json::parse(R"([{"buffer":0},{"buffer":1}])");
  const std::vector<std::string> attached = {std::string(16, '\x01'), std::string(3, '\x02')};
  auto call = prepare_call(
      sig, args, json::parse(R"([{"type":"f64","memfd":0,"length":2},{"type":"u8","memfd":1}])"),
      {}, attached);
  REQUIRE(call);
  CHECK(call->buffers[0].bytes == attached[0]);
  CHECK(call->buffers[1].bytes == attached[1]);

  auto error = [&](const char* buffers, CallLimits limits = {}) {
    auto r = prepare_call(sig, args, json::parse(buffers), limits, attached);
    REQUIRE_FALSE(r);
    return r.error();
  };
  auto e = error(R"([{"type":"f64","memfd":0,"length":3},{"type":"u8","memfd":1}])");
  CHECK(e.code() == Errc::invalid_argument);
  CHECK_THAT(e.message(), Catch::Contains("length 3 but the memfd holds 2 f64 elements"));
  e = error(R"([{"type":"f64","memfd":1},{"type":"u8","memfd":0}])");
  CHECK_THAT(e.message(), Catch::Contains("3 bytes is not a whole number of f64 elements"));
  e = error(R"([{"type":"u8","memfd":2},{"type":"u8","memfd":1}])");
  CHECK_THAT(e.message(), Catch::Contains("descriptor 2 out of range (2 came with the request)"));
  e = error(R"([{"type":"u8","memfd":-1},{"type":"u8","memfd":1}])");
  CHECK_THAT(e.message(), Catch::Contains("buffers[0].memfd: expected the index"));
  e = error(R"([{"type":"u8","memfd":1},{"type":"u8","memfd":1}])");
  CHECK_THAT(e.message(), Catch::Contains("descriptor 0 of the 2 sent with the request is named "
                                          "by no buffer"));
  e = error(R"([{"type":"u8","memfd":0,"data":[1]},{"type":"u8","memfd":1}])");
  CHECK_THAT(e.message(), Catch::Contains("give exactly one of"));
  e = error(R"([{"type":"u8","memfd":0},{"type":"u8","memfd":1}])", CallLimits{18});
  CHECK(e.code() == Errc::resource_exhausted);
  // Without attached bytes, "memfd" names nothing.
  auto none =
      prepare_call(sig, args, json::parse(R"([{"type":"u8","memfd":0},{"type":"u8","length":1}])"));
  REQUIRE_FALSE(none);
  CHECK_THAT(none.error().message(), Catch::Contains("out of range (0 came"));
}
