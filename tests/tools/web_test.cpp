// `fdoctl web` without a browser or a socket: the --listen rule, the
// read-only gate, and the request handler's routes and error answers, over
// a fake backend that records which methods were called.
#include "fdo/util/profile.h"
#include "listen.h"
#include "read_only_backend.h"
#include "support/temp_dir.h"
#include "web_app.h"

#include <catch2/catch.hpp>
#include <fstream>
#include <set>

using namespace fdo;
using namespace fdo::ctl;
using namespace fdo::ctl::web;
using nlohmann::json;

namespace {

const std::string kPk(64, 'a');
const std::string kIk(64, 'b');
const std::string kToken = "0123456789abcdef0123456789abcdef";

json profile_doc(std::uint64_t hot, std::uint64_t cold) {
  ProfileDoc d;
  d.functions["hot"] =
      FunctionProfile{.cfg_hash = 1, .counts = {hot, 1}, .source_name = "hot_loop"};
  d.functions["cold"] = FunctionProfile{.cfg_hash = 2, .counts = {cold}};
  // The feedback loop's sampling record (docs/perf.md); a non-number is ignored.
  d.hardware = {{"sampling",
                 {{"event", "cpu-clock"},
                  {"stages", 3},
                  {"samples", 40},
                  {"outside_samples", 2},
                  {"time_share", {{"hot", 0.75}, {"cold", "x"}}},
                  {"misses", {{"branch-misses", {{"hot", 30}}}}}}}};
  d.provenance.reason = "feedback";
  return fdo::to_json(d);
}

// Answers the read methods from canned data; records every method called.
class FakeBackend final : public Backend {
public:
  explicit FakeBackend(std::vector<std::string>& calls, BackendKind kind = BackendKind::daemon)
      : calls_(calls), kind_(kind) {}
  Expected<json> call(std::string_view method, const json& params) override {
    calls_.emplace_back(method);
    if (method == "profile.list")
      return json{{"profiles", json::array({{{"profile_key", kPk}, {"version", 2}}})}};
    if (method == "program.list")
      return json{{"programs", json::array({{{"program", kIk}, {"name", "sum_loop"}}})}};
    if (method == "profile.get") {
      if (params.value("profile_key", "") != kPk) return make_error(Errc::not_found, "no profile");
      std::int64_t v = params.value("version", std::int64_t{2});
      if (v > 2) return make_error(Errc::not_found, "no version " + std::to_string(v));
      return json{{"profile_key", kPk},
                  {"version", v},
                  {"digest", "d" + std::to_string(v)},
                  {"pinned", false},
                  {"reason", "feedback"},
                  {"created_at", ""},
                  {"profile", v == 1 ? profile_doc(10, 90) : profile_doc(900, 100)}};
    }
    if (method == "profile.history")
      return json{{"profile_key", kPk},
                  {"versions", json::array({{{"version", 1}}, {{"version", 2}}})}};
    if (method == "cache.explain")
      return json{{"program", kIk}, {"profile_key", kPk}, {"records", json::array()}};
    // Write methods answer too: only the gate keeps them from being called.
    return json::object();
  }
  BackendKind kind() const override { return kind_; }
  std::string describe() const override { return "fake"; }

private:
  std::vector<std::string>& calls_;
  BackendKind kind_;
};

struct App {
  std::vector<std::string> calls;
  fdo::test_support::TempDir dir{"fdoctl-web-test"};
  WebApp app{[this]() -> Expected<std::unique_ptr<Backend>> {
               return std::unique_ptr<Backend>(std::make_unique<FakeBackend>(calls));
             },
             AssetOptions{dir.path().string()}, HostCheck::loopback_only, kToken};

  WebResponse get(const std::string& target, const std::string& host = "127.0.0.1:8080",
                  const std::string& token = kToken) {
    return app.handle({"GET", target, host, token});
  }
  json get_json(const std::string& target) {
    WebResponse r = get(target);
    INFO(target << " -> " << r.status << " " << r.body);
    REQUIRE(r.status == 200);
    REQUIRE(r.content_type == "application/json");
    return json::parse(r.body);
  }
};

} // namespace

TEST_CASE("web --listen: loopback by default, anything else only when allowed", "[web]") {
  auto a = parse_listen("127.0.0.1:8080", RemoteAccess::refuse);
  REQUIRE(a);
  CHECK(a->host == "127.0.0.1");
  CHECK(a->port == 8080);
  CHECK(a->loopback);
  CHECK(parse_listen("localhost:0", RemoteAccess::refuse)->host == "127.0.0.1");
  CHECK(parse_listen("[::1]:9000", RemoteAccess::refuse)->host == "::1");
  CHECK(parse_listen("9000", RemoteAccess::refuse)->host == "127.0.0.1");
  CHECK(parse_listen("127.8.9.10:1", RemoteAccess::refuse)->loopback);

  for (const char* remote : {"0.0.0.0:8080", "192.168.1.5:80", "[::]:8080", "10.0.0.1:0"}) {
    auto refused = parse_listen(remote, RemoteAccess::refuse);
    REQUIRE_FALSE(refused);
    CHECK(refused.error().code() == Errc::invalid_argument);
    CHECK_THAT(refused.error().message(), Catch::Contains("--allow-remote"));
    auto allowed = parse_listen(remote, RemoteAccess::allow);
    REQUIRE(allowed);
    CHECK_FALSE(allowed->loopback);
  }
  for (const char* bad : {"", "127.0.0.1:", "127.0.0.1:70000", "127.0.0.1:http", "example.com:80",
                          "::1:80", "[::1", "[::1]80"}) {
    auto r = parse_listen(bad, RemoteAccess::allow);
    INFO(bad);
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::invalid_argument);
  }
  CHECK(url_of("::1", 80) == "http://[::1]:80/");
  CHECK(url_of("127.0.0.1", 8080) == "http://127.0.0.1:8080/");
}

TEST_CASE("web: Host headers that name the loopback server", "[web]") {
  for (const char* ok :
       {"127.0.0.1:8080", "localhost:8080", "[::1]:8080", "127.0.0.1", "localhost"})
    CHECK(is_loopback_host_header(ok));
  for (const char* bad :
       {"evil.example:8080", "", "10.0.0.1:8080", "[::1", "localhost.evil.example"})
    CHECK_FALSE(is_loopback_host_header(bad));
}

TEST_CASE("web: the read-only gate passes reads and refuses every write", "[web]") {
  std::vector<std::string> calls;
  ReadOnlyBackend gate(std::make_unique<FakeBackend>(calls));
  for (const char* m : {"profile.list", "profile.get", "profile.history", "program.list",
                        "cache.explain", "cache.stats", "health", "program.source"}) {
    CHECK(is_read_method(m));
    CHECK(gate.call(m, {{"profile_key", kPk}}));
  }
  for (const char* m : {"profile.pin", "profile.unpin", "profile.reset", "profile.delete",
                        "profile.import", "program.register", "program.delete", "program.compile",
                        "execute", "config", "metrics", "profile.export"}) {
    CHECK_FALSE(is_read_method(m));
    auto r = gate.call(m, json::object());
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::permission_denied);
  }
  CHECK(calls.size() == 8); // the refused ones never reached the backend
}

TEST_CASE("web: every view answers from read methods only", "[web]") {
  App t;
  json overview = t.get_json("/api/overview");
  CHECK(overview["programs"][0]["name"] == "sum_loop");
  CHECK(overview["profiles"][0]["profile_key"] == kPk);

  json p = t.get_json("/api/profile/" + kPk);
  CHECK(p["version"] == 2);
  CHECK(p["total"] == 1001);
  REQUIRE(p["functions"].size() == 2);
  CHECK(p["functions"][0]["name"] == "hot"); // hottest first
  CHECK(p["functions"][0]["display_name"] == "hot_loop");
  CHECK(p["functions"][0]["total"] == 901);
  CHECK(p["functions"][0]["sampled"]["time_share"] == 0.75);
  CHECK(p["functions"][0]["sampled"]["branch-misses"] == 30);
  CHECK(p["sampled_figures"] == json::array({"branch-misses", "time_share"}));
  CHECK(p["functions"][1]["sampled"].empty());

  CHECK(t.get_json("/api/profile/" + kPk + "?version=1")["version"] == 1);
  CHECK(t.get_json("/api/profile/" + kPk + "/history")["versions"].size() == 2);
  json d = t.get_json("/api/profile/" + kPk + "/diff?v1=1&v2=2");
  CHECK(d["from"]["version"] == 1);
  CHECK(d["to"]["version"] == 2);
  CHECK(d["summary"]["changed"].get<int>() >= 1);
  json prog = t.get_json("/api/program/" + kIk);
  CHECK(prog["name"] == "sum_loop");
  CHECK(prog["profile_key"] == kPk);

  std::set<std::string> called(t.calls.begin(), t.calls.end());
  for (const std::string& m : called) {
    INFO(m);
    CHECK(is_read_method(m));
  }
  CHECK(called.contains("cache.explain"));
}

TEST_CASE("web: bad requests get clean 4xx answers", "[web]") {
  App t;
  auto status = [&](const std::string& target) { return t.get(target).status; };
  CHECK(status("/nope") == 404);
  CHECK(status("/api/nope") == 404);
  CHECK(status("/assets/nope.js") == 404);
  CHECK(status("/api/profile/zzz") == 400);
  CHECK(status("/api/profile/" + std::string(63, 'a')) == 400);
  CHECK(status("/api/profile/" + std::string(64, 'A')) == 400);
  CHECK(status("/api/program/xyz") == 400);
  CHECK(status("/api/profile/" + std::string(64, 'c')) == 404); // well-formed, unknown
  CHECK(status("/api/profile/" + kPk + "?version=9") == 404);
  CHECK(status("/api/profile/" + kPk + "?version=0") == 400);
  CHECK(status("/api/profile/" + kPk + "?version=x") == 400);
  CHECK(status("/api/profile/" + kPk + "/diff?v1=1") == 400);
  CHECK(status("/api/profile/" + kPk + "/diff?v1=1&v2=-2") == 400);
  CHECK(status("/api/profile/" + kPk + "/annotate?function=%zz") == 400);
  CHECK(status("/api/profile/" + kPk + "/annotate?function=ab%2") == 400);
  CHECK(status("/api/profile/zzz/annotate") == 400);
  CHECK(status("/assets/../../etc/passwd") == 400);
  CHECK(status("/assets/%2e%2e/%2e%2e/etc/passwd") == 400);
  CHECK(status("/assets/..%2f..%2fetc%2fpasswd") == 400);
  CHECK(status("/./assets/app.js") == 400);
  CHECK(status("relative") == 400);
  WebResponse bad = t.get("/api/profile/zzz");
  CHECK(bad.content_type == "application/json");
  CHECK_THAT(json::parse(bad.body)["error"].get<std::string>(), Catch::Contains("profile key"));

  CHECK(t.app.handle({"POST", "/api/overview", "127.0.0.1:1", kToken}).status == 405);
  CHECK(t.app.handle({"DELETE", "/api/profile/" + kPk, "127.0.0.1:1", kToken}).status == 405);
  // DNS rebinding: a page on another name pointed at 127.0.0.1.
  CHECK(t.get("/api/overview", "attacker.example:8080").status == 421);
  CHECK(t.calls.size() == 2); // only the two well-formed profile requests reached the backend
}

TEST_CASE("web: the API needs the run's token but the page does not", "[web]") {
  App t;
  for (const std::string& token : {std::string(), std::string("wrong"), kToken + "0"}) {
    WebResponse r = t.get("/api/overview", "127.0.0.1:8080", token);
    CHECK(r.status == 401);
    CHECK_THAT(r.body, Catch::Contains("token"));
  }
  CHECK(t.calls.empty());
  CHECK(t.get("/", "127.0.0.1:8080", "").status == 200);
  CHECK(t.get("/assets/app.js", "127.0.0.1:8080", "").status == 200);
  CHECK(t.get("/api/overview").status == 200);
  // No token configured: nothing gets through.
  std::vector<std::string> calls;
  WebApp open(
      [&]() -> Expected<std::unique_ptr<Backend>> {
        return std::unique_ptr<Backend>(std::make_unique<FakeBackend>(calls));
      },
      AssetOptions{}, HostCheck::any, "");
  CHECK(open.handle({"GET", "/api/overview", "x", ""}).status == 401);
}

TEST_CASE("web: the page and its assets", "[web]") {
  App t;
  WebResponse index = t.get("/");
  CHECK(index.status == 200);
  CHECK(index.content_type.starts_with("text/html"));
  CHECK_THAT(index.body, Catch::Contains("/assets/app.js"));
  CHECK(t.get("/assets/app.js").content_type.starts_with("text/javascript"));
  CHECK(t.get("/assets/style.css").status == 200);
  // Chart.js comes from its directory (Debian's libjs-chart.js).
  WebResponse missing = t.get("/assets/chart.js");
  CHECK(missing.status == 404);
  CHECK_THAT(missing.body, Catch::Contains("libjs-chart.js"));
  std::ofstream(t.dir.path() / "chart.min.js") << "window.Chart = function() {};";
  WebResponse chart = t.get("/assets/chart.js");
  CHECK(chart.status == 200);
  CHECK(chart.body == "window.Chart = function() {};");
  CHECK(t.calls.empty()); // assets never touch the backend
}

TEST_CASE("web: the offline store shows profiles and says programs need the daemon", "[web]") {
  std::vector<std::string> calls;
  WebApp app(
      [&]() -> Expected<std::unique_ptr<Backend>> {
        return std::unique_ptr<Backend>(std::make_unique<FakeBackend>(calls, BackendKind::store));
      },
      AssetOptions{}, HostCheck::loopback_only, kToken);
  WebResponse r = app.handle({"GET", "/api/overview", "localhost:1", kToken});
  REQUIRE(r.status == 200);
  json doc = json::parse(r.body);
  CHECK(doc["backend"] == "store");
  CHECK(doc["programs"].is_null());
  CHECK_THAT(doc["programs_note"].get<std::string>(), Catch::Contains("fdod"));
  CHECK(std::find(calls.begin(), calls.end(), "program.list") == calls.end());
}

TEST_CASE("web: a backend that cannot be opened is a 503, retried next request", "[web]") {
  int opens = 0;
  std::vector<std::string> calls;
  WebApp app(
      [&]() -> Expected<std::unique_ptr<Backend>> {
        if (++opens == 1) return make_error(Errc::unavailable, "fdod is not running");
        return std::unique_ptr<Backend>(std::make_unique<FakeBackend>(calls));
      },
      AssetOptions{}, HostCheck::any, kToken);
  WebResponse down = app.handle({"GET", "/api/overview", "anything", kToken});
  CHECK(down.status == 503);
  CHECK_THAT(down.body, Catch::Contains("fdod is not running"));
  CHECK(app.handle({"GET", "/api/overview", "anything", kToken}).status == 200);
  CHECK(opens == 2);
}
