#include "fake_daemon.h"
#include "fdo/ctl/call_args.h"
#include "fdo/util/base64.h"

#include <catch2/catch.hpp>
#include <fstream>

using namespace fdo::ctl;
using nlohmann::json;

TEST_CASE("buffer specs: element lists") {
  auto b = parse_buffer_spec("i64:5,-3,9,0x10");
  REQUIRE(b);
  CHECK(*b == json{{"type", "i64"}, {"data", {5, -3, 9, 16}}});
  auto f = parse_buffer_spec("f64:0.5,1e3,-2");
  REQUIRE(f);
  CHECK((*f)["data"] == json{0.5, 1000.0, -2.0});
  auto empty = parse_buffer_spec("u8:");
  REQUIRE(empty);
  CHECK((*empty)["data"].empty());
  auto u64 = parse_buffer_spec("u64:18446744073709551615");
  REQUIRE(u64);
  CHECK((*u64)["data"][0].get<std::uint64_t>() == UINT64_MAX);
}

TEST_CASE("buffer specs: zeros - text and file") {
  auto z = parse_buffer_spec("f64:zeros=4");
  REQUIRE(z);
  CHECK(*z == json{{"type", "f64"}, {"length", 4}});
  auto t = parse_buffer_spec("u8:text=a,b:c");
  REQUIRE(t);
  CHECK((*t)["type"] == "u8");
  CHECK(*fdo::base64_decode((*t)["base64"].get<std::string>()) == "a,b:c");

  test::TempDir dir;
  std::ofstream(dir.file("data.bin"), std::ios::binary)
      << std::string("\x01\x00\x00\x00\x02\x00\x00\x00", 8);
  auto file = parse_buffer_spec("i32:file=" + dir.file("data.bin"));
  REQUIRE(file);
  CHECK(fdo::base64_decode((*file)["base64"].get<std::string>())->size() == 8);
  std::ofstream(dir.file("odd.bin"), std::ios::binary)
      << std::string("\x01\x02\x03\x04\x05\x06", 6);
  auto odd = parse_buffer_spec("i64:file=" + dir.file("odd.bin"));
  REQUIRE_FALSE(odd);
  CHECK_THAT(odd.error().message(), Catch::Contains("not a whole number of 8-byte i64"));
}

TEST_CASE("buffer specs: errors name what is wrong") {
  auto no_colon = parse_buffer_spec("i64");
  REQUIRE_FALSE(no_colon);
  CHECK(no_colon.error().code() == fdo::Errc::invalid_argument);
  auto bad_type = parse_buffer_spec("int:1");
  REQUIRE_FALSE(bad_type);
  CHECK_THAT(bad_type.error().message(), Catch::Contains("unknown element type 'int'"));
  auto range = parse_buffer_spec("u8:1,256");
  REQUIRE_FALSE(range);
  CHECK_THAT(range.error().message(), Catch::Contains("element 1"));
  auto negative = parse_buffer_spec("u32:-1");
  REQUIRE_FALSE(negative);
  CHECK_THAT(negative.error().message(), Catch::Contains("unsigned"));
  auto i8 = parse_buffer_spec("i8:127,-128,128");
  REQUIRE_FALSE(i8);
  auto word = parse_buffer_spec("i64:1,two");
  REQUIRE_FALSE(word);
  CHECK_THAT(word.error().message(), Catch::Contains("'two' is not an integer"));
  auto text_wide = parse_buffer_spec("i32:text=abc");
  REQUIRE_FALSE(text_wide);
  auto missing = parse_buffer_spec("u8:file=/nonexistent/fdoctl");
  REQUIRE_FALSE(missing);
  CHECK_THAT(missing.error().message(), Catch::Contains("/nonexistent/fdoctl"));
}

TEST_CASE("args parse per parameter type") {
  CHECK(*parse_arg("42", "i64", 0, 0) == json(42));
  CHECK(*parse_arg("-42", "i64", 0, 0) == json(-42));
  CHECK(*parse_arg("0xff", "i32", 0, 0) == json(255));
  CHECK(*parse_arg("4294967295", "i32", 0, 0) == json(4294967295u)); // unsigned range accepted
  CHECK(*parse_arg("-2147483648", "i32", 0, 0) == json(-2147483648LL));
  CHECK(*parse_arg("true", "i1", 0, 0) == json(true));
  CHECK(*parse_arg("1", "i1", 0, 0) == json(1));
  CHECK(*parse_arg("2.5", "double", 0, 0) == json(2.5));
  CHECK(*parse_arg("-1e-3", "float", 0, 0) == json(-1e-3));
  CHECK(*parse_arg("@1", "ptr", 0, 2) == json{{"buffer", 1}});
  // i24 rounds up to the daemon's 32-bit slot.
  CHECK(parse_arg("16777216", "i24", 0, 0));
}

TEST_CASE("args out of range or of the wrong kind are rejected") {
  CHECK_FALSE(parse_arg("256", "i8", 0, 0));
  CHECK_FALSE(parse_arg("-129", "i8", 0, 0));
  CHECK_FALSE(parse_arg("4294967296", "i32", 0, 0));
  CHECK_FALSE(parse_arg("18446744073709551616", "i64", 0, 0));
  CHECK_FALSE(parse_arg("2", "i1", 0, 0));
  CHECK_FALSE(parse_arg("1.5", "i64", 0, 0));
  CHECK_FALSE(parse_arg("abc", "double", 0, 0));
  CHECK_FALSE(parse_arg("inf", "double", 0, 0));
  auto ptr = parse_arg("5", "ptr", 3, 1);
  REQUIRE_FALSE(ptr);
  CHECK_THAT(ptr.error().message(), Catch::Contains("--arg 3 (ptr)") && Catch::Contains("@N"));
  auto out_of_range = parse_arg("@1", "ptr", 0, 1);
  REQUIRE_FALSE(out_of_range);
  CHECK_THAT(out_of_range.error().message(), Catch::Contains("1 --buffer value(s)"));
  auto weird = parse_arg("1", "<2 x i32>", 0, 0);
  REQUIRE_FALSE(weird);
  CHECK(weird.error().code() == fdo::Errc::unsupported);
}

TEST_CASE("build_call matches args to parameters and buffers to pointers") {
  auto call = build_call("sort_i64", {"ptr", "i64"}, {"@0", "8"}, {"i64:5,-3,9,1,1,0,7,2"});
  REQUIRE(call);
  CHECK(call->args == json{{{"buffer", 0}}, 8});
  CHECK(call->buffers.size() == 1);
  CHECK(call->buffers[0]["type"] == "i64");

  auto count = build_call("sort_i64", {"ptr", "i64"}, {"@0"}, {"i64:1"});
  REQUIRE_FALSE(count);
  CHECK_THAT(count.error().message(), Catch::Contains("sort_i64(ptr, i64) takes 2 argument(s); 1"));

  auto unused = build_call("f", {"i64"}, {"1"}, {"u8:1"});
  REQUIRE_FALSE(unused);
  CHECK_THAT(unused.error().message(), Catch::Contains("not passed to any pointer parameter"));

  auto none = build_call("interp_run", {}, {}, {});
  REQUIRE(none);
  CHECK(none->args.empty());
}
