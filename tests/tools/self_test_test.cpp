// `fdoctl doctor --self-test`'s verdicts (self_test.h) on recorded results:
// a host with a PMU and a branch stack where every link holds, the same host
// with one link broken (the links after it are untested, not failed), a CPU
// without a branch stack, and a host without a PMU (this project's machines).
#include "fdo/ctl/self_test.h"

#include <catch2/catch.hpp>
#include <map>

using namespace fdo;
using namespace fdo::ctl;
using nlohmann::json;

namespace {

json events(const std::string& hw_status, bool branch_stack) {
  json out = json::array();
  out.push_back(
      {{"name", "cpu-clock"}, {"status", "available"}, {"errno", 0}, {"branch_stack", false}});
  for (const char* e : {"branch-misses", "L1-icache-load-misses"})
    out.push_back({{"name", e},
                   {"status", hw_status},
                   {"errno", hw_status == "available" ? 0 : 2},
                   {"branch_stack", hw_status == "available" && branch_stack &&
                                        std::string(e) == "branch-misses"}});
  return out;
}

json stage(const char* mode, int version, double exec_ns, const json& evs, const std::string& fn) {
  return {{"mode", mode},
          {"profile_version", version},
          {"exec_ns", exec_ns},
          {"samples",
           {{"events", evs},
            {"clock_event", "cpu-clock"},
            {"functions", {{fn, 40}}},
            {"recorded", 40}}}};
}

json version(int v, json profile, const std::string& reason) {
  return {{"version", v}, {"reason", reason}, {"profile", std::move(profile)}};
}

// What a host with a PMU and a branch stack reports when every link holds.
SelfTestRun pmu_host(bool branch_stack = true) {
  SelfTestRun run;
  run.capabilities = {{"fdo_version", "1.0"},
                      {"target", {{"cpu", "icelake-server"}}},
                      {"perf", {{"perf_event_paranoid", 1}, {"kernel_pmus", {"cpu", "software"}}}}};
  const json evs = events("available", branch_stack);
  for (SelfTestProgram* p : {&run.branch, &run.icache}) {
    const std::string fn = p == &run.branch ? "run" : "hot0";
    p->stages.push_back(stage("instrumented", 1, 30e6, evs, fn));
    p->stages.push_back(stage("instrumented", 1, 30e6, evs, fn));
    for (int i = 0; i < 4; ++i)
      p->stages.push_back(stage("optimized", 2, 20e6, evs, fn));
    for (int i = 0; i < 4; ++i)
      p->stages.push_back(stage("optimized", 3, 16e6, evs, fn));
  }
  run.branch.versions = {
      version(1, json::object(), "program registered"),
      version(2, {{"functions", {{"run", {{"counts", {1, 2}}}}}}}, "counts from 2 stages"),
      version(3,
              {{"functions", {{"run", {{"unpredictable", {0}}}}}},
               {"hardware",
                {{"sampling",
                  {{"misses", {{"branch-misses", {{"run", 60}}}}},
                   {"branches",
                    {{"run",
                      {{"0", {{"misses", {{"branch-misses", 55}}}}},
                       {"1", {{"misses", {{"branch-misses", 5}}}}}}}}}}}}}},
              "run branch 0 (55 miss samples) marked !unpredictable")};
  json icache_misses = {{"hot0", 20}, {"hot1", 20}, {"hot2", 19}, {"hot3", 21}, {"cold0", 2}};
  run.icache.versions = {
      version(1, json::object(), "program registered"),
      version(2, {{"functions", json::object()}}, "counts from 2 stages"),
      version(
          3,
          {{"functions", {{"hot0", {{"layout", "hot"}}}, {"hot1", {{"layout", "hot"}}}}},
           {"hardware", {{"sampling", {{"misses", {{"L1-icache-load-misses", icache_misses}}}}}}}},
          "i-cache layout: 4 functions hot")};
  return run;
}

std::map<std::string, Link> by_name(const std::vector<Link>& links) {
  std::map<std::string, Link> out;
  for (const Link& l : links)
    out[l.name] = l;
  return out;
}

int with_status(const std::vector<Link>& links, LinkStatus s) {
  int n = 0;
  for (const Link& l : links)
    n += l.status == s;
  return n;
}

} // namespace

TEST_CASE("self-test: a host with a PMU and a branch stack passes every link",
          "[doctor][self_test]") {
  const SelfTestRun run = pmu_host();
  const auto links = evaluate_self_test(run);
  for (const Link& l : links)
    INFO(l.name << ": " << std::string(to_string(l.status)) << " " << l.detail);
  CHECK(links.size() == 14);
  CHECK(with_status(links, LinkStatus::pass) == 14);
  auto l = by_name(links);
  CHECK(l["miss samples land on the mispredicting IR branch"].detail ==
        "branch 0 of run holds 55 of 60 (expected branch 0)");
  CHECK(l["the rewrite marks the branch !unpredictable"].detail == "profile v3");
  CHECK(l["the effect of the mark is timed"].detail ==
        "median stage 20.00 ms before, 16.00 ms after (0.80x, 4+4 stages)");
  CHECK(l["miss samples land in the hot functions"].detail == "hot0..hot3 hold 98%");
  const std::string report = render_self_test(run, links);
  CHECK_THAT(report, Catch::Contains("host: fdo 1.0, cpu icelake-server, perf_event_paranoid 1, "
                                     "kernel PMUs: cpu software"));
  CHECK_THAT(report, Catch::Contains("[pass]     branch stack (LBR) on branch-misses"));
  CHECK_THAT(report, Catch::EndsWith("14 passed, 0 failed, 0 untested\n"));
  CHECK(self_test_json(run, links)["links"].size() == 14);
}

TEST_CASE("self-test: a broken link fails and the ones after it are untested",
          "[doctor][self_test]") {
  SelfTestRun run = pmu_host();
  // The misses land on the latch instead: attribution is wrong.
  json& branches = run.branch.versions[2]["profile"]["hardware"]["sampling"]["branches"]["run"];
  branches["1"]["misses"]["branch-misses"] = 50;
  branches["0"]["misses"]["branch-misses"] = 10;
  auto l = by_name(evaluate_self_test(run));
  CHECK(l["miss samples land on the mispredicting IR branch"].status == LinkStatus::fail);
  CHECK(l["miss samples land on the mispredicting IR branch"].detail ==
        "branch 1 of run holds 50 of 60 (expected branch 0)");
  CHECK(l["the rewrite marks the branch !unpredictable"].status == LinkStatus::untested);
  CHECK(l["the rewrite marks the branch !unpredictable"].detail ==
        "needs: miss samples land on the mispredicting IR branch");
  CHECK(l["the rewrite lays the hot functions out together"].status == LinkStatus::pass);

  // No layout in any version: that link fails and names the rewrites.
  run = pmu_host();
  run.icache.versions[2]["profile"]["functions"] = json::object();
  l = by_name(evaluate_self_test(run));
  CHECK(l["the rewrite lays the hot functions out together"].status == LinkStatus::fail);
  CHECK_THAT(l["the rewrite lays the hot functions out together"].detail,
             Catch::Contains("v3: i-cache layout: 4 functions hot"));
  CHECK(l["the effect of the layout is timed"].status == LinkStatus::untested);
}

TEST_CASE("self-test: without a branch stack attribution is by IP, reported, not failed",
          "[doctor][self_test]") {
  auto l = by_name(evaluate_self_test(pmu_host(false)));
  CHECK(l["branch stack (LBR) on branch-misses"].status == LinkStatus::untested);
  CHECK_THAT(l["branch stack (LBR) on branch-misses"].detail, Catch::Contains("skid"));
  CHECK(l["the rewrite marks the branch !unpredictable"].status == LinkStatus::pass);
}

TEST_CASE("self-test: a host without a PMU says which links it cannot test and why",
          "[doctor][self_test]") {
  SelfTestRun run = pmu_host();
  const json evs = events("no_pmu", false);
  for (SelfTestProgram* p : {&run.branch, &run.icache}) {
    for (json& st : p->stages)
      st["samples"]["events"] = evs;
    for (json& v : p->versions)
      v["profile"].erase("hardware");
  }
  const auto links = evaluate_self_test(run);
  auto l = by_name(links);
  CHECK(l["software clock samples arrive"].status == LinkStatus::pass);
  CHECK(l["clock samples land in the program's function"].status == LinkStatus::pass);
  CHECK(l["branch-misses opens"].status == LinkStatus::untested);
  CHECK_THAT(l["branch-misses opens"].detail,
             Catch::StartsWith("no_pmu (errno 2): the kernel has no PMU"));
  CHECK(l["branch-miss samples arrive"].detail == "needs: branch-misses opens");
  CHECK(l["L1-icache-load-misses opens"].status == LinkStatus::untested);
  CHECK(l["the effect of the layout is timed"].detail == "needs: L1-icache-load-misses opens");
  CHECK(with_status(links, LinkStatus::fail) == 0);
  CHECK(with_status(links, LinkStatus::pass) == 3);

  SelfTestRun down;
  down.daemon_error = "fdod exited at start: bad config";
  const auto none = evaluate_self_test(down);
  REQUIRE(none.size() == 1);
  CHECK(none[0].status == LinkStatus::fail);
}

TEST_CASE("self-test: the programs are valid IR with the branch and functions the checks name",
          "[doctor][self_test]") {
  const std::string branch = kSelfTestBranchIr;
  CHECK_THAT(branch, Catch::Contains("define i64 @run(i64 %n)"));
  const std::string icache = self_test_icache_ir();
  for (int h = 0; h < kSelfTestHotFunctions; ++h)
    CHECK_THAT(icache, Catch::Contains("define i64 @hot" + std::to_string(h) + "(i64 %v0)"));
  CHECK_THAT(icache, Catch::Contains("define i64 @run(i64 %n)"));
  CHECK(icache.size() > 300000); // about 12 KB of code a function
}
