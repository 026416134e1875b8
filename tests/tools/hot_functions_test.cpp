#include "fdo/ctl/cs_summary.h"
#include "fdo/ctl/gpu_view.h"
#include "fdo/ctl/hot_functions.h"

#include <catch2/catch.hpp>

using namespace fdo;
using namespace fdo::ctl;
using nlohmann::json;

TEST_CASE("profile show: hottest functions by sampled time share, with their misses",
          "[fdoctl][sampling]") {
  ProfileDoc doc;
  CHECK(render_hot_functions(doc).empty()); // no sampling record: nothing to add

  doc.functions["fdo:fdo.local.1"].source_name = "interp.c:step";
  doc.functions["main"];
  doc.hardware["branch_miss_rate"] = 0.1;
  doc.hardware["sampling"] = {
      {"event", "cpu-clock"},
      {"stages", 3},
      {"samples", 200},
      {"outside_samples", 12},
      {"time_share", {{"main", 0.25}, {"fdo:fdo.local.1", 0.75}}},
      {"misses", {{"branch-misses", {{"fdo:fdo.local.1", 30}, {"main", 10}, {"cold", 5}}}}}};
  std::string out = render_hot_functions(doc);
  INFO(out);
  CHECK_THAT(out, Catch::Contains("200 cpu-clock samples in program code over 3 stages, 12 "
                                  "outside it"));
  // Source names, hottest first; a function with misses but no time share listed last.
  auto step = out.find("interp.c:step (fdo:fdo.local.1)");
  auto main = out.find("\nmain ");
  auto cold = out.find("\ncold ");
  REQUIRE(step != std::string::npos);
  REQUIRE(main != std::string::npos);
  REQUIRE(cold != std::string::npos);
  CHECK(step < main);
  CHECK(main < cold);
  CHECK_THAT(out, Catch::Contains("branch-misses samples"));
  CHECK_THAT(out, Catch::Contains("30 (66.7%)"));
  CHECK_THAT(out, Catch::Contains("75.0%"));

  // At most `limit` rows, and it says how many were left out.
  std::string one = render_hot_functions(doc, 1);
  CHECK(one.find("\nmain ") == std::string::npos);
  CHECK_THAT(one, Catch::Contains("(2 more functions)"));
}

TEST_CASE("profile show: the hot functions' most-missed branches, marked ones flagged",
          "[fdoctl][sampling][blocks]") {
  ProfileDoc doc;
  doc.functions["fdo:fdo.local.1"].source_name = "interp.c:step";
  doc.functions["fdo:fdo.local.1"].unpredictable = {4};
  doc.functions["main"];
  doc.hardware["sampling"] = {
      {"event", "cpu-clock"},
      {"stages", 3},
      {"samples", 200},
      {"outside_samples", 0},
      {"time_share", {{"main", 0.25}, {"fdo:fdo.local.1", 0.75}}},
      {"misses", json::object()},
      {"branches",
       {{"fdo:fdo.local.1",
         {{"4", {{"misses", {{"branch-misses", 40}}}, {"taken", 510}, {"not_taken", 490}}},
          {"2", {{"misses", {{"branch-misses", 3}}}}}}},
        {"main", {{"0", {{"misses", {{"branch-misses", 1}}}}}}}}}};
  std::string out = render_hot_functions(doc);
  INFO(out);
  CHECK_THAT(out, Catch::Contains("sampled branch misses of the hottest functions"));
  const auto marked = out.find("interp.c:step (fdo:fdo.local.1) #4");
  const auto other = out.find("interp.c:step (fdo:fdo.local.1) #2");
  REQUIRE(marked != std::string::npos);
  REQUIRE(other != std::string::npos);
  CHECK(marked < other); // most missed first
  CHECK(out.find("!unpredictable", marked) < other);
  CHECK_THAT(out, Catch::Contains("51.0%"));
  CHECK_THAT(out, Catch::Contains("main #0"));

  // Only the listed (hottest) functions' branches.
  std::string one = render_hot_functions(doc, 1);
  CHECK(one.find("main #0") == std::string::npos);
  // Documents without the member show no such table.
  doc.hardware["sampling"].erase("branches");
  CHECK(render_hot_functions(doc).find("sampled branch misses") == std::string::npos);
}

TEST_CASE("profile show: the i-cache layout by source name", "[fdoctl][sampling][layout]") {
  ProfileDoc doc;
  doc.functions["main"];
  CHECK(render_code_layout(doc).empty());
  doc.functions["fdo:fdo.local.1"].source_name = "interp.c:step";
  doc.functions["fdo:fdo.local.1"].layout = FunctionLayout::hot;
  doc.functions["usage"].layout = FunctionLayout::cold;
  const std::string out = render_code_layout(doc);
  INFO(out);
  CHECK_THAT(out,
             Catch::Contains("hot (together, first in the text): interp.c:step (fdo:fdo.local.1)"));
  CHECK_THAT(out, Catch::Contains("cold (optimized for size, last): usage"));
  CHECK(out.find("main") == std::string::npos);
}

TEST_CASE("profile show: context-sensitive counts per function by source name", "[fdoctl][cs]") {
  ProfileDoc doc;
  doc.functions["fdo:fdo.local.1"].source_name = "interp.c:step";
  CHECK(render_cs_functions(doc).empty()); // no CS round: nothing shown
  const std::uint64_t cs = kCsHashFlag | 9;
  doc.cs_functions["fdo:fdo.local.1"] = FunctionProfile{cs, {300, 600}};
  doc.cs_functions["main"] = FunctionProfile{cs, {100}};
  const std::vector<CsFunctionSummary> s = cs_summary(doc);
  REQUIRE(s.size() == 2);
  CHECK(s[0].name == "fdo:fdo.local.1"); // most counts first
  CHECK(s[0].shown == "interp.c:step (fdo:fdo.local.1)");
  CHECK(s[0].counters == 2);
  CHECK(s[0].total == 900);
  CHECK(s[1].shown == "main");
  const std::string out = render_cs_functions(doc);
  INFO(out);
  CHECK_THAT(out, Catch::Contains("context-sensitive counts (cs_functions): 2 functions, 1,000 "
                                  "counts in total"));
  CHECK_THAT(out, Catch::Contains("interp.c:step (fdo:fdo.local.1)"));
  CHECK_THAT(out, Catch::Contains("90.0%"));
  CHECK(render_cs_functions(doc, 1).find("(1 more functions)") != std::string::npos);
}

TEST_CASE("profile show's GPU part: kept bounds, tuned launches and trials", "[gpu_view]") {
  ProfileDoc doc;
  CHECK(render_gpu_profile(doc.gpu).empty());
  doc.gpu.launch_bounds.push_back({"sm_90", "saxpy", 256, 0});
  doc.gpu.launches.push_back(
      GpuLaunchRecord{"sm_90",
                      "saxpy",
                      1 << 20,
                      {{528, 1, 1}, {256, 1, 1}, 0.0123},
                      {{{528, 1, 1}, {256, 1, 1}, 0.0123}, {{132, 1, 1}, {1024, 1, 1}, 0.02}}});
  doc.gpu.trials.push_back({{"sm_90", "saxpy", 256, 2}, TrialVerdict::accepted, 0.8, 12});
  const std::string text = render_gpu_profile(doc.gpu);
  CHECK_THAT(text, Catch::Contains("GPU: 1 kept launch bounds, 1 tuned launches, 1 trials"));
  CHECK_THAT(text, Catch::Contains("256 threads"));
  CHECK_THAT(text, Catch::Contains("256 threads, 2 blocks/SM"));
  CHECK_THAT(text, Catch::Contains("1048576"));
  CHECK_THAT(text, Catch::Contains("0.0123"));
  CHECK_THAT(text, Catch::Contains("accepted"));

  // Dimensions print as many as are not 1: 528, 64x4, 8x8x2.
  doc.gpu.launches.push_back(GpuLaunchRecord{
      "sm_90", "stencil", 4096, {{64, 4, 1}, {8, 8, 2}, 0.5}, {{{64, 4, 1}, {8, 8, 2}, 0.5}}});
  const std::string more = render_gpu_profile(doc.gpu);
  CHECK_THAT(more, Catch::Contains("64x4 "));
  CHECK_THAT(more, Catch::Contains("8x8x2"));
  CHECK_THAT(more, !Catch::Contains("64x4x1"));
  CHECK_THAT(more, !Catch::Contains("528x"));
}
