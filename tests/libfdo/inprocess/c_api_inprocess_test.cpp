// The C API's in-process functions (fdo.h, "In-process execution") on their
// error paths, against a fake daemon: bad arguments, a daemon error, a lease
// reply without its object fd (the lease is given back). The working path
// runs against a real fdod in tests/e2e/test_inprocess.py.
#include "fdo/fdo.h"
#include "tools/fake_daemon.h"

#include <catch2/catch.hpp>
#include <string>

using nlohmann::json;
namespace test = fdo::ctl::test;

namespace {
fdo_error_code code_of(fdo_error* err) {
  REQUIRE(err != nullptr);
  fdo_error_code c = fdo_error_get_code(err);
  fdo_error_free(err);
  return c;
}
} // namespace

TEST_CASE("fdo_inproc_*: NULL and empty arguments are refused without a call", "[inprocess]") {
  fdo_inproc* h = nullptr;
  fdo_error* err = nullptr;
  const char* entries[] = {"f"};
  CHECK(fdo_inproc_open(nullptr, "p", entries, 1, nullptr, &h, &err) == -1);
  CHECK(code_of(err) == FDO_ERR_INVALID_ARGUMENT);
  err = nullptr;
  CHECK(fdo_inproc_flush(nullptr, nullptr, &err) == -1);
  CHECK(code_of(err) == FDO_ERR_INVALID_ARGUMENT);
  err = nullptr;
  std::size_t index = 0;
  CHECK(fdo_inproc_entry(nullptr, "f", &index, &err) == -1);
  CHECK(code_of(err) == FDO_ERR_INVALID_ARGUMENT);
  err = nullptr;
  fdo_inproc_hold* hold = nullptr;
  CHECK(fdo_inproc_hold_open(nullptr, &hold, &err) == -1);
  CHECK(code_of(err) == FDO_ERR_INVALID_ARGUMENT);
  std::uint64_t arg = 1, ret = 0;
  CHECK(fdo_inproc_call(nullptr, 0, &arg, &ret) == -1);
  CHECK(fdo_inproc_hold_call(nullptr, 0, &arg, &ret) == -1);
  CHECK(fdo_inproc_generation(nullptr) == 0);
  CHECK(fdo_inproc_hold_generation(nullptr) == 0);
  CHECK(fdo_inproc_mode(nullptr) == -1);
  CHECK(fdo_inproc_profile_version(nullptr) == 0);
  CHECK(fdo_inproc_sampling_json(nullptr) == nullptr);
  CHECK(fdo_inproc_variant_json(nullptr) == nullptr);
  fdo_inproc_hold_close(nullptr);
  // Native entries.
  err = nullptr;
  fdo_inproc_thread* thread = nullptr;
  CHECK(fdo_inproc_thread_open(nullptr, &thread, &err) == -1);
  CHECK(code_of(err) == FDO_ERR_INVALID_ARGUMENT);
  CHECK(thread == nullptr);
  err = nullptr;
  fdo_inproc_lag lag{};
  CHECK(fdo_inproc_lagging(nullptr, &lag, &err) == -1);
  CHECK(code_of(err) == FDO_ERR_INVALID_ARGUMENT);
  CHECK(fdo_inproc_thread_entry(nullptr, 0) == nullptr);
  CHECK(fdo_inproc_thread_next(nullptr, 0) == nullptr);
  CHECK(fdo_inproc_thread_quiescent(nullptr) == -1);
  fdo_inproc_thread_count(nullptr, 0, 1, 0, 0);
  CHECK(fdo_inproc_thread_generation(nullptr) == 0);
  CHECK(fdo_inproc_thread_mode(nullptr) == -1);
  CHECK(fdo_inproc_thread_profile_version(nullptr) == 0);
  fdo_inproc_thread_close(nullptr);
  fdo_inproc_close(nullptr);
}

TEST_CASE("fdo_inproc_open: the daemon's refusal and a reply without the object", "[inprocess]") {
  test::TempDir dir;
  const std::string sock = dir.file("fdod.sock");
  test::FakeDaemon daemon(sock, [](const json& req) -> json {
    const std::string method = req["method"];
    if (method == "hello") // fdo_connect's handshake
      return {{"result",
               {{"server_version", "9.9.9"},
                {"protocol", {{"major", 1}, {"minor", 0}}},
                {"capabilities", json::array()}}}};
    if (method == "program.lease" && req["params"]["program"] == "unknown")
      return {
          {"error",
           {{"code", -32001}, {"message", "no such program"}, {"data", {{"code", "not_found"}}}}}};
    if (method == "program.lease")
      return {{"result", {{"lease", 9}, {"unchanged", false}, {"storage_key", "k"}, {"fds", 1}}}};
    return {{"result", {{"lease", 9}, {"released", true}}}};
  });
  fdo_conn* conn = nullptr;
  fdo_error* err = nullptr;
  REQUIRE(fdo_connect(sock.c_str(), &conn, &err) == 0);
  const char* entries[] = {"f"};
  fdo_inproc* h = nullptr;
  CHECK(fdo_inproc_open(conn, "p", entries, 0, nullptr, &h, &err) == -1);
  CHECK(code_of(err) == FDO_ERR_INVALID_ARGUMENT);
  err = nullptr;
  fdo_inproc_options bad{static_cast<fdo_inproc_flushing>(7), 0, 0};
  CHECK(fdo_inproc_open(conn, "p", entries, 1, &bad, &h, &err) == -1);
  CHECK(code_of(err) == FDO_ERR_INVALID_ARGUMENT);
  err = nullptr;

  CHECK(fdo_inproc_open(conn, "unknown", entries, 1, nullptr, &h, &err) == -1);
  REQUIRE(err != nullptr);
  CHECK(fdo_error_get_code(err) == FDO_ERR_NOT_FOUND);
  CHECK_THAT(fdo_error_message(err), Catch::Contains("no such program"));
  fdo_error_free(err);
  err = nullptr;

  // The daemon claims a lease but sends no descriptor: corrupt, and the
  // lease it named is released again.
  CHECK(fdo_inproc_open(conn, "p", entries, 1, nullptr, &h, &err) == -1);
  REQUIRE(err != nullptr);
  CHECK(fdo_error_get_code(err) == FDO_ERR_CORRUPT);
  CHECK_THAT(fdo_error_message(err), Catch::Contains("file descriptors"));
  fdo_error_free(err);
  CHECK(h == nullptr);
  bool released = false;
  for (const json& r : daemon.requests())
    released =
        released || (r.value("method", "") == "program.release" && r["params"]["lease"] == 9);
  CHECK(released);
  fdo_close(conn);
}
