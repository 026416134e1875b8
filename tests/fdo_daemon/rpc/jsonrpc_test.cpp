#include "fdo/daemon/jsonrpc.h"

#include <catch2/catch.hpp>
#include <limits>
#include <stdexcept>
#include <unistd.h>

using namespace fdo::daemon;
using fdo::Errc;
using fdo::Expected;
using nlohmann::json;

namespace {

void add_methods(Dispatcher& d) {
  d.add("echo", [](const json& p, const CallContext&) -> Expected<json> { return p; });
  d.add("whoami", [](const json&, const CallContext& c) -> Expected<json> {
    return json{{"uid", c.uid}, {"gid", c.gid}, {"pid", c.pid}};
  });
  d.add("fail", [](const json& p, const CallContext&) -> Expected<json> {
    return fdo::make_error(*rpc::parse_errc(p.at("code").get<std::string>()), "it failed");
  });
  d.add("throw", [](const json&, const CallContext&) -> Expected<json> {
    throw std::runtime_error("kaboom");
  });
  d.add("typed", [](const json& p, const CallContext&) -> Expected<json> {
    FDO_TRY(std::string name, require_param<std::string>(p, "name"));
    FDO_TRY(std::int64_t n, optional_param<std::int64_t>(p, "n", -1));
    FDO_TRY(bool flag, optional_param<bool>(p, "flag", false));
    FDO_TRY(double x, optional_param<double>(p, "x", 0.5));
    return json{{"name", name}, {"n", n}, {"flag", flag}, {"x", x}};
  });
}

json respond(const Dispatcher& d, std::string_view line, CallContext ctx = {}) {
  auto r = d.handle_line(line, ctx);
  REQUIRE(r.has_value());
  json j = json::parse(*r);
  REQUIRE(j.at("jsonrpc") == "2.0");
  REQUIRE(j.contains("id"));
  REQUIRE(j.contains("result") != j.contains("error"));
  return j;
}

int code_of(const json& resp) {
  return resp.at("error").at("code").get<int>();
}
std::string message_of(const json& resp) {
  return resp.at("error").at("message").get<std::string>();
}
std::string data_code_of(const json& resp) {
  return resp.at("error").at("data").at("code").get<std::string>();
}

} // namespace

TEST_CASE("jsonrpc: a normal call returns the result with the id echoed", "[jsonrpc]") {
  Dispatcher d;
  add_methods(d);
  SECTION("number id") {
    json r = respond(d, R"({"jsonrpc":"2.0","id":7,"method":"echo","params":{"a":[1,2]}})");
    REQUIRE(r["id"] == 7);
    REQUIRE(r["result"] == json{{"a", {1, 2}}});
  }
  SECTION("string id") {
    json r = respond(d, R"({"jsonrpc":"2.0","id":"req-1","method":"echo","params":[1,"x"]})");
    REQUIRE(r["id"] == "req-1");
    REQUIRE(r["result"] == json::array({1, "x"}));
  }
  SECTION("null id is a request, not a notification") {
    json r = respond(d, R"({"jsonrpc":"2.0","id":null,"method":"echo","params":{}})");
    REQUIRE(r["id"].is_null());
    REQUIRE(r.contains("result"));
  }
  SECTION("large and fractional number ids are echoed unchanged") {
    json r = respond(d, R"({"jsonrpc":"2.0","id":18446744073709551615,"method":"echo"})");
    REQUIRE(r["id"].get<std::uint64_t>() == 18446744073709551615ull);
    r = respond(d, R"({"jsonrpc":"2.0","id":-2.5,"method":"echo"})");
    REQUIRE(r["id"].get<double>() == -2.5);
  }
  SECTION("absent params reach the handler as an empty object") {
    json r = respond(d, R"({"jsonrpc":"2.0","id":1,"method":"echo"})");
    REQUIRE(r["result"] == json::object());
  }
  SECTION("the call context reaches the handler") {
    CallContext ctx;
    ctx.uid = 1234;
    ctx.gid = 99;
    ctx.pid = 4321;
    json r = respond(d, R"({"jsonrpc":"2.0","id":1,"method":"whoami"})", ctx);
    REQUIRE(r["result"] == json{{"uid", 1234}, {"gid", 99}, {"pid", 4321}});
  }
}

TEST_CASE("jsonrpc: notifications get no response", "[jsonrpc]") {
  Dispatcher d;
  add_methods(d);
  REQUIRE_FALSE(d.handle_line(R"({"jsonrpc":"2.0","method":"echo","params":{}})", {}));
  REQUIRE_FALSE(d.handle_line(R"({"jsonrpc":"2.0","method":"no.such"})", {}));
  REQUIRE_FALSE(d.handle_line(R"({"jsonrpc":"2.0","method":"throw"})", {}));
  REQUIRE_FALSE(d.handle_line(R"({"jsonrpc":"2.0","method":"echo","params":3})", {}));
}

TEST_CASE("jsonrpc: -32700 for malformed JSON", "[jsonrpc]") {
  Dispatcher d;
  add_methods(d);
  for (const char* bad : {"{", "{\"jsonrpc\":\"2.0\",", "nonsense", "{\"a\":1}}", "\"unterminated",
                          "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"echo\"} trailing"}) {
    INFO(bad);
    json r = respond(d, bad);
    REQUIRE(code_of(r) == rpc::parse_error);
    REQUIRE(r["id"].is_null());
    REQUIRE(data_code_of(r) == "parse");
    REQUIRE(message_of(r).rfind("parse error: ", 0) == 0);
    REQUIRE(message_of(r).find("json.exception") == std::string::npos);
  }
  // Invalid UTF-8 in a string.
  json r = respond(d, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ec\xff\"}");
  REQUIRE(code_of(r) == rpc::parse_error);
}

TEST_CASE("jsonrpc: -32600 for requests that are not valid JSON-RPC", "[jsonrpc]") {
  Dispatcher d;
  add_methods(d);
  struct Case {
    const char* line;
    const char* needle;
    json id;
  };
  const Case cases[] = {
      {R"(42)", "expected a JSON object, got number", nullptr},
      {R"("text")", "expected a JSON object, got string", nullptr},
      {R"(null)", "expected a JSON object, got null", nullptr},
      {R"({"id":1,"method":"echo"})", "\"jsonrpc\" must be \"2.0\"", 1},
      {R"({"jsonrpc":"1.0","id":1,"method":"echo"})", "\"jsonrpc\" must be \"2.0\"", 1},
      {R"({"jsonrpc":2.0,"id":"a","method":"echo"})", "\"jsonrpc\" must be \"2.0\"", "a"},
      {R"({"jsonrpc":"2.0","id":1})", "missing \"method\"", 1},
      {R"({"jsonrpc":"2.0","id":1,"method":5})", "\"method\" must be a string, got number", 1},
      {R"({"jsonrpc":"2.0","id":{"x":1},"method":"echo"})", "\"id\" must be a string", nullptr},
      {R"({"jsonrpc":"2.0","id":[1],"method":"echo"})", "\"id\" must be a string", nullptr},
      {R"({"jsonrpc":"2.0","id":true,"method":"echo"})", "\"id\" must be a string", nullptr},
      {R"([{"jsonrpc":"2.0","id":1,"method":"echo"}])", "batch requests are not supported",
       nullptr},
      {R"([])", "batch requests are not supported", nullptr},
  };
  for (const Case& c : cases) {
    INFO(c.line);
    json r = respond(d, c.line);
    REQUIRE(code_of(r) == rpc::invalid_request);
    REQUIRE(r["id"] == c.id);
    REQUIRE(message_of(r).find(c.needle) != std::string::npos);
  }
}

TEST_CASE("jsonrpc: deeply nested requests are refused before parsing", "[jsonrpc]") {
  Dispatcher d;
  add_methods(d);
  std::string deep = R"({"jsonrpc":"2.0","id":1,"method":"echo","params":)";
  deep += std::string(100000, '[') + std::string(100000, ']') + "}";
  json r = respond(d, deep);
  REQUIRE(code_of(r) == rpc::invalid_request);
  REQUIRE(message_of(r).find("nests deeper") != std::string::npos);
  // Brackets inside strings do not count.
  std::string text = R"({"jsonrpc":"2.0","id":1,"method":"echo","params":{"s":")" +
                     std::string(1000, '[') + R"(\"{"}})";
  r = respond(d, text);
  REQUIRE(r.contains("result"));
  REQUIRE(r["result"]["s"].get<std::string>().size() == 1002);
}

TEST_CASE("jsonrpc: -32601 names the unknown method", "[jsonrpc]") {
  Dispatcher d;
  add_methods(d);
  json r = respond(d, R"({"jsonrpc":"2.0","id":"x","method":"profile.nope"})");
  REQUIRE(code_of(r) == rpc::method_not_found);
  REQUIRE(r["id"] == "x");
  REQUIRE(message_of(r).find("profile.nope") != std::string::npos);
  REQUIRE(r["error"]["data"]["method"] == "profile.nope");
  REQUIRE(data_code_of(r) == "not_found");
}

TEST_CASE("jsonrpc: ids come back as the same value, or the request is refused", "[jsonrpc][ids]") {
  Dispatcher d;
  add_methods(d);
  // The extremes of 64 bits come back as the same integers.
  json r = respond(d, R"({"jsonrpc":"2.0","id":-9223372036854775808,"method":"echo"})");
  CHECK(r["id"].get<std::int64_t>() == std::numeric_limits<std::int64_t>::min());
  auto line = d.handle_line(R"({"jsonrpc":"2.0","id":18446744073709551615,"method":"echo"})", {});
  REQUIRE(line);
  CHECK(line->find(R"("id":18446744073709551615)") != std::string::npos);
  // 2^100 and -2^64: integers beyond 64 bits are refused, not echoed as floats.
  for (const char* id : {"1267650600228229401496703205376", "-18446744073709551616", "1e300"}) {
    r = respond(d, std::string(R"({"jsonrpc":"2.0","id":)") + id + R"(,"method":"echo"})");
    INFO(id);
    CHECK(code_of(r) == rpc::invalid_request);
    CHECK(r["id"].is_null());
    CHECK(message_of(r).find("64 bits") != std::string::npos);
  }
  // A long string id is an id: echoed whole.
  const std::string long_id(100000, 'i');
  r = respond(d, R"({"jsonrpc":"2.0","id":")" + long_id + R"(","method":"echo"})");
  CHECK(r["id"] == long_id);
}

TEST_CASE("jsonrpc: error replies quote client input cut to a documented length",
          "[jsonrpc][echo]") {
  Dispatcher d;
  add_methods(d);
  const std::string method(1 << 20, 'm');
  auto line = d.handle_line(R"({"jsonrpc":"2.0","id":1,"method":")" + method + R"("})", {});
  REQUIRE(line);
  CHECK(line->size() < 2 * rpc::echo_max_bytes + 512);
  json r = json::parse(*line);
  CHECK(code_of(r) == rpc::method_not_found);
  const std::string quoted = r["error"]["data"]["method"];
  CHECK(quoted.starts_with(std::string(rpc::echo_max_bytes, 'm') + "..."));
  CHECK(quoted.find(std::to_string((1 << 20) - rpc::echo_max_bytes) + " more bytes") !=
        std::string::npos);

  // A handler's message is cut too, and never inside a UTF-8 character.
  d.add("long", [](const json&, const CallContext&) -> Expected<json> {
    std::string text;
    for (int i = 0; i < 20000; ++i)
      text += "\xc3\xa9"; // é
    return fdo::make_error(Errc::invalid_argument, text);
  });
  r = respond(d, R"({"jsonrpc":"2.0","id":2,"method":"long"})");
  const std::string msg = message_of(r);
  CHECK(msg.size() < rpc::error_message_max_bytes + 64);
  CHECK(msg.find("more bytes") != std::string::npos);
  CHECK(msg.substr(0, 2) == "\xc3\xa9");
  CHECK(rpc::cut("ab\xc3\xa9", 3) == "ab... (2 more bytes)");
  CHECK(rpc::cut("short", 256) == "short");
}

TEST_CASE("jsonrpc: -32602 for bad params", "[jsonrpc]") {
  Dispatcher d;
  add_methods(d);
  SECTION("params neither object nor array") {
    for (const char* p : {"3", "\"s\"", "true", "null"}) {
      json r =
          respond(d, std::string(R"({"jsonrpc":"2.0","id":1,"method":"echo","params":)") + p + "}");
      REQUIRE(code_of(r) == rpc::invalid_params);
      REQUIRE(r["id"] == 1);
    }
  }
  SECTION("a handler's invalid_argument carries its message") {
    json r = respond(d, R"({"jsonrpc":"2.0","id":2,"method":"typed","params":{"name":5}})");
    REQUIRE(code_of(r) == rpc::invalid_params);
    REQUIRE(message_of(r) == "invalid params: 'name' must be a string, got number 5");
    REQUIRE(data_code_of(r) == "invalid_argument");
    r = respond(d, R"({"jsonrpc":"2.0","id":2,"method":"typed","params":{}})");
    REQUIRE(message_of(r) == "invalid params: missing required param 'name'");
    r = respond(d, R"({"jsonrpc":"2.0","id":2,"method":"typed","params":{"name":"a","n":1.5}})");
    REQUIRE(message_of(r).find("'n' must be an integer") != std::string::npos);
    r = respond(d, R"({"jsonrpc":"2.0","id":2,"method":"typed","params":{"name":"a","flag":1}})");
    REQUIRE(message_of(r).find("'flag' must be a boolean, got number 1") != std::string::npos);
    r = respond(d, R"({"jsonrpc":"2.0","id":2,"method":"typed","params":["a"]})");
    REQUIRE(message_of(r).find("expected an object with named members, got array") !=
            std::string::npos);
  }
  SECTION("typed params pass through when valid") {
    json r = respond(
        d, R"({"jsonrpc":"2.0","id":2,"method":"typed","params":{"name":"a","n":-3,"x":2}})");
    REQUIRE(r["result"] == json{{"name", "a"}, {"n", -3}, {"flag", false}, {"x", 2.0}});
  }
}

TEST_CASE("jsonrpc: handler errors map every Errc to its documented code", "[jsonrpc]") {
  Dispatcher d;
  add_methods(d);
  const std::pair<Errc, int> table[] = {
      {Errc::invalid_argument, -32602},
      {Errc::not_found, -32001},
      {Errc::already_exists, -32002},
      {Errc::conflict, -32003},
      {Errc::io, -32004},
      {Errc::corrupt, -32005},
      {Errc::parse, -32006},
      {Errc::verify, -32007},
      {Errc::compile, -32008},
      {Errc::link, -32009},
      {Errc::timeout, -32010},
      {Errc::crashed, -32011},
      {Errc::resource_exhausted, -32012},
      {Errc::permission_denied, -32013},
      {Errc::unsupported, -32014},
      {Errc::unavailable, -32015},
      {Errc::pinned, -32016},
      {Errc::internal, -32603},
  };
  for (auto [errc, code] : table) {
    std::string name(fdo::to_string(errc));
    INFO(name);
    REQUIRE(rpc::error_code(errc) == code);
    REQUIRE(rpc::errc_from_code(code) == errc);
    REQUIRE(rpc::parse_errc(name) == errc);
    json r =
        respond(d, R"({"jsonrpc":"2.0","id":3,"method":"fail","params":{"code":")" + name + "\"}}");
    REQUIRE(code_of(r) == code);
    REQUIRE(message_of(r) == "it failed");
    REQUIRE(data_code_of(r) == name);
    REQUIRE(r["id"] == 3);
  }
  REQUIRE_FALSE(rpc::errc_from_code(-32700));
  REQUIRE_FALSE(rpc::parse_errc("bogus"));
}

TEST_CASE("jsonrpc: a throwing handler becomes -32603 with the message", "[jsonrpc]") {
  Dispatcher d;
  add_methods(d);
  json r = respond(d, R"({"jsonrpc":"2.0","id":9,"method":"throw"})");
  REQUIRE(code_of(r) == rpc::internal_error);
  REQUIRE(message_of(r).find("kaboom") != std::string::npos);
  REQUIRE(message_of(r).find("throw") != std::string::npos);
  REQUIRE(r["id"] == 9);
  // And the dispatcher keeps working.
  REQUIRE(respond(d, R"({"jsonrpc":"2.0","id":10,"method":"echo"})").contains("result"));
}

TEST_CASE("jsonrpc: helper responses", "[jsonrpc]") {
  json r = json::parse(rpc::oversized_response(1024, 5000));
  REQUIRE(r["id"].is_null());
  REQUIRE(r["error"]["code"] == rpc::invalid_request);
  REQUIRE(r["error"]["data"]["code"] == "resource_exhausted");
  REQUIRE(r["error"]["data"]["limit_bytes"] == 1024);
  REQUIRE(r["error"]["message"].get<std::string>().find("max_request_bytes") != std::string::npos);

  r = json::parse(rpc::deadline_response("abc", "execute", std::chrono::milliseconds(250)));
  REQUIRE(r["id"] == "abc");
  REQUIRE(r["error"]["code"] == rpc::error_code(Errc::timeout));
  REQUIRE(r["error"]["data"]["code"] == "timeout");
  REQUIRE(r["error"]["data"]["timeout_ms"] == 250);
  REQUIRE(r["error"]["message"].get<std::string>().find("execute") != std::string::npos);

  r = json::parse(rpc::stopping_response(4));
  REQUIRE(r["error"]["code"] == rpc::error_code(Errc::unavailable));

  // Invalid UTF-8 in a result is replaced rather than failing the response.
  r = json::parse(rpc::result_response(1, json{{"s", std::string("a\xff"
                                                                 "b")}}));
  REQUIRE(r["result"]["s"] == "a\xEF\xBF\xBD"
                              "b");
}

TEST_CASE("jsonrpc: methods can be listed - replaced and added concurrently", "[jsonrpc]") {
  Dispatcher d;
  add_methods(d);
  REQUIRE(d.methods() == std::vector<std::string>{"echo", "fail", "throw", "typed", "whoami"});
  REQUIRE(d.has("echo"));
  d.add("echo", [](const json&, const CallContext&) -> Expected<json> { return json("replaced"); });
  REQUIRE(respond(d, R"({"jsonrpc":"2.0","id":1,"method":"echo"})")["result"] == "replaced");
}

TEST_CASE("jsonrpc: methods carry a class - work unless added as control", "[jsonrpc]") {
  Dispatcher d;
  add_methods(d);
  d.add(
      "health", [](const json&, const CallContext&) -> Expected<json> { return json("ok"); },
      MethodClass::control);
  REQUIRE(d.method_class("echo") == MethodClass::work);
  REQUIRE(d.method_class("health") == MethodClass::control);
  REQUIRE_FALSE(d.method_class("no.such").has_value());
  REQUIRE(to_string(MethodClass::work) == "work");
  REQUIRE(to_string(MethodClass::control) == "control");
  // The class does not change how a request is answered.
  REQUIRE(respond(d, R"({"jsonrpc":"2.0","id":1,"method":"health"})")["result"] == "ok");
  // Replacing a method replaces its class too.
  d.add("health", [](const json&, const CallContext&) -> Expected<json> { return json("slow"); });
  REQUIRE(d.method_class("health") == MethodClass::work);
  d.add(
      "echo", [](const json& p, const CallContext&) -> Expected<json> { return p; },
      MethodClass::control);
  REQUIRE(d.method_class("echo") == MethodClass::control);
}

TEST_CASE("jsonrpc: a method may be added as immediate", "[jsonrpc]") {
  Dispatcher d;
  d.add(
      "ping", [](const json&, const CallContext&) -> Expected<json> { return json("pong"); },
      MethodClass::immediate);
  REQUIRE(d.method_class("ping") == MethodClass::immediate);
  REQUIRE(to_string(MethodClass::immediate) == "immediate");
  REQUIRE(respond(d, R"({"jsonrpc":"2.0","id":1,"method":"ping"})")["result"] == "pong");
}

TEST_CASE("request descriptors reach only methods added to take them", "[rpc][fds]") {
  Dispatcher d;
  add_methods(d);
  d.add(
      "takes",
      [](const json&, const CallContext& c) -> Expected<json> {
        return json{{"fds", c.request_fds == nullptr ? 0 : c.request_fds->size()}};
      },
      MethodClass::work, RequestFds::accepted);
  std::vector<fdo::Fd> fds;
  fds.emplace_back(::dup(0));
  fds.emplace_back(::dup(0));
  CallContext ctx;
  ctx.request_fds = &fds;
  json ok = json::parse(*d.handle_line(R"({"jsonrpc":"2.0","id":1,"method":"takes"})", ctx));
  CHECK(ok["result"]["fds"] == 2);
  json refused = json::parse(*d.handle_line(R"({"jsonrpc":"2.0","id":2,"method":"echo"})", ctx));
  CHECK(refused["error"]["code"] == rpc::invalid_params);
  CHECK(refused["error"]["data"]["fds"] == 2);
  CHECK_THAT(refused["error"]["message"].get<std::string>(),
             Catch::Contains("'echo' takes no file descriptors, and 2 came"));
  // Unknown methods stay -32601; notifications get nothing.
  json unknown = json::parse(*d.handle_line(R"({"jsonrpc":"2.0","id":3,"method":"nope"})", ctx));
  CHECK(unknown["error"]["code"] == rpc::method_not_found);
  CHECK_FALSE(d.handle_line(R"({"jsonrpc":"2.0","method":"echo"})", ctx));
  // No descriptors: every method runs as before.
  ctx.request_fds = nullptr;
  CHECK(json::parse(*d.handle_line(R"({"jsonrpc":"2.0","id":4,"method":"echo"})", ctx))
            .contains("result"));
}

TEST_CASE("jsonrpc: a method that writes its result as text", "[jsonrpc][text]") {
  Dispatcher d;
  int calls = 0;
  d.add_text("text.echo", [&](const json& p, const CallContext&) -> Expected<ResultText> {
    ++calls;
    if (p.contains("fail")) return fdo::make_error(Errc::not_found, "no such thing");
    if (p.contains("throw")) throw std::runtime_error("kaboom");
    return ResultText{R"({"got":)" + p.dump() + "}"};
  });
  REQUIRE(d.has("text.echo"));
  REQUIRE(d.method_class("text.echo") == MethodClass::work);

  // The text goes into the response as written, the id echoed as for any method.
  auto line =
      d.handle_line(R"({"jsonrpc":"2.0","id":"a","method":"text.echo","params":{"x":[1]}})", {});
  REQUIRE(line);
  CHECK(*line == R"({"jsonrpc":"2.0","id":"a","result":{"got":{"x":[1]}}})");
  json r = respond(d, R"({"jsonrpc":"2.0","id":18446744073709551615,"method":"text.echo"})");
  CHECK(r["id"].get<std::uint64_t>() == 18446744073709551615ull);
  CHECK(r["result"] == json{{"got", json::object()}});

  // Errors, exceptions and notifications as for a method returning a tree.
  r = respond(d, R"({"jsonrpc":"2.0","id":2,"method":"text.echo","params":{"fail":1}})");
  CHECK(code_of(r) == rpc::error_code(Errc::not_found));
  CHECK(message_of(r) == "no such thing");
  r = respond(d, R"({"jsonrpc":"2.0","id":3,"method":"text.echo","params":{"throw":1}})");
  CHECK(code_of(r) == rpc::internal_error);
  CHECK_THAT(message_of(r), Catch::Contains("kaboom"));
  const int before = calls;
  CHECK_FALSE(d.handle_line(R"({"jsonrpc":"2.0","method":"text.echo","params":{}})", {}));
  CHECK_FALSE(d.handle_line(R"({"jsonrpc":"2.0","method":"text.echo","params":{"fail":1}})", {}));
  CHECK(calls == before + 2); // notifications run, and are not answered

  // Replaced by a tree method (and back), the class going with it.
  d.add(
      "text.echo", [](const json&, const CallContext&) -> Expected<json> { return 5; },
      MethodClass::control);
  CHECK(respond(d, R"({"jsonrpc":"2.0","id":4,"method":"text.echo"})")["result"] == 5);
  CHECK(d.method_class("text.echo") == MethodClass::control);
  d.add_text("text.echo", [](const json&, const CallContext&) -> Expected<ResultText> {
    return ResultText{"6"};
  });
  CHECK(respond(d, R"({"jsonrpc":"2.0","id":5,"method":"text.echo"})")["result"] == 6);
}
