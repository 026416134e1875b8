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
