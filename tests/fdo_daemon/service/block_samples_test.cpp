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

TEST_CASE("only branch-miss samples on a branch change the branch statistics", "[daemon][blocks]") {
  // has_branch_misses says when branch_stats' answer can differ from the
  // weights alone (the fold keeps it between stages until then).
  std::map<std::string, std::vector<BranchStat>> weights{
      {"run", {BranchStat{0, 480, 520}, BranchStat{1, 10, 990}}}};
  BlockTallies clock_only;
  clock_only.blocks["cpu-clock"]["run"][2] = 40;
  clock_only.branches["run"][0]["cpu-clock"] = 40;
  CHECK_FALSE(has_branch_misses(clock_only));
  auto same = [](const std::vector<BranchStat>& a, const std::vector<BranchStat>& b) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i)
      if (a[i].index != b[i].index || a[i].taken != b[i].taken ||
          a[i].not_taken != b[i].not_taken || a[i].misses != b[i].misses)
        return false;
    return true;
  };
  auto with_clock = branch_stats(weights, clock_only);
  REQUIRE(with_clock.size() == 1);
  CHECK(same(with_clock["run"], branch_stats(weights, BlockTallies{})["run"]));
  BlockTallies misses = clock_only;
  misses.branches["run"][1]["BR_MISP_RETIRED:ALL_BRANCHES"] = 3;
  CHECK(has_branch_misses(misses));
  CHECK(branch_stats(weights, misses)["run"][1].misses == 3);
}
