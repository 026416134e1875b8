#include "fdo/daemon/block_samples.h"

#include <catch2/catch.hpp>

using namespace fdo;
using namespace fdo::daemon;
using nlohmann::json;

TEST_CASE("block and branch tallies are summed", "[daemon][blocks]") {
  BlockTallies r;
  r.blocks["cpu-clock"]["run"] = {{0, 3}, {2, 40}};
  r.blocks["branch-misses"]["run"] = {{2, 9}};
  r.branches["run"][1] = {{"branch-misses", 9}, {"cpu-clock", 40}};
  BlockTallies t;
  CHECK(t.empty());
  t.add(r);
  CHECK(t == r);
  t.add(r);
  CHECK(t.blocks["cpu-clock"]["run"][2] == 80);
  CHECK(t.blocks["branch-misses"]["run"][2] == 18);
  CHECK(t.branches["run"][1]["cpu-clock"] == 80);
  CHECK(t.branches["run"][1]["branch-misses"] == 18);
  CHECK_FALSE(t.empty());
}

TEST_CASE("branch statistics join the compile's weights with the sampled misses",
          "[daemon][blocks]") {
  CHECK(is_branch_miss_event("branch-misses"));
  CHECK(is_branch_miss_event("BR_MISP_RETIRED:ALL_BRANCHES"));
  CHECK(is_branch_miss_event("amd64_fam19h_zen3::RETIRED_BRANCH_INSTRUCTIONS_MISPREDICTED"));
  CHECK_FALSE(is_branch_miss_event("L1-icache-load-misses"));
  CHECK_FALSE(is_branch_miss_event("cpu-clock"));

  BlockTallies t;
  t.branches["run"][0]["branch-misses"] = 30;
  t.branches["run"][0]["cpu-clock"] = 500; // not a miss
  t.branches["run"][3]["branch-misses"] = 4;
  t.branches["helper"][1]["branch-misses"] = 2; // no weights known
  std::map<std::string, std::vector<BranchStat>> weights{
      {"run", {BranchStat{0, 480, 520}, BranchStat{1, 10, 990}}}};
  auto stats = branch_stats(weights, t);
  REQUIRE(stats["run"].size() == 3);
  CHECK(stats["run"][0].misses == 30);
  CHECK(stats["run"][0].taken == 480);
  CHECK(stats["run"][1].misses == 0);
  CHECK(stats["run"][2].index == 3);
  CHECK(stats["run"][2].taken + stats["run"][2].not_taken == 0);
  CHECK(stats["helper"][0].misses == 2);

  // The document's record: misses only (never the clock), weights where known.
  json rec = branches_record(t, weights);
  CHECK(rec["run"]["0"] ==
        json{{"misses", {{"branch-misses", 30}}}, {"taken", 480}, {"not_taken", 520}});
  CHECK(rec["run"]["3"] == json{{"misses", {{"branch-misses", 4}}}});
  t.blocks["cpu-clock"]["run"][2] = 7;
  CHECK(blocks_record(t) == json{{"cpu-clock", {{"run", {{"2", 7}}}}}});
}
