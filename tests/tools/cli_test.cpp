// The command line in-process: exit codes, --json documents, the read-only
// store path, and `run`/`explain`/`status`/`doctor` against a fake daemon.
// (tests/tools/fdoctl_e2e.py drives the real binary against a real fdod.)
#include "fake_daemon.h"
#include "fdo/ctl/cli.h"
#include "fdo/profile_store/profile_store.h"
#include "fdo/profile_store/sqlite.h"
#include "fdo/util/base64.h"
#include "support/postgres_server.h"
#include "support/skip.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>

using namespace fdo::ctl;
using nlohmann::json;
namespace ps = fdo::profile_store;

namespace {

struct Result {
  int code;
  std::string out, err;
  json doc() const {
    json j = json::parse(out, nullptr, false);
    INFO("stdout: " << out << "\nstderr: " << err);
    REQUIRE_FALSE(j.is_discarded());
    return j;
  }
};

Result fdoctl(std::vector<std::string> args) {
  std::ostringstream out, err;
  Io io{out, err, false, false};
  args.insert(args.begin(), "fdoctl");
  int code = run_cli(args, io);
  return {code, out.str(), err.str()};
}

const std::string kPk1 = "ab" + std::string(62, '1');
const std::string kPk2 = "ab" + std::string(62, '2');
const std::string kIk = std::string(64, 'c');

fdo::ProfileDoc profile(std::vector<std::uint64_t> counts) {
  fdo::ProfileDoc d;
  d.functions["interp_run"] = {0x1234, std::move(counts), {}, ""};
  // A static function: keyed by its canonical PGO name, shown by its source name.
  d.functions["fdo:fdo.local.0"] = {0x99, {5, 5}, {}, "", "/src/interp.c:helper"};
  return d;
}

// A state dir with a profile store: kPk1 at v1 and v2 (branch weights moved),
// kPk2 at v1.
void make_store_at(const std::string& location) {
  auto store = ps::ProfileStore::open(location);
  REQUIRE(store);
  ps::WriteInfo info;
  info.reason = "feedback: enough counts";
  info.program = kIk;
  info.stage = 1;
  REQUIRE(store->write(kPk1, 0, profile({100, 50, 50}), info));
  info.reason = "feedback: drift 0.3";
  info.stage = 7;
  REQUIRE(store->write(kPk1, 1, profile({100, 90, 10}), info));
  REQUIRE(store->write(kPk2, 0, profile({1, 1, 1}), info));
  REQUIRE(store->register_program({kIk, "interp", 10, 0, 0, 0}));
}

void make_store(const std::string& dir) {
  make_store_at(dir + "/profiles.db");
}

} // namespace

TEST_CASE("cli: an unreachable socket gives the helpful error and exit 3") {
  test::TempDir dir;
  for (const char* cmd : {"profiles", "status", "cache", "run"}) {
    std::vector<std::string> args = {"--socket", dir.file("none.sock"), cmd};
    if (std::string(cmd) == "cache") args.push_back("stats");
    if (std::string(cmd) == "run") {
      std::ofstream(dir.file("p.ll")) << "define i64 @f() { ret i64 1 }\n";
      args.insert(args.end(), {dir.file("p.ll"), "--entry", "f"});
    }
    Result r = fdoctl(args);
    INFO(cmd << ": " << r.err);
    CHECK(r.code == 3);
    CHECK_THAT(r.err, Catch::Contains("cannot connect to " + dir.file("none.sock")));
    CHECK_THAT(r.err, Catch::Contains("is fdod running? try `systemctl status fdod`"));
    CHECK_THAT(r.err, Catch::Contains("pass --socket PATH") && Catch::Contains("--state-dir DIR"));
    CHECK(r.out.empty());
  }
}

TEST_CASE("cli: usage errors exit 2") {
  CHECK(fdoctl({}).code == 2);
  CHECK(fdoctl({"frobnicate"}).code == 2);
  Result unknown = fdoctl({"frobnicate"});
  CHECK_THAT(unknown.err, Catch::Contains("unknown command 'frobnicate'"));
  CHECK(fdoctl({"profile"}).code == 2);
  CHECK(fdoctl({"profile", "show"}).code == 2);
  CHECK(fdoctl({"run", "x.ll"}).code == 2); // --entry missing
  CHECK(fdoctl({"--offline", "profiles"}).code == 2);
  CHECK_THAT(fdoctl({"--offline", "profiles"}).err, Catch::Contains("needs --state-dir"));
  CHECK(fdoctl({"profile", "export", "--format", "xml", "ab"}).code == 2);
  Result help = fdoctl({"--help"});
  CHECK(help.code == 0);
  CHECK_THAT(help.out, Catch::Contains("Exit status"));
}

TEST_CASE("cli: a mistyped command gets a did-you-mean") {
  Result shwo = fdoctl({"profile", "shwo", "ab"});
  CHECK(shwo.code == 2);
  CHECK_THAT(shwo.err, Catch::Contains("unknown fdoctl profile command 'shwo' (did you mean "
                                       "'show'?)"));
  Result profils = fdoctl({"--json", "profils"});
  CHECK(profils.code == 2);
  CHECK_THAT(profils.err, Catch::Contains("unknown command 'profils' (did you mean 'profiles'?)"));
  Result stauts = fdoctl({"stauts"});
  CHECK_THAT(stauts.err, Catch::Contains("did you mean 'status'?"));
  Result cache = fdoctl({"cache", "stat"});
  CHECK_THAT(cache.err, Catch::Contains("unknown fdoctl cache command 'stat' (did you mean "
                                        "'stats'?)"));
  // Nothing close: no suggestion, the list of commands.
  Result far = fdoctl({"xyzzy"});
  CHECK_THAT(far.err, !Catch::Contains("did you mean"));
  CHECK_THAT(far.err,
             Catch::Contains("(commands: run, profiles, programs, program, profile, backup, "
                             "restore, gc, cache"));
}

TEST_CASE("cli: --timeout takes 0 for no limit and rejects bad values plainly") {
  std::string missing = "/nonexistent/fdoctl-test.sock";
  // 0 is accepted (no limit): the command gets as far as connecting.
  CHECK(fdoctl({"--socket", missing, "--timeout", "0", "status"}).code == 3);
  CHECK(fdoctl({"--socket", missing, "--timeout", "2.5", "status"}).code == 3);
  for (std::string bad : {"-1", "soon", "1e300", "nan"}) {
    Result r = fdoctl({"--socket", missing, "--timeout", bad, "status"});
    INFO(bad << ": " << r.err);
    CHECK(r.code == 2);
    CHECK_THAT(r.err, Catch::Contains("--timeout takes seconds from 0 (no limit) to 31536000"));
    CHECK(r.err.size() < 400); // no 300-digit limits in the message
  }
}

TEST_CASE("cli: read commands work from the store with the daemon down") {
  test::TempDir dir;
  make_store(dir.path());
  std::vector<std::string> offline = {"--offline", "--state-dir", dir.path()};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = offline;
    a.insert(a.end(), extra.begin(), extra.end());
    return fdoctl(a);
  };

  SECTION("profiles --json") {
    Result r = with({"profiles", "--json"});
    REQUIRE(r.code == 0);
    json j = r.doc();
    REQUIRE(j["profiles"].size() == 2);
    CHECK(j["profiles"][0]["profile_key"] == kPk1);
    CHECK(j["profiles"][0]["version"] == 2);
    CHECK(j["profiles"][0]["functions"] == 2);
  }
  SECTION("fallback: --state-dir with an unreachable socket reads the store, with a note") {
    Result r = fdoctl({"--socket", dir.file("no.sock"), "--state-dir", dir.path(), "profiles"});
    REQUIRE(r.code == 0);
    CHECK_THAT(r.out, Catch::Contains(kPk1.substr(0, 16)));
    CHECK_THAT(r.out, Catch::Contains("2 profile(s)"));
    CHECK_THAT(r.err, Catch::Contains("fdod is not reachable"));
    CHECK_THAT(r.err, Catch::Contains("(read-only)"));
  }
  SECTION("profile show by prefix, current and older versions") {
    Result r = with({"profile", "show", kPk1.substr(0, 8), "--json"});
    REQUIRE(r.code == 0);
    CHECK(r.doc()["version"] == 2);
    CHECK(r.doc()["profile_key"] == kPk1);
    Result v1 = with({"profile", "show", kPk1, "--version", "1"});
    REQUIRE(v1.code == 0);
    CHECK_THAT(v1.out, Catch::Contains("interp_run"));
    CHECK_THAT(v1.out, Catch::Contains("feedback: enough counts"));
    CHECK_THAT(v1.out, Catch::Contains("0000000000001234"));
    CHECK_THAT(v1.out, Catch::Contains("/src/interp.c:helper (fdo:fdo.local.0)"));
    CHECK(r.doc()["profile"]["functions"]["fdo:fdo.local.0"]["source_name"] ==
          "/src/interp.c:helper");
    Result missing = with({"profile", "show", kPk1, "--version", "9"});
    CHECK(missing.code == 4);
    CHECK_THAT(missing.err, Catch::Contains("has no version 9"));
  }
  SECTION("prefixes: ambiguous is a usage error, unknown is not found") {
    Result amb = with({"profile", "show", "ab"});
    CHECK(amb.code == 2);
    CHECK_THAT(amb.err, Catch::Contains("ambiguous"));
    Result none = with({"profile", "history", "ffff"});
    CHECK(none.code == 4);
    CHECK_THAT(none.err, Catch::Contains("no profile key starts with 'ffff'"));
    Result bad = with({"profile", "history", "xyz"});
    CHECK(bad.code == 2);
  }
  SECTION("profile history") {
    Result r = with({"profile", "history", kPk1, "--json"});
    REQUIRE(r.code == 0);
    json j = r.doc();
    CHECK(j["current_version"] == 2);
    REQUIRE(j["versions"].size() == 2);
    CHECK(j["versions"][1]["reason"] == "feedback: drift 0.3");
    Result human = with({"profile", "history", kPk1});
    CHECK_THAT(human.out, Catch::Contains("current version: v2"));
  }
  SECTION("profile diff shows the weights that moved") {
    Result r = with({"profile", "diff", kPk1, "1", "2", "--json"});
    REQUIRE(r.code == 0);
    json j = r.doc();
    CHECK(j["from"]["version"] == 1);
    CHECK(j["to"]["version"] == 2);
    json f;
    for (const auto& fn : j["functions"])
      if (fn["name"] == "interp_run") f = fn;
    REQUIRE(f.is_object());
    CHECK(f["change"] == "changed");
    CHECK(f["weights_changed"] == 2);
    CHECK(f["counters"][0]["index"] == 1);
    CHECK(f["counters"][0]["before"] == 50);
    CHECK(f["counters"][0]["after"] == 90);
    Result human = with({"profile", "diff", kPk1.substr(0, 10), "1", "2"});
    REQUIRE(human.code == 0);
    CHECK_THAT(human.out, Catch::Contains("interp_run  [changed]"));
    CHECK_THAT(human.out, Catch::Contains("+20.00 pts"));
    CHECK_THAT(human.out, Catch::Contains("1 changed, 0 added, 0 removed, 1 unchanged"));
    CHECK(with({"profile", "diff", kPk1, "1", "5"}).code == 4);
    CHECK(with({"profile", "diff", kPk1, "0", "1"}).code == 2);
  }
  SECTION("profile export json; profdata and writes need the daemon") {
    Result r = with({"profile", "export", kPk1, "-o", dir.file("bundle.json")});
    REQUIRE(r.code == 0);
    std::ifstream in(dir.file("bundle.json"));
    json bundle = json::parse(in);
    CHECK(bundle["format"] == "fdo-profile-bundle");
    CHECK(bundle["profiles"][0]["pk"] == kPk1);
    Result stdout_bundle = with({"profile", "export", "--all"});
    REQUIRE(stdout_bundle.code == 0);
    CHECK(stdout_bundle.doc()["profiles"].size() == 2);
    Result prof = with({"profile", "export", kPk1, "--format", "profdata", "-o", dir.file("p")});
    CHECK(prof.code == 1);
    CHECK_THAT(prof.err, Catch::Contains("needs the daemon"));
    CHECK(with({"profile", "pin", kPk1}).code == 2);
    CHECK(with({"explain", kIk}).code == 2);
  }
}

TEST_CASE("cli: a missing state dir is named") {
  test::TempDir dir;
  Result r = fdoctl({"--offline", "--state-dir", dir.file("nope"), "profiles"});
  CHECK(r.code == 4);
  CHECK_THAT(r.err, Catch::Contains("no profile store at " + dir.file("nope") + "/profiles.db"));
}

namespace {

// A daemon that registers one program and runs stages: 2 instrumented under
// the VK, a rewrite at stage 1, then optimized under a CK.
json fake_fdod(const json& req, int& stage) {
  // Documents written as JSON text: braced initializers would turn a pair of
  // strings into an object.
  auto doc = [](std::string text) {
    for (auto [from, to] : {std::pair<std::string, std::string>{"$IK", kIk}, {"$PK", kPk1}})
      for (std::size_t at; (at = text.find(from)) != std::string::npos;)
        text.replace(at, from.size(), to);
    return json::parse(text);
  };
  std::string m = req["method"];
  const json& p = req["params"];
  if (m == "program.register") {
    json r = doc(R"({"result": {"program": "$IK", "profile_key": "$PK", "size": 40, "entries": [
        {"name": "run", "returns": "i64", "params": []},
        {"name": "sort_i64", "returns": "i64", "params": ["ptr", "i64"]}]}})");
    r["result"]["name"] = p.value("name", "");
    return r;
  }
  if (m == "execute") {
    int n = stage++;
    bool opt = n >= 2;
    std::string key = opt ? kIk + "-" + std::string(32, 'd') : kIk + "-v";
    json st = doc(R"({"program": "$IK", "profile_key": "$PK", "detail": "x", "compile_ms": 10.0,
        "counters": {"wall_ns": 1, "thread_cpu_ns": 1, "events": [
          {"name": "branch-misses", "value": null, "status": "no_pmu", "reason": "VM"}]},
        "policy": "p"})");
    st.erase("detail");
    st["number"] = n;
    st["cache_key"] = key;
    st["storage_key"] = key;
    st["profile_version"] = opt ? 1 : 0;
    st["mode"] = opt ? "optimized" : "instrumented";
    st["cache"] = {
        {"outcome", n == 0 || n == 2 ? "compiled" : "memory_hit"},
        {"reason", n == 0 ? "new_program" : (n == 2 ? "profile_rewritten" : "cache_key")},
        {"detail", "x"}};
    st["recompiled"] = n == 0 || n == 2;
    st["exec_ns"] = opt ? 20'000'000 : 50'000'000;
    st["profile_rewritten"] =
        n == 1 ? doc(R"({"from": 0, "to": 1, "reason": "enough counts"})") : json(nullptr);
    json result = {{"entry", p["entry"]}, {"returns", "i64"}, {"value", 42}, {"stage", st}};
    if (p.value("return_buffers", false))
      result["buffers"] = doc(R"([{"type": "i64", "data": [-3, 1, 5]}])");
    return {{"result", result}};
  }
  if (m == "health")
    return doc(R"({"result": {"status": "ok", "version": "0.1.0", "pid": 7, "uptime_s": 3.5,
        "workers": {"compile": 1, "exec": 1}}})");
  if (m == "cache.stats")
    return doc(R"({"result": {"prepares": 4, "memory": {"hits": 2}, "compiles": 2}})");
  if (m == "program.list")
    return doc(R"({"result": {"programs": [{"program": "$IK", "name": "interp", "size": 40,
        "profile_key": "$PK", "first_seen": "t0", "last_used": "t1"}]}})");
  if (m == "program.delete") return doc(R"({"result": {"program": "$IK", "removed": true}})");
  if (m == "profile.delete")
    return doc(R"({"result": {"profile_key": "$PK", "removed": {"versions": 2,
        "profile_keys": 1, "virtual_keys": 3, "feedback_rows": 2}}})");
  if (m == "profile.list")
    return doc(R"({"result": {"profiles": [{"profile_key": "$PK", "version": 1, "digest": "d",
        "pinned": false, "functions": 1, "updated_at": "t", "programs": ["interp"]}]}})");
  if (m == "profile.history")
    return doc(R"({"result": {"profile_key": "$PK", "pinned": false, "current_version": 1,
        "versions": [{"version": 1, "digest": "d", "reason": "r", "created_at": "t",
                      "program": "$IK"}]}})");
  if (m == "cache.explain") {
    json r = doc(R"({"result": {"program": "$IK", "profile_key": "$PK", "records": [
        {"stage": 1, "time": "t0", "outcome": "compiled", "reason": "new_program",
         "detail": "first stage: compiled under the virtual key", "cache_key": "$IK-eeee",
         "storage_key": "$IK-v", "profile_version": 0, "from_version": -1,
         "mode": "instrumented", "compile_ms": 12.0},
        {"stage": 5, "time": "t1", "outcome": "compiled", "reason": "profile_rewritten",
         "detail": "profile v0 -> v1", "cache_key": "$IK-dddd", "storage_key": "$IK-dddd",
         "profile_version": 1, "from_version": 0, "mode": "optimized", "compile_ms": 30.0}]}})");
    for (auto& rec : r["result"]["records"])
      for (const char* k : {"cache_key", "storage_key"}) {
        std::string v = rec[k];
        if (v.ends_with("-eeee") || v.ends_with("-dddd"))
          rec[k] = v.substr(0, 65) + std::string(32, v.back());
      }
    // As fdod does: the most recent `limit` records (0 = all) and how many it keeps.
    std::uint64_t limit = req["params"].value("limit", std::uint64_t(0));
    json& records = r["result"]["records"];
    r["result"]["records_kept"] = records.size();
    while (limit != 0 && records.size() > limit)
      records.erase(records.begin());
    return r;
  }
  if (m == "capabilities")
    return doc(R"({"result": {"fdo_version": "0.1.0", "llvm_version": "16.0.6",
        "target": {"triple": "x86_64-pc-linux-gnu", "cpu": "znver3", "features": ""},
        "compiler_identity": "x", "compile_modes": ["plain"], "tier_up": "sync",
        "share_profiles_across_tenants": false,
        "perf": {"events": [{"name": "branch-misses", "kind": "hardware", "available": false,
                             "status": "no_pmu", "detail": "no PMU"}],
                 "perf_event_paranoid": 2, "kernel_pmus": ["software"],
                 "summary": "hardware counters: none"}}})");
  return doc(R"({"error": {"code": -32601, "message": "method not found"}})");
}

} // namespace

TEST_CASE("cli: run prints a row per stage and the summary") {
  test::TempDir dir;
  int stage = 0;
  test::FakeDaemon d(dir.file("s.sock"), [&](const json& r) { return fake_fdod(r, stage); });
  std::string ir = "define i64 @run() { ret i64 42 }\n";
  std::ofstream(dir.file("prog.ll")) << ir;

  SECTION("human output") {
    Result r = fdoctl({"--socket", dir.file("s.sock"), "run", dir.file("prog.ll"), "--entry", "run",
                       "--stages", "5"});
    INFO(r.out << r.err);
    REQUIRE(r.code == 0);
    CHECK_THAT(r.out, Catch::Contains("entry   i64 run()"));
    for (int i = 0; i < 5; ++i)
      CHECK_THAT(r.out, Catch::Contains("\n    " + std::to_string(i) + "  "));
    CHECK_THAT(r.out, Catch::Contains("profile rewritten v0 -> v1"));
    CHECK_THAT(r.out, Catch::Contains("speed-up of the last stage over stage 0: 2.50x"));
    CHECK_THAT(r.out, Catch::Contains("over the first optimized stage (2): 1.00x"));
    CHECK_THAT(r.out, Catch::Contains("branch misses: n/a (no_pmu: VM)"));
    CHECK(r.err.empty()); // no progress when not on a terminal
    auto reqs = d.requests();
    REQUIRE(reqs.size() == 6);
    CHECK(reqs[0]["method"] == "program.register");
    CHECK(*fdo::base64_decode(reqs[0]["params"]["ir_base64"].get<std::string>()) == ir);
    CHECK(reqs[0]["params"]["name"] == "prog");
    CHECK(reqs[1]["params"]["program"] == kIk);
    CHECK(reqs[1]["params"]["args"] == json::array());
  }
  SECTION("--wait-optimized runs past --stages until a stage runs optimized code") {
    Result r = fdoctl({"--socket", dir.file("s.sock"), "run", dir.file("prog.ll"), "--entry", "run",
                       "--stages", "1", "--wait-optimized"});
    INFO(r.out << r.err);
    REQUIRE(r.code == 0);
    CHECK(d.requests().size() == 4); // register + stages 0, 1, 2 (the fake optimizes from 2)
    CHECK_THAT(r.out, Catch::Contains("optimized code reached at stage 2 (2 stage(s) past "
                                      "--stages 1)"));
    CHECK(r.err.empty());
  }
  SECTION("--wait-optimized gives up at --wait-timeout and says so") {
    Result r = fdoctl({"--socket", dir.file("s.sock"), "run", dir.file("prog.ll"), "--entry", "run",
                       "--stages", "1", "--wait-optimized", "--wait-timeout", "0"});
    REQUIRE(r.code == 0);
    CHECK(d.requests().size() == 2);
    CHECK_THAT(r.out, Catch::Contains("no stage ran optimized code within 0 s"));
    CHECK_THAT(r.err, Catch::Contains("--wait-optimized gave up"));
  }
  SECTION("--json: one document with every stage") {
    Result r = fdoctl({"--socket", dir.file("s.sock"), "--json", "run", dir.file("prog.ll"), "-e",
                       "run", "-n", "3"});
    REQUIRE(r.code == 0);
    json j = r.doc();
    CHECK(j["program"]["program"] == kIk);
    REQUIRE(j["stages"].size() == 3);
    CHECK(j["stages"][2]["stage"]["mode"] == "optimized");
    CHECK(j["summary"]["rewrites"] == 1);
  }
  SECTION("buffers go to pointer parameters and come back with --show-buffers") {
    Result r = fdoctl({"--socket", dir.file("s.sock"), "run", dir.file("prog.ll"), "-e", "sort_i64",
                       "--buffer", "i64:5,-3,1", "--arg", "@0", "--arg", "3", "-n", "2",
                       "--show-buffers"});
    INFO(r.err);
    REQUIRE(r.code == 0);
    auto reqs = d.requests();
    REQUIRE(reqs.size() == 3);
    CHECK(reqs[1]["params"]["buffers"] == json{{{"type", "i64"}, {"data", {5, -3, 1}}}});
    CHECK(reqs[1]["params"]["args"] == json{{{"buffer", 0}}, 3});
    CHECK_FALSE(reqs[1]["params"].contains("return_buffers"));
    CHECK(reqs[2]["params"]["return_buffers"] == true);
    CHECK_THAT(r.out, Catch::Contains("@0 i64: [-3,1,5]"));
  }
  SECTION("an unknown entry lists the entries; a bad arg is a usage error") {
    Result r = fdoctl({"--socket", dir.file("s.sock"), "run", dir.file("prog.ll"), "-e", "nope"});
    CHECK(r.code == 4);
    CHECK_THAT(r.err, Catch::Contains("has no entry 'nope'"));
    CHECK_THAT(r.err, Catch::Contains("i64 sort_i64(ptr, i64)"));
    Result bad = fdoctl({"--socket", dir.file("s.sock"), "run", dir.file("prog.ll"), "-e",
                         "sort_i64", "--arg", "x", "--arg", "1"});
    CHECK(bad.code == 2);
  }
}

TEST_CASE("cli: a daemon error maps to exit 1 with its message") {
  test::TempDir dir;
  test::FakeDaemon d(dir.file("s.sock"), [](const json&) -> json {
    return json::parse(R"({"error": {"code": -32008, "message": "compile failed: bad IR",
                                      "data": {"code": "compile"}}})");
  });
  Result r = fdoctl({"--socket", dir.file("s.sock"), "cache", "stats"});
  CHECK(r.code == 1);
  CHECK_THAT(r.err, Catch::Contains("cache.stats: compile failed: bad IR"));
}

TEST_CASE("cli: status - cache stats - explain - doctor and metrics against a daemon") {
  test::TempDir dir;
  int stage = 0;
  test::FakeDaemon d(dir.file("s.sock"), [&](const json& r) { return fake_fdod(r, stage); });
  std::vector<std::string> base = {"--socket", dir.file("s.sock")};
  auto run = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = base;
    a.insert(a.end(), extra.begin(), extra.end());
    return fdoctl(a);
  };
  Result status = run({"status", "--json"});
  REQUIRE(status.code == 0);
  CHECK(status.doc()["health"]["pid"] == 7);
  CHECK(status.doc()["profiles"]["count"] == 1);
  Result human = run({"status"});
  CHECK_THAT(human.out, Catch::Contains("ok, version 0.1.0, pid 7"));
  CHECK_THAT(human.out, Catch::Contains("1 compile, 1 exec"));

  Result stats = run({"cache", "stats", "--json"});
  REQUIRE(stats.code == 0);
  CHECK(stats.doc()["prepares"] == 4);

  Result explain = run({"explain", kIk.substr(0, 6)});
  INFO(explain.err);
  REQUIRE(explain.code == 0);
  CHECK_THAT(explain.out, Catch::Contains("IK  " + kIk));
  CHECK_THAT(explain.out, Catch::Contains("VK  " + kIk + "-v"));
  CHECK_THAT(explain.out,
             Catch::Contains("CK  " + kIk + "-" + std::string(32, 'd') + "  profile v1 optimized"));
  CHECK_THAT(explain.out, Catch::Contains("profile_rewritten"));
  CHECK_THAT(explain.out, Catch::Contains("v0->v1"));
  CHECK_THAT(explain.out, !Catch::Contains("--limit 0 shows them all"));
  Result explain_json = run({"explain", kIk, "--json"});
  CHECK(explain_json.doc()["records"].size() == 2);
  Result last = run({"explain", kIk, "--limit", "1"});
  REQUIRE(last.code == 0);
  CHECK_THAT(last.out,
             Catch::Contains("(the last 1 of 2 recorded stages; --limit 0 shows them all)"));
  CHECK_THAT(last.out, !Catch::Contains("new_program"));
  CHECK(run({"explain", kIk, "--json", "-l", "1"}).doc()["records"].size() == 1);
  CHECK(run({"explain", kIk, "--json", "--limit", "0"}).doc()["records"].size() == 2);
  CHECK(run({"explain", "0000"}).code == 4);

  Result doctor = run({"doctor", "--json"});
  REQUIRE(doctor.code == 0);
  json dj = doctor.doc();
  CHECK(dj["source"] == "fdod");
  CHECK(dj["target"]["cpu"] == "znver3");
  CHECK(dj["findings"][0]["severity"] == "problem");
  CHECK_THAT(dj["findings"][0]["what"].get<std::string>(), Catch::Contains("virtual PMU"));

  Result metrics = run({"metrics"});
  CHECK(metrics.code == 1); // the fake has no metrics method
  CHECK_THAT(metrics.err, Catch::Contains("older than fdoctl"));
}

TEST_CASE("cli: doctor without a daemon probes this process and still exits 0") {
  test::TempDir dir;
  Result r = fdoctl({"--socket", dir.file("none.sock"), "doctor", "--json"});
  REQUIRE(r.code == 0);
  json j = r.doc();
  CHECK(j["source"] == "local");
  CHECK(j["daemon"]["reachable"] == false);
  CHECK(j["perf"]["events"].is_array());
  CHECK(j["findings"][0]["topic"] == "fdod");
  Result human = fdoctl({"--socket", dir.file("none.sock"), "doctor"});
  CHECK(human.code == 0);
  CHECK_THAT(human.out, Catch::Contains("fdod is not reachable"));
  CHECK_THAT(human.out, Catch::Contains("software clocks"));
}

TEST_CASE("cli: programs - program delete - profile delete and names in profiles") {
  test::TempDir dir;
  int stage = 0;
  test::FakeDaemon d(dir.file("s.sock"), [&](const json& r) { return fake_fdod(r, stage); });
  auto run = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = {"--socket", dir.file("s.sock")};
    a.insert(a.end(), extra.begin(), extra.end());
    return fdoctl(a);
  };
  Result programs = run({"programs"});
  REQUIRE(programs.code == 0);
  CHECK_THAT(programs.out, Catch::Contains(kIk.substr(0, 16)) && Catch::Contains("interp") &&
                               Catch::Contains("1 program(s)"));
  CHECK(run({"programs", "--json"}).doc()["programs"][0]["name"] == "interp");

  Result profiles = run({"profiles"});
  REQUIRE(profiles.code == 0);
  CHECK_THAT(profiles.out, Catch::Contains("programs") && Catch::Contains("interp"));

  Result del = run({"program", "delete", kIk.substr(0, 8)});
  INFO(del.err);
  REQUIRE(del.code == 0);
  CHECK_THAT(del.out, Catch::Contains("deleted program " + kIk));
  json sent = d.requests().back();
  CHECK(sent["method"] == "program.delete");
  CHECK(sent["params"]["program"] == kIk);
  CHECK(run({"program", "delete", "0000"}).code == 4); // no such program of yours

  Result pdel = run({"profile", "delete", kPk1.substr(0, 10)});
  REQUIRE(pdel.code == 0);
  CHECK_THAT(pdel.out, Catch::Contains("deleted profile " + kPk1 + ": 2 version(s)"));
  CHECK(d.requests().back()["params"]["profile_key"] == kPk1);
  CHECK(run({"program", "dlete", "x"}).code == 2);
  CHECK_THAT(run({"program", "dlete", "x"}).err, Catch::Contains("did you mean 'delete'?"));
}

TEST_CASE("cli: backup and restore round-trip the store with its history") {
  test::TempDir dir;
  std::string from = dir.file("from"), to = dir.file("to"), copy = dir.file("copy.db");
  std::filesystem::create_directories(from);
  std::filesystem::create_directories(to);
  make_store(from);
  std::string nobody = dir.file("none.sock");
  CHECK(fdoctl({"--socket", nobody, "backup", copy}).code == 2); // needs --state-dir
  Result b = fdoctl({"--state-dir", from, "backup", copy});
  INFO(b.err);
  REQUIRE(b.code == 0);
  CHECK_THAT(b.out, Catch::Contains("backed up " + from + "/profiles.db to " + copy));
  CHECK(fdoctl({"--state-dir", from, "backup", copy}).code == 1); // exists: not overwritten

  Result r = fdoctl({"--socket", nobody, "--state-dir", to, "--json", "restore", copy});
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK(r.doc()["file"] == copy);
  Result hist =
      fdoctl({"--offline", "--state-dir", to, "--json", "profile", "history", kPk1.substr(0, 8)});
  REQUIRE(hist.code == 0);
  json versions = hist.doc()["versions"];
  REQUIRE(versions.size() == 2);
  CHECK(versions[0]["reason"] == "feedback: enough counts");
  CHECK(versions[1]["reason"] == "feedback: drift 0.3");
  CHECK(versions[1]["program"] == kIk);

  // Never behind a running daemon's back: it restores through its own store
  // (store.restore, with the copy's absolute path), and the file under
  // --state-dir is not touched.
  auto before = std::filesystem::last_write_time(to + "/profiles.db");
  test::FakeDaemon d(dir.file("s.sock"), [&](const json& q) -> json {
    if (q["method"] == "store.restore")
      return {{"result", {{"file", q["params"]["file"]}, {"pages", 7}, {"bytes", 28672}}}};
    return {{"error", {{"code", -32601}, {"message", "method not found"}}}};
  });
  Result online = fdoctl({"--socket", dir.file("s.sock"), "--state-dir", to, "restore", copy});
  INFO(online.err);
  CHECK(online.code == 0);
  CHECK_THAT(online.out, Catch::Contains("restored the running fdod's store from " + copy));
  REQUIRE(d.requests().size() == 1);
  CHECK(d.requests()[0]["params"]["file"] == copy);
  CHECK(std::filesystem::last_write_time(to + "/profiles.db") == before);
}

TEST_CASE("cli: gc with fdod stopped collects in --state-dir, dry run first") {
  test::TempDir dir;
  const std::string state = dir.path(), nobody = dir.file("none.sock");
  make_store(state);
  {
    auto store = ps::ProfileStore::open(state + "/profiles.db");
    REQUIRE(store);
    REQUIRE(store->pin(kPk1));
    auto db = ps::sqlite::Connection::open(state + "/profiles.db", ps::sqlite::Access::read_write);
    REQUIRE(db);
    REQUIRE(db->exec("UPDATE profiles SET updated_at = 5"));
  }
  // One cached object of the registered program, one of a program that is gone.
  const std::string orphan = std::string(64, 'e') + "-v";
  const std::string kept_file = state + "/cache/objects/cc/" + kIk + "-v.obj",
                    orphan_file = state + "/cache/objects/ee/" + orphan + ".obj";
  std::filesystem::create_directories(state + "/cache/objects/cc");
  std::filesystem::create_directories(state + "/cache/objects/ee");
  std::ofstream(kept_file) << "object";
  std::ofstream(orphan_file) << "object";

  auto gc = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = {"--socket", nobody, "--state-dir", state, "--json", "gc"};
    a.insert(a.end(), extra.begin(), extra.end());
    return fdoctl(a);
  };
  CHECK(gc({"--dry-run"}).code == 2); // which age is not known without fdod
  CHECK(gc({"--dry-run", "--max-age", "3x"}).code == 2);
  Result dry = gc({"--dry-run", "--max-age", "1d"});
  INFO(dry.err);
  REQUIRE(dry.code == 0);
  json d = dry.doc();
  CHECK(d["programs"].empty()); // kIk was used just now
  REQUIRE(d["profiles"].size() == 1);
  CHECK(d["profiles"][0]["profile_key"] == kPk2); // kPk1 is pinned
  CHECK(d["cache_objects"] == json::array({orphan}));
  CHECK(std::filesystem::exists(orphan_file));

  Result run = gc({"--max-age", "24h"});
  INFO(run.err);
  REQUIRE(run.code == 0);
  CHECK(run.doc()["profiles"].size() == 1);
  CHECK_FALSE(std::filesystem::exists(orphan_file));
  CHECK(std::filesystem::exists(kept_file));
  auto store = ps::ProfileStore::open(state + "/profiles.db");
  REQUIRE(store);
  auto two = store->current(kPk2);
  REQUIRE(two);
  CHECK_FALSE(two->has_value());
  auto one = store->current(kPk1);
  REQUIRE(one);
  CHECK(one->has_value());
  auto prog = store->program(kIk);
  REQUIRE(prog);
  CHECK(prog->has_value());
}

TEST_CASE("cli: --store reads a PostgreSQL profile store offline - errors hide the password") {
  test::TempDir dir;
  SECTION("a path works like the store under --state-dir") {
    make_store_at(dir.file("elsewhere.db"));
    Result r = fdoctl({"--offline", "--store", dir.file("elsewhere.db"), "profiles", "--json"});
    REQUIRE(r.code == 0);
    CHECK(r.doc()["profiles"].size() == 2);
  }
  SECTION("postgresql://") {
    if (!fdo::test_support::PostgresServer::available()) {
      FDO_SKIP(fdo::test_support::PostgresServer::skip_reason());
    }
    fdo::test_support::PostgresServer server;
    const std::string uri = "postgresql:///postgres?host=" + server.socket_dir() + "&user=postgres";
    make_store_at(uri);
    Result r = fdoctl({"--offline", "--store", uri, "profiles", "--json"});
    INFO(r.err);
    REQUIRE(r.code == 0);
    json j = r.doc();
    REQUIRE(j["profiles"].size() == 2);
    CHECK(j["profiles"][0]["profile_key"] == kPk1);
    CHECK(j["profiles"][0]["version"] == 2);
    Result hist = fdoctl({"--offline", "--store", uri, "profile", "history", kPk1, "--json"});
    INFO(hist.err);
    CHECK(hist.code == 0);
  }
  SECTION("an unreachable server: exit non-zero, endpoint named, password not shown") {
    Result r =
        fdoctl({"--offline", "--store", "postgresql://fdo:s3cret@127.0.0.1:1/fdo", "profiles"});
    CHECK(r.code != 0);
    CHECK_THAT(r.err, Catch::Contains("127.0.0.1"));
    CHECK_THAT(r.err, !Catch::Contains("s3cret"));
  }
}
