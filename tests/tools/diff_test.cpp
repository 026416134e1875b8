#include "fdo/ctl/diff.h"

#include <catch2/catch.hpp>

using namespace fdo::ctl;
using fdo::FunctionProfile;
using fdo::ProfileDoc;

namespace {

ProfileDoc doc(std::map<std::string, FunctionProfile> functions) {
  ProfileDoc d;
  d.functions = std::move(functions);
  return d;
}

const FunctionDiff& find(const ProfileDiff& d, const std::string& name) {
  for (const auto& f : d.functions)
    if (f.name == name) return f;
  FAIL("no function " << name << " in the diff");
  throw 0;
}

} // namespace

TEST_CASE("identical profiles diff to nothing") {
  ProfileDoc a = doc({{"f", {1, {10, 90}, {}, ""}}});
  ProfileDiff d = diff_profiles(a, a);
  CHECK(d.knobs.empty());
  CHECK(d.changed == 0);
  CHECK(d.unchanged == 1);
  CHECK(d.compile_affecting_equal);
}

TEST_CASE("scaled counts keep their weights: only raw totals differ") {
  // Twice as long a run: same branch shape, so no weight moved.
  ProfileDoc a = doc({{"f", {1, {10, 90}, {}, ""}}});
  ProfileDoc b = doc({{"f", {1, {20, 180}, {}, ""}}});
  ProfileDiff d = diff_profiles(a, b);
  const FunctionDiff& f = find(d, "f");
  CHECK(f.change == FunctionChange::unchanged);
  CHECK(f.weights_changed == 0);
  CHECK(f.total_before == 100);
  CHECK(f.total_after == 200);
  CHECK_FALSE(d.compile_affecting_equal); // the counts the compiler sees differ
}

TEST_CASE("moved branch weights are listed with normalized figures") {
  ProfileDoc a = doc({{"f", {7, {50, 50, 0, 100}, {}, ""}}, {"g", {9, {5, 5}, {}, ""}}});
  ProfileDoc b = doc({{"f", {7, {90, 10, 0, 100}, {}, ""}}, {"g", {9, {5, 5}, {}, ""}}});
  ProfileDiff d = diff_profiles(a, b);
  const FunctionDiff& f = find(d, "f");
  REQUIRE(f.change == FunctionChange::changed);
  REQUIRE(f.weights_changed == 2);
  REQUIRE(f.counters.size() == 2);
  CHECK(f.counters[0].index == 0);
  CHECK(f.counters[0].weight_before == Approx(0.25));
  CHECK(f.counters[0].weight_after == Approx(0.45));
  CHECK(f.counters[1].index == 1);
  CHECK(f.counters[1].weight_after == Approx(0.05));
  CHECK(f.max_weight_change == Approx(0.20));
  CHECK(find(d, "g").change == FunctionChange::unchanged);
  CHECK(d.changed == 1);
  CHECK(d.unchanged == 1);
  CHECK(d.functions.front().name == "f"); // changed functions come first

  std::string text = render_diff(d, "title");
  CHECK_THAT(text, Catch::Contains("f  [changed]"));
  CHECK_THAT(text, Catch::Contains("25.0%"));
  CHECK_THAT(text, Catch::Contains("45.0%"));
  CHECK_THAT(text, Catch::Contains("+20.00 pts"));
  CHECK_THAT(text, Catch::Contains("1 changed, 0 added, 0 removed, 1 unchanged"));
  CHECK_THAT(text, !Catch::Contains("unchanged: g"));
  CHECK_THAT(render_diff(d, "title", Unchanged::list), Catch::Contains("unchanged: g"));
}

TEST_CASE("the threshold hides small moves - and a counter that starts firing always shows") {
  ProfileDoc a = doc({{"f", {1, {1000, 0, 500}, {}, ""}}});
  ProfileDoc b = doc({{"f", {1, {1000, 1, 505}, {}, ""}}});
  DiffOptions coarse;
  coarse.min_weight_change = 0.05;
  ProfileDiff d = diff_profiles(a, b, coarse);
  const FunctionDiff& f = find(d, "f");
  REQUIRE(f.weights_changed == 1); // counter 1: never -> ever
  CHECK(f.counters[0].index == 1);
  CHECK(f.counters[0].before == 0);
  CHECK(f.counters[0].after == 1);
}

TEST_CASE("at most max_counters_per_function are listed - but all are counted") {
  std::vector<std::uint64_t> ca, cb;
  for (int i = 0; i < 40; ++i) {
    ca.push_back(i % 2 ? 100 : 1);
    cb.push_back(i % 2 ? 1 : 100);
  }
  DiffOptions o;
  o.max_counters_per_function = 5;
  ProfileDiff d = diff_profiles(doc({{"f", {1, ca, {}, ""}}}), doc({{"f", {1, cb, {}, ""}}}), o);
  const FunctionDiff& f = find(d, "f");
  CHECK(f.weights_changed == 40);
  CHECK(f.counters.size() == 5);
  CHECK_THAT(render_diff(d, "t"), Catch::Contains("and 35 more counters moved"));
}

TEST_CASE("added - removed and re-laid-out functions") {
  ProfileDoc a = doc({{"old", {1, {1}, {}, ""}}, {"f", {1, {1, 2}, {}, ""}}});
  ProfileDoc b = doc({{"new", {2, {3, 4, 5}, {}, ""}}, {"f", {2, {1, 2, 3}, {}, ""}}});
  ProfileDiff d = diff_profiles(a, b);
  CHECK(find(d, "old").change == FunctionChange::removed);
  CHECK(find(d, "new").change == FunctionChange::added);
  const FunctionDiff& f = find(d, "f");
  CHECK(f.change == FunctionChange::changed);
  CHECK(f.layout_changed);
  CHECK(f.counters.empty()); // counters of different layouts are not comparable
  CHECK(d.added == 1);
  CHECK(d.removed == 1);
  std::string text = render_diff(d, "t");
  CHECK_THAT(text,
             Catch::Contains("CFG changed: hash 0000000000000001 -> 0000000000000002, 2 -> 3"));
}

TEST_CASE("knob and !unpredictable changes are reported exactly") {
  ProfileDoc a = doc({{"f", {1, {5, 5}, {1, 2}, ""}}});
  ProfileDoc b = a;
  b.knobs.size_level = 1;
  b.knobs.inline_threshold = 50;
  b.knobs.mode = fdo::CompileMode::instrumented;
  b.knobs.text_offset = 32;
  b.functions["f"].unpredictable = {2, 3};
  ProfileDiff d = diff_profiles(a, b);
  REQUIRE(d.knobs.size() == 4);
  CHECK(d.knobs[0].knob == "size_level");
  CHECK(d.knobs[0].before == 0);
  CHECK(d.knobs[0].after == 1);
  CHECK(d.knobs[1].knob == "inline_threshold");
  CHECK(d.knobs[1].before.is_null());
  CHECK(d.knobs[2].knob == "mode");
  CHECK(d.knobs[2].after == "instrumented");
  CHECK(d.knobs[3].knob == "text_offset");
  CHECK(d.knobs[3].before == 0);
  CHECK(d.knobs[3].after == 32);
  const FunctionDiff& f = find(d, "f");
  CHECK(f.change == FunctionChange::changed);
  CHECK(f.unpredictable_added == std::vector<std::uint32_t>{3});
  CHECK(f.unpredictable_removed == std::vector<std::uint32_t>{1});
  std::string text = render_diff(d, "t");
  CHECK_THAT(text, Catch::Contains("size_level: 0 -> 1"));
  CHECK_THAT(text, Catch::Contains("inline_threshold: unset -> 50"));
  CHECK_THAT(text, Catch::Contains("text_offset: 0 -> 32"));
  CHECK_THAT(text, Catch::Contains("!unpredictable added: 3"));
}

TEST_CASE("provenance alone is no compile-affecting change") {
  ProfileDoc a = doc({{"f", {1, {5, 5}, {}, ""}}});
  ProfileDoc b = a;
  b.provenance.reason = "import";
  b.provenance.stage = 9;
  ProfileDiff d = diff_profiles(a, b);
  CHECK(d.compile_affecting_equal);
  CHECK_THAT(render_diff(d, "t"), Catch::Contains("no compile-affecting difference"));
}

TEST_CASE("diff JSON carries every figure") {
  ProfileDoc a = doc({{"f", {7, {50, 50}, {}, ""}}});
  ProfileDoc b = doc({{"f", {7, {90, 10}, {}, ""}}});
  nlohmann::json j = to_json(diff_profiles(a, b));
  CHECK(j["summary"]["changed"] == 1);
  REQUIRE(j["functions"].size() == 1);
  const auto& f = j["functions"][0];
  CHECK(f["name"] == "f");
  CHECK(f["change"] == "changed");
  REQUIRE(f["counters"].size() == 2);
  CHECK(f["counters"][0]["before"] == 50);
  CHECK(f["counters"][0]["after"] == 90);
  CHECK(f["counters"][0]["weight_after"].get<double>() == Approx(0.9));
  CHECK(j["knobs"].empty());
  CHECK(j["compile_affecting_equal"] == false);
}

TEST_CASE("the diff names functions by source name, the PGO name beside it") {
  FunctionProfile before{1, {50, 50}};
  before.source_name = "/src/run.c:step";
  FunctionProfile after{1, {90, 10}};
  after.source_name = "/src/run.c:step";
  ProfileDoc a = doc({{"fdo:fdo.local.2", before}, {"main", {3, {1}}}});
  ProfileDoc b = doc({{"fdo:fdo.local.2", after}, {"main", {3, {1}}}});
  ProfileDiff d = diff_profiles(a, b);
  CHECK(find(d, "fdo:fdo.local.2").source_name == "/src/run.c:step");
  std::string text = render_diff(d, "t", Unchanged::list);
  CHECK_THAT(text, Catch::Contains("/src/run.c:step (fdo:fdo.local.2)  [changed]"));
  // No source name recorded (older documents): the PGO name alone.
  CHECK_THAT(text, Catch::Contains("unchanged: main"));
  nlohmann::json j = to_json(d);
  for (const auto& f : j["functions"])
    CHECK(f["source_name"] == (f["name"] == "main" ? "main" : "/src/run.c:step"));
}

TEST_CASE("code layout changes are reported per function by source name") {
  FunctionProfile step{1, {50, 50}};
  step.source_name = "interp.c:step";
  ProfileDoc a = doc({{"fdo:fdo.local.1", step}, {"usage", {2, {0}}}, {"main", {3, {1}}}});
  ProfileDoc b = a;
  b.functions["fdo:fdo.local.1"].layout = fdo::FunctionLayout::hot;
  b.functions["usage"].layout = fdo::FunctionLayout::cold;
  ProfileDiff d = diff_profiles(a, b);
  const FunctionDiff& hot = find(d, "fdo:fdo.local.1");
  CHECK(hot.change == FunctionChange::changed);
  CHECK(hot.code_layout_before == fdo::FunctionLayout::normal);
  CHECK(hot.code_layout_after == fdo::FunctionLayout::hot);
  CHECK_FALSE(hot.layout_changed); // the CFG did not change
  CHECK(find(d, "usage").change == FunctionChange::changed);
  CHECK(find(d, "main").change == FunctionChange::unchanged);
  CHECK(d.changed == 2);
  CHECK_FALSE(d.compile_affecting_equal); // layout is compile-affecting
  const std::string text = render_diff(d, "t");
  INFO(text);
  CHECK_THAT(text, Catch::Contains("interp.c:step (fdo:fdo.local.1)  [changed]"));
  CHECK_THAT(text, Catch::Contains("code layout: normal -> hot"));
  CHECK_THAT(text, Catch::Contains("code layout: normal -> cold"));
  nlohmann::json j = to_json(d);
  for (const auto& f : j["functions"])
    if (f["name"] == "usage") {
      CHECK(f["code_layout_before"] == "normal");
      CHECK(f["code_layout_after"] == "cold");
    }
  // Back to normal is a change too.
  ProfileDiff back = diff_profiles(b, a);
  CHECK_THAT(render_diff(back, "t"), Catch::Contains("code layout: hot -> normal"));
}

TEST_CASE("context-sensitive counts are summarized per function in the diff") {
  FunctionProfile step{1, {50, 50}};
  step.source_name = "interp.c:step";
  ProfileDoc a = doc({{"fdo:fdo.local.1", step}, {"main", {3, {1}}}});
  ProfileDoc b = a;
  // No CS counts on either side: no such section.
  CHECK(render_diff(diff_profiles(a, b), "t").find("context-sensitive") == std::string::npos);
  const std::uint64_t cs = fdo::kCsHashFlag | 1;
  a.cs_functions["fdo:fdo.local.1"] = FunctionProfile{cs, {10, 20}};
  a.cs_functions["gone"] = FunctionProfile{cs, {5}};
  b.cs_functions["fdo:fdo.local.1"] = FunctionProfile{cs, {100, 200, 300}};
  b.cs_functions["main"] = FunctionProfile{cs, {7}};
  ProfileDiff d = diff_profiles(a, b);
  CHECK(d.cs_functions_before == 2);
  CHECK(d.cs_functions_after == 2);
  CHECK(d.cs_total_before == 35);
  CHECK(d.cs_total_after == 607);
  REQUIRE(d.cs_functions.size() == 3);
  CHECK_FALSE(d.compile_affecting_equal);
  const std::string text = render_diff(d, "t");
  INFO(text);
  CHECK_THAT(text, Catch::Contains("context-sensitive counts (cs_functions): 2 -> 2 functions, "
                                   "35 -> 607 counts"));
  CHECK_THAT(text, Catch::Contains("interp.c:step (fdo:fdo.local.1): 30 -> 600 counts, 2 -> 3 "
                                   "counters"));
  CHECK_THAT(text, Catch::Contains("main: added, 7 counts"));
  CHECK_THAT(text, Catch::Contains("gone: removed (had 5 counts)"));
  nlohmann::json j = to_json(d);
  CHECK(j["cs_functions"]["total_after"] == 607);
  CHECK(j["cs_functions"]["changed"].size() == 3);
  // Unchanged CS counts are counted, not listed.
  ProfileDiff same = diff_profiles(b, b);
  CHECK(same.cs_functions.empty());
  CHECK(same.cs_functions_after == 2);
}

TEST_CASE("a changed dominant argument value and the specialization knobs are reported") {
  ProfileDoc a = doc({{"f", {1, {5, 5}, {}, ""}}});
  a.functions["f"].arg_values = {{1, {{4, 94}, {5, 6}}, 0}, {2, {{3, 100}}, 0}};
  ProfileDoc b = a;
  // Arg 2: the same value with another share is no change; arg 1 moved to 7.
  b.functions["f"].arg_values = {{1, {{7, 99}, {4, 1}}, 0}, {2, {{3, 50}}, 50}};
  b.knobs.spec_min_share = 90;
  ProfileDiff d = diff_profiles(a, b);
  REQUIRE(d.knobs.size() == 1);
  CHECK(d.knobs[0].knob == "spec_min_share");
  const FunctionDiff& f = find(d, "f");
  CHECK(f.change == FunctionChange::changed);
  REQUIRE(f.arg_values_changed.size() == 1);
  CHECK_THAT(f.arg_values_changed[0],
             Catch::StartsWith("arg 1: 4 (94") && Catch::Contains("-> 7 (99"));
  CHECK_FALSE(d.compile_affecting_equal);
  CHECK_THAT(render_diff(d, "t"), Catch::Contains("argument values: arg 1: 4"));
  CHECK(to_json(d)["functions"][0]["arg_values_changed"].size() == 1);
}
