#include "fdo/ctl/stages.h"

#include "fdo/util/profile.h"

#include <algorithm>
#include <catch2/catch.hpp>

using namespace fdo::ctl;
using nlohmann::json;

namespace {

const std::string kIk(64, 'a');

// An execute result shaped as schemas/methods/execute.json describes it.
json execute_result(int number, const std::string& storage_key, const std::string& mode,
                    int version, std::uint64_t exec_ns, bool recompiled = false,
                    json events = json::array(), json rewritten = nullptr) {
  return {{"entry", "run"},
          {"returns", "i64"},
          {"value", 42},
          {"stage",
           {{"number", number},
            {"program", kIk},
            {"profile_key", std::string(64, 'b')},
            {"cache_key", storage_key},
            {"storage_key", storage_key},
            {"profile_version", version},
            {"mode", mode},
            {"cache",
             {{"outcome", recompiled ? "compiled" : "memory_hit"},
              {"reason", recompiled ? "new_program" : "cache_key"},
              {"detail", "d"}}},
            {"recompiled", recompiled},
            {"compile_ms", recompiled ? 12.5 : 0.0},
            {"exec_ns", exec_ns},
            {"counters",
             {{"wall_ns", exec_ns}, {"thread_cpu_ns", exec_ns}, {"events", std::move(events)}}},
            {"profile_rewritten", std::move(rewritten)},
            {"policy", "p"}}}};
}

StageRow row(const json& j) {
  auto r = stage_row(j);
  REQUIRE(r);
  return *r;
}

} // namespace

TEST_CASE("a stage row reads every column from execute's result") {
  json events =
      json::array({{{"name", "branch-misses"}, {"value", 250}, {"status", "available"}},
                   {{"name", "branch-instructions"}, {"value", 10000}, {"status", "available"}}});
  StageRow r = row(execute_result(3, kIk + "-v", "instrumented", 0, 45'200'000, true, events,
                                  {{"from", 0}, {"to", 1}, {"reason", "enough counts"}}));
  CHECK(r.number == 3);
  CHECK(r.outcome == "compiled");
  CHECK(r.reason == "new_program");
  CHECK(r.recompiled);
  CHECK(r.compile_ms == 12.5);
  CHECK(r.exec_ns == 45'200'000);
  CHECK(r.branch_misses == 250u);
  CHECK(r.branch_instructions == 10000u);
  CHECK(r.rewritten_to == 1);
  std::vector<std::string> cells = stage_cells(r);
  REQUIRE(cells.size() == stage_columns().size());
  CHECK(cells[0] == "3");
  CHECK(cells[3] == "v0");
  CHECK(cells[5] == "yes");
  CHECK(cells[6] == "12.5");
  CHECK(cells[7] == "45.2 ms");
  CHECK(cells[8] == "250");
  CHECK(cells[9] == "2.50%");
  CHECK(cells[10] == "-"); // no lifecycle in this reply
  CHECK(cells[11] == "profile rewritten v0 -> v1");
}

TEST_CASE("branch-miss cells say n/a when the PMU did not count") {
  json events = json::array({{{"name", "branch-misses"},
                              {"value", nullptr},
                              {"status", "no_pmu"},
                              {"reason", "no PMU"}}});
  StageRow r = row(execute_result(0, kIk + "-v", "instrumented", 0, 1000, false, events));
  CHECK_FALSE(r.branch_misses);
  CHECK(r.branch_misses_status == "no_pmu: no PMU");
  std::vector<std::string> cells = stage_cells(r);
  CHECK(cells[8] == "n/a");
  CHECK(cells[9] == "n/a");
  CHECK(cells[6] == "-"); // not recompiled: no compile time
  StageRow uncounted = row(execute_result(0, kIk + "-v", "instrumented", 0, 1000));
  CHECK_THAT(uncounted.branch_misses_status, Catch::Contains("not counted"));
}

TEST_CASE("a malformed execute result names the field") {
  json j = execute_result(0, kIk + "-v", "instrumented", 0, 1);
  j["stage"].erase("exec_ns");
  auto r = stage_row(j);
  REQUIRE_FALSE(r);
  CHECK_THAT(r.error().message(), Catch::Contains("stage.exec_ns is missing"));
  j = execute_result(0, kIk + "-v", "instrumented", 0, 1);
  j["stage"]["cache"]["outcome"] = 5;
  auto r2 = stage_row(j);
  REQUIRE_FALSE(r2);
  CHECK_THAT(r2.error().message(), Catch::Contains("stage.cache.outcome is not a string"));
  CHECK_FALSE(stage_row(json{{"value", 1}}));
}

TEST_CASE("median") {
  CHECK(median({}) == 0);
  CHECK(median({5}) == 5);
  CHECK(median({9, 1, 5}) == 5);
  CHECK(median({1, 2, 3, 10}) == 2); // (2 + 3) / 2 rounded down
  CHECK(median({UINT64_MAX, UINT64_MAX}) == UINT64_MAX);
}

TEST_CASE("the summary groups stages by compiled output and compares medians") {
  std::string vk = kIk + "-v", ck1 = kIk + "-" + std::string(32, '1');
  std::vector<StageRow> rows = {
      row(execute_result(0, vk, "instrumented", 0, 100, true)),
      row(execute_result(1, vk, "instrumented", 0, 120, false, json::array(),
                         {{"from", 0}, {"to", 1}, {"reason", "r"}})),
      row(execute_result(2, ck1, "optimized", 1, 60, true)),
      row(execute_result(3, ck1, "optimized", 1, 50)),
      row(execute_result(4, ck1, "optimized", 1, 40)),
  };
  RunSummary s = summarize(rows);
  CHECK(s.stages == 5);
  CHECK(s.rewrites == 1);
  CHECK(s.recompiles == 2);
  CHECK(s.values_agree);
  REQUIRE(s.groups.size() == 2);
  CHECK(s.groups[0].stages == 2);
  CHECK(s.groups[0].median_exec_ns == 110);
  CHECK(s.groups[1].first_stage == 2);
  CHECK(s.groups[1].last_stage == 4);
  CHECK(s.groups[1].median_exec_ns == 50);
  REQUIRE(s.over_stage0);
  CHECK(s.over_stage0->ratio == Approx(110.0 / 50.0));
  CHECK(s.over_stage0->single_ratio == Approx(100.0 / 40.0));
  CHECK_FALSE(s.over_stage0->same_output);
  REQUIRE(s.over_first_optimized);
  CHECK(s.over_first_optimized->base_stage == 2);
  CHECK(s.over_first_optimized->ratio == Approx(1.0));
  CHECK(s.over_first_optimized->same_output);
  CHECK(s.over_first_optimized->single_ratio == Approx(60.0 / 40.0));

  std::string text = render_summary(s, rows);
  CHECK_THAT(text, Catch::Contains("5 stage(s), 1 profile rewrite(s), 2 compile(s); returned 42"));
  CHECK_THAT(text, Catch::Contains("speed-up of the last stage over stage 0: 2.20x"));
  CHECK_THAT(text, Catch::Contains("over the first optimized stage (2): 1.00x"));
  CHECK_THAT(text, Catch::Contains("v1 optimized"));
  CHECK_THAT(text, Catch::Contains("branch misses: n/a"));

  json j = to_json(s);
  CHECK(j["outputs"].size() == 2);
  CHECK(j["speedup_over_stage0"]["speedup"].get<double>() == Approx(2.2));
}

TEST_CASE("without an optimized stage the summary says how to get one") {
  std::vector<StageRow> rows = {row(execute_result(0, kIk + "-v", "instrumented", 0, 100, true))};
  RunSummary s = summarize(rows);
  CHECK_FALSE(s.over_first_optimized);
  CHECK(s.over_stage0->ratio == Approx(1.0));
  CHECK_THAT(render_summary(s, rows), Catch::Contains("no stage ran optimized code yet"));
  CHECK(to_json(s)["speedup_over_first_optimized"].is_null());
}

TEST_CASE("differing return values are flagged") {
  json a = execute_result(0, kIk + "-v", "instrumented", 0, 100, true);
  json b = execute_result(1, kIk + "-v", "instrumented", 0, 100);
  b["value"] = 7;
  std::vector<StageRow> rows = {row(a), row(b)};
  RunSummary s = summarize(rows);
  CHECK_FALSE(s.values_agree);
  CHECK_THAT(render_summary(s, rows), Catch::Contains("warning: stage 1 returned 7"));
}

TEST_CASE("stages: every compile mode fits the mode column the rows are printed at",
          "[fdoctl][stages]") {
  // Rows stream out as stages come in, at fixed widths: a longer mode
  // (cs_instrumented, the context-sensitive round's, on by default) would push
  // every later column of its row out of line.
  std::vector<Column> cols = stage_columns();
  auto mode =
      std::find_if(cols.begin(), cols.end(), [](const Column& c) { return c.header == "mode"; });
  REQUIRE(mode != cols.end());
  for (fdo::CompileMode m : {fdo::CompileMode::plain, fdo::CompileMode::instrumented,
                             fdo::CompileMode::optimized, fdo::CompileMode::cs_instrumented})
    CHECK(fdo::to_string(m).size() <= mode->min_width);
  // So does every lifecycle phase (docs/lifecycle.md).
  auto phase =
      std::find_if(cols.begin(), cols.end(), [](const Column& c) { return c.header == "phase"; });
  REQUIRE(phase != cols.end());
  for (const char* p : {"profiling", "cs_profiling", "optimized", "trial", "steady",
                        "reprofiling", "pinned", "failed"})
    CHECK(std::string(p).size() <= phase->min_width);
}

TEST_CASE("stages: the lifecycle's phase and the stage's transitions are shown",
          "[fdoctl][stages]") {
  json j = json::parse(R"({"value": 1, "stage": {"number": 2, "mode": "instrumented",
    "storage_key": "k", "profile_version": 0, "recompiled": false, "compile_ms": 0,
    "exec_ns": 10, "cache": {"outcome": "memory_hit", "reason": "cache_key"},
    "profile_rewritten": {"from": 0, "to": 1, "reason": "counts"},
    "lifecycle": {"phase": "cs_profiling", "transitions": [
      {"from": "profiling", "to": "cs_profiling", "cause": "counts_ready", "stage": 2,
       "version": 1, "time": "t", "detail": "d"}]}}})");
  auto r = stage_row(j);
  REQUIRE(r);
  CHECK(r->phase == "cs_profiling");
  std::vector<std::string> cells = stage_cells(*r);
  REQUIRE(cells.size() == stage_columns().size());
  CHECK(cells[10] == "cs_profiling");
  CHECK_THAT(cells.back(), Catch::Contains("profile rewritten v0 -> v1") &&
                               Catch::Contains("profiling->cs_profiling (counts_ready)"));
  // An fdod that reports no lifecycle: "-".
  j["stage"].erase("lifecycle");
  auto old = stage_row(j);
  REQUIRE(old);
  CHECK(stage_cells(*old)[10] == "-");
}
