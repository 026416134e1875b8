// The C API (include/fdo/fdo.h) against a fake daemon: connecting, errors.
#include "fdo/fdo.h"
#include "tools/fake_daemon.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

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

namespace {

const std::string kProgram(64, 'a');
const std::string kProfile(64, 'b');

// A fake fdod that answers hello like protocol `major` and handles the
// daemon-mode methods the C API sends.
json fake_fdod(const json& req, int major = 1) {
  const std::string method = req["method"];
  const json& p = req["params"];
  if (method == "hello")
    return {{"result",
             {{"server_version", "9.9.9"},
              {"protocol", {{"major", major}, {"minor", 4}}},
              {"capabilities", {"execute", "buffers.base64"}}}}};
  if (method == "program.register")
    return {{"result", {{"program", kProgram}, {"profile_key", kProfile}, {"echo", p}}}};
  if (method == "execute") {
    if (p["entry"] == "missing")
      return {{"error",
               {{"code", -32001},
                {"message", "no entry 'missing'"},
                {"data", {{"code", "not_found"}, {"entry", "missing"}}}}}};
    json result = {{"returns", p["entry"] == "f" ? "f64" : "i32"}, {"echo", p}};
    result["value"] = p["entry"] == "f" ? json(2.5) : json(p["args"].size());
    if (p.value("return_buffers", false)) {
      // Every buffer comes back as 4 bytes "ABCD".
      json bufs = json::array();
      for (const auto& b : p["buffers"])
        bufs.push_back({{"type", b["type"]}, {"base64", "QUJDRA=="}});
      result["buffers"] = bufs;
    }
    return {{"result", result}};
  }
  if (method == "profile.get" || method == "profile.history" || method == "echo")
    return {{"result", {{"method", method}, {"params", p}}}};
  return {{"error", {{"code", -32601}, {"message", "method not found"}}}};
}

struct Conn {
  fdo_conn* c = nullptr;
  ~Conn() { fdo_close(c); }
};

} // namespace

TEST_CASE("fdo_connect performs the handshake and keeps what it learned") {
  test::TempDir dir;
  test::FakeDaemon d(dir.file("s.sock"), [](const json& r) { return fake_fdod(r); });
  Conn conn;
  fdo_error* err = nullptr;
  REQUIRE(fdo_connect_as(dir.file("s.sock").c_str(), "unit-test", &conn.c, &err) == 0);
  CHECK(std::string(fdo_conn_server_version(conn.c)) == "9.9.9");
  CHECK(fdo_conn_protocol_minor(conn.c) == 4);
  CHECK(fdo_conn_has_capability(conn.c, "execute"));
  CHECK_FALSE(fdo_conn_has_capability(conn.c, "teleport"));
  auto reqs = d.requests();
  REQUIRE(reqs.size() == 1);
  CHECK(reqs[0]["method"] == "hello");
  CHECK(reqs[0]["params"]["protocol"] ==
        json{{"major", FDO_PROTOCOL_MAJOR}, {"minor", FDO_PROTOCOL_MINOR}});
  CHECK_THAT(reqs[0]["params"]["client"].get<std::string>(),
             Catch::StartsWith("unit-test (libfdo "));
}

TEST_CASE("fdo_connect refuses a daemon of another major protocol version") {
  test::TempDir dir;
  SECTION("the daemon refuses us") {
    test::FakeDaemon d(dir.file("s.sock"), [](const json&) -> json {
      return {{"error",
               {{"code", -32014},
                {"message", "protocol version mismatch: client speaks 1.0, this fdod speaks 2.0"},
                {"data", {{"code", "unsupported"}}}}}};
    });
    fdo_conn* conn = nullptr;
    fdo_error* err = nullptr;
    REQUIRE(fdo_connect(dir.file("s.sock").c_str(), &conn, &err) == -1);
    CHECK(conn == nullptr);
    CHECK(fdo_error_get_code(err) == FDO_ERR_UNSUPPORTED);
    CHECK(fdo_error_rpc_code(err) == -32014);
    CHECK_THAT(fdo_error_message(err), Catch::Contains("speaks 2.0"));
    CHECK(json::parse(fdo_error_data_json(err))["code"] == "unsupported");
    fdo_error_free(err);
  }
  SECTION("the daemon answers with another major version") {
    test::FakeDaemon d(dir.file("s.sock"), [](const json& r) { return fake_fdod(r, 2); });
    fdo_conn* conn = nullptr;
    fdo_error* err = nullptr;
    REQUIRE(fdo_connect(dir.file("s.sock").c_str(), &conn, &err) == -1);
    CHECK(fdo_error_get_code(err) == FDO_ERR_UNSUPPORTED);
    CHECK_THAT(fdo_error_message(err), Catch::Contains("protocol version mismatch") &&
                                           Catch::Contains("fdod 9.9.9 speaks protocol 2.4") &&
                                           Catch::Contains("speaks 1.0"));
    fdo_error_free(err);
  }
  SECTION("a daemon without the handshake") {
    test::FakeDaemon d(dir.file("s.sock"), [](const json&) -> json {
      return {{"error", {{"code", -32601}, {"message", "method not found"}}}};
    });
    fdo_conn* conn = nullptr;
    fdo_error* err = nullptr;
    REQUIRE(fdo_connect(dir.file("s.sock").c_str(), &conn, &err) == -1);
    CHECK(fdo_error_get_code(err) == FDO_ERR_UNSUPPORTED);
    CHECK(fdo_error_rpc_code(err) == -32601);
    CHECK_THAT(fdo_error_message(err), Catch::Contains("does not know the handshake"));
    fdo_error_free(err);
  }
}

TEST_CASE("register - execute - profiles: what goes on the wire and what comes back") {
  test::TempDir dir;
  test::FakeDaemon d(dir.file("s.sock"), [](const json& r) { return fake_fdod(r); });
  Conn conn;
  REQUIRE(fdo_connect(dir.file("s.sock").c_str(), &conn.c, nullptr) == 0);
  char id[FDO_KEY_SIZE], pk[FDO_KEY_SIZE];
  const char ir[] = "define i32 @f() { ret i32 1 }";
  REQUIRE(fdo_program_register(conn.c, "prog", ir, sizeof ir - 1, FDO_IR_TEXT, id, pk, nullptr) ==
          0);
  CHECK(std::string(id) == kProgram);
  CHECK(std::string(pk) == kProfile);
  const char bc[] = {'B', 'C', '\xc0', '\xde'};
  REQUIRE(fdo_program_register(conn.c, nullptr, bc, sizeof bc, FDO_IR_BITCODE, id, nullptr,
                               nullptr) == 0);

  int32_t buf[2] = {7, 8};
  fdo_buffer buffers[1] = {{FDO_ELEM_I32, buf, 2}};
  fdo_value args[4];
  args[0].type = FDO_I32;
  args[0].as.i32 = -3;
  args[1].type = FDO_I64;
  args[1].as.i64 = int64_t(1) << 40;
  args[2].type = FDO_F64;
  args[2].as.f64 = 0.5;
  args[3].type = FDO_BUFFER;
  args[3].as.buffer = 0;
  fdo_call call{"run", args, 4, buffers, 1, 0};
  fdo_value ret{};
  char* stage = nullptr;
  REQUIRE(fdo_execute(conn.c, kProgram.c_str(), &call, &ret, &stage, nullptr) == 0);
  CHECK(ret.type == FDO_I32);
  CHECK(ret.as.i32 == 4);
  REQUIRE(stage != nullptr);
  json sent = json::parse(stage)["echo"];
  fdo_string_free(stage);
  CHECK(sent["args"] == json{-3, int64_t(1) << 40, 0.5, {{"buffer", 0}}});
  CHECK(sent["buffers"][0] == json{{"type", "i32"}, {"base64", "BwAAAAgAAAA="}});
  CHECK_FALSE(sent.contains("return_buffers"));
  // Copied back: the fake daemon returns 4 bytes "ABCD" for every buffer, so
  // for an 8-byte buffer that is a size mismatch and nothing is written.
  call.flags = FDO_CALL_COPY_BACK;
  fdo_error* err = nullptr;
  REQUIRE(fdo_execute(conn.c, kProgram.c_str(), &call, &ret, nullptr, &err) == -1);
  CHECK(fdo_error_get_code(err) == FDO_ERR_CORRUPT);
  fdo_error_free(err);
  CHECK(buf[0] == 7);
  buffers[0].count = 1;
  REQUIRE(fdo_execute(conn.c, kProgram.c_str(), &call, &ret, nullptr, nullptr) == 0);
  CHECK(std::memcmp(buf, "ABCD", 4) == 0);
  CHECK(d.requests().back()["params"]["return_buffers"] == true);
  CHECK(d.requests().back()["params"]["buffer_encoding"] == "base64");

  fdo_call fcall{"f", nullptr, 0, nullptr, 0, 0};
  REQUIRE(fdo_execute(conn.c, kProgram.c_str(), &fcall, &ret, nullptr, nullptr) == 0);
  CHECK(ret.type == FDO_F64);
  CHECK(ret.as.f64 == 2.5);

  char* out = nullptr;
  REQUIRE(fdo_profile_get(conn.c, kProfile.c_str(), 3, &out, nullptr) == 0);
  CHECK(json::parse(out)["params"] == json{{"profile_key", kProfile}, {"version", 3}});
  fdo_string_free(out);
  REQUIRE(fdo_profile_history(conn.c, kProfile.c_str(), &out, nullptr) == 0);
  CHECK(json::parse(out)["method"] == "profile.history");
  fdo_string_free(out);
  REQUIRE(fdo_call_json(conn.c, "echo", R"({"x":[1,2]})", &out, nullptr) == 0);
  CHECK(json::parse(out)["params"]["x"] == json{1, 2});
  fdo_string_free(out);
}

TEST_CASE("daemon errors carry the JSON-RPC code - message and data - bad arguments lose nothing") {
  test::TempDir dir;
  test::FakeDaemon d(dir.file("s.sock"), [](const json& r) { return fake_fdod(r); });
  Conn conn;
  REQUIRE(fdo_connect(dir.file("s.sock").c_str(), &conn.c, nullptr) == 0);
  fdo_error* err = nullptr;
  fdo_call missing{"missing", nullptr, 0, nullptr, 0, 0};
  REQUIRE(fdo_execute(conn.c, kProgram.c_str(), &missing, nullptr, nullptr, &err) == -1);
  CHECK(fdo_error_get_code(err) == FDO_ERR_NOT_FOUND);
  CHECK(fdo_error_rpc_code(err) == -32001);
  CHECK(std::string(fdo_error_message(err)) == "no entry 'missing'");
  CHECK(json::parse(fdo_error_data_json(err))["entry"] == "missing");
  fdo_error_free(err);

  const std::size_t sent_before = d.requests().size();
  auto expect_invalid = [&](int rc, const char* what) {
    REQUIRE(rc == -1);
    REQUIRE(err != nullptr);
    CHECK(fdo_error_get_code(err) == FDO_ERR_INVALID_ARGUMENT);
    CHECK(fdo_error_rpc_code(err) == 0);
    CHECK_THAT(fdo_error_message(err), Catch::Contains(what));
    fdo_error_free(err);
    err = nullptr;
  };
  expect_invalid(fdo_execute(conn.c, "xyz", &missing, nullptr, nullptr, &err), "64 lowercase hex");
  fdo_value bad_arg{};
  bad_arg.type = FDO_BUFFER;
  bad_arg.as.buffer = 2;
  fdo_call out_of_range{"run", &bad_arg, 1, nullptr, 0, 0};
  expect_invalid(fdo_execute(conn.c, kProgram.c_str(), &out_of_range, nullptr, nullptr, &err),
                 "out of range");
  bad_arg.type = FDO_VOID;
  expect_invalid(fdo_execute(conn.c, kProgram.c_str(), &out_of_range, nullptr, nullptr, &err),
                 "not an argument type");
  char id[FDO_KEY_SIZE];
  expect_invalid(fdo_program_register(conn.c, nullptr, "", 0, FDO_IR_TEXT, id, nullptr, &err),
                 "empty");
  expect_invalid(fdo_program_register(conn.c, nullptr, "x", 1, static_cast<fdo_ir_format>(7), id,
                                      nullptr, &err),
                 "FDO_IR_TEXT");
  char* out = nullptr;
  expect_invalid(fdo_call_json(conn.c, "echo", "{not json", &out, &err), "not a JSON object");
  expect_invalid(fdo_profile_get(conn.c, "short", 0, &out, &err), "64 lowercase hex");
  // None of these reached the daemon, and the connection still works.
  CHECK(d.requests().size() == sent_before);
  REQUIRE(fdo_call_json(conn.c, "echo", nullptr, &out, nullptr) == 0);
  fdo_string_free(out);
}

TEST_CASE("one connection shared by threads: calls are serialised and each gets its own reply") {
  test::TempDir dir;
  test::FakeDaemon d(dir.file("s.sock"), [](const json& r) { return fake_fdod(r); });
  Conn conn;
  REQUIRE(fdo_connect(dir.file("s.sock").c_str(), &conn.c, nullptr) == 0);
  constexpr int kThreads = 8, kCalls = 40;
  std::atomic<int> wrong{0}, failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kCalls; ++i) {
        json params = {{"thread", t}, {"i", i}};
        char* out = nullptr;
        if (fdo_call_json(conn.c, "echo", params.dump().c_str(), &out, nullptr) != 0) {
          ++failed;
          continue;
        }
        if (json::parse(out)["params"] != params) ++wrong;
        fdo_string_free(out);
      }
    });
  for (auto& th : threads)
    th.join();
  CHECK(failed == 0);
  CHECK(wrong == 0);
  CHECK(d.requests().size() == 1 + kThreads * kCalls);
}

TEST_CASE("a reply later than the connection's timeout fails the call and closes it") {
  test::TempDir dir;
  test::FakeDaemon d(dir.file("s.sock"), [](const json& r) {
    if (r["method"] == "slow") std::this_thread::sleep_for(std::chrono::milliseconds(400));
    return fake_fdod(r);
  });
  Conn conn;
  REQUIRE(fdo_connect(dir.file("s.sock").c_str(), &conn.c, nullptr) == 0);
  fdo_error* err = nullptr;
  REQUIRE(fdo_conn_set_timeout_ms(conn.c, 0, &err) == -1);
  CHECK(fdo_error_get_code(err) == FDO_ERR_INVALID_ARGUMENT);
  fdo_error_free(err);
  err = nullptr;
  REQUIRE(fdo_conn_set_timeout_ms(conn.c, 50, nullptr) == 0);
  char* out = nullptr;
  REQUIRE(fdo_call_json(conn.c, "slow", nullptr, &out, &err) == -1);
  CHECK(fdo_error_get_code(err) == FDO_ERR_TIMEOUT);
  CHECK(fdo_error_rpc_code(err) == 0);
  fdo_error_free(err);
  err = nullptr;
  REQUIRE(fdo_call_json(conn.c, "echo", nullptr, &out, &err) == -1);
  CHECK(fdo_error_get_code(err) == FDO_ERR_IO);
  CHECK_THAT(fdo_error_message(err), Catch::Contains("broke on an earlier request"));
  fdo_error_free(err);
}

TEST_CASE("fdo_execute_gpu: the launch on the wire, buffers inline, bad launches refused") {
  test::TempDir dir;
  test::FakeDaemon d(dir.file("s.sock"), [](const json& r) { return fake_fdod(r); });
  Conn conn;
  REQUIRE(fdo_connect(dir.file("s.sock").c_str(), &conn.c, nullptr) == 0);
  int32_t buf[1] = {7};
  fdo_buffer buffers[1] = {{FDO_ELEM_I32, buf, 1}};
  fdo_value args[2];
  args[0].type = FDO_I32;
  args[0].as.i32 = 1;
  args[1].type = FDO_BUFFER;
  args[1].as.buffer = 0;
  fdo_call call{"saxpy", args, 2, buffers, 1, FDO_CALL_COPY_BACK};
  fdo_gpu_launch launch{{4, 0, 0}, {128, 2, 0}, 64, 3, 0};
  char* stage = nullptr;
  REQUIRE(fdo_execute_gpu(conn.c, kProgram.c_str(), &call, &launch, &stage, nullptr) == 0);
  REQUIRE(stage != nullptr);
  json sent = json::parse(stage)["echo"];
  fdo_string_free(stage);
  CHECK(sent["grid"] == json{4, 1, 1});
  CHECK(sent["block"] == json{128, 2, 1});
  CHECK(sent["shared_bytes"] == 64);
  CHECK(sent["repeats"] == 3);
  CHECK_FALSE(sent.contains("tune"));
  CHECK(sent["buffers"][0].contains("base64"));
  CHECK(std::memcmp(buf, "ABCD", 4) == 0); // copied back

  fdo_gpu_launch tuned{{0, 0, 0}, {0, 0, 0}, 0, 0, 1 << 20};
  REQUIRE(fdo_execute_gpu(conn.c, kProgram.c_str(), &call, &tuned, nullptr, nullptr) == 0);
  const json p = d.requests().back()["params"];
  CHECK(p["tune"] == json{{"items", 1 << 20}});
  CHECK_FALSE(p.contains("grid"));
  CHECK(p["repeats"] == 1);

  const std::size_t before = d.requests().size();
  fdo_error* err = nullptr;
  fdo_gpu_launch no_grid{{0, 0, 0}, {128, 0, 0}, 0, 0, 0};
  CHECK(fdo_execute_gpu(conn.c, kProgram.c_str(), &call, &no_grid, nullptr, &err) == -1);
  CHECK(fdo_error_get_code(err) == FDO_ERR_INVALID_ARGUMENT);
  CHECK_THAT(fdo_error_message(err), Catch::Contains("grid[0] is 0"));
  fdo_error_free(err);
  err = nullptr;
  call.flags = FDO_CALL_MEMFD;
  CHECK(fdo_execute_gpu(conn.c, kProgram.c_str(), &call, &launch, nullptr, &err) == -1);
  CHECK_THAT(fdo_error_message(err), Catch::Contains("no memfd buffers for GPU kernels"));
  fdo_error_free(err);
  err = nullptr;
  CHECK(fdo_execute_gpu(conn.c, kProgram.c_str(), &call, nullptr, nullptr, &err) == -1);
  CHECK(fdo_error_get_code(err) == FDO_ERR_INVALID_ARGUMENT);
  fdo_error_free(err);
  CHECK(d.requests().size() == before); // nothing sent for a refused call
}
