// `fdoctl profile annotate`'s text: each block's count, then its sampled
// share and miss samples, from the document annotate_program() builds.
#include "annotate.h"

#include <catch2/catch.hpp>

using namespace fdo::ctl;
using nlohmann::json;

namespace {

json block(const std::string& label, json count, json per_call, json samples, json share) {
  return {{"label", label},
          {"count", count},
          {"per_call", per_call},
          {"canonical_blocks", {}},
          {"samples", samples},
          {"sample_share", share},
          {"lines", {"br label %next"}}};
}

json document(json sampling) {
  json counted = {{"name", "run"},
                  {"source_name", "run"},
                  {"pgo_name", "run"},
                  {"signature", "define i64 @run(i64 %n) {"},
                  {"entry_count", 2},
                  {"approximate", false},
                  {"unplaced_samples", {{"cpu-clock", 3}}},
                  {"blocks",
                   {block("loop", 1010, 505.0, {{"cpu-clock", 40}, {"branch-misses", 7}}, 0.2),
                    block("cold", 101, 50.5, json::object(), 0.0),
                    block("inlined.i", 9, 4.5, json::object(), nullptr)}}};
  json uncounted = {{"name", "helper"},
                    {"source_name", "helper"},
                    {"pgo_name", "helper"},
                    {"signature", "define void @helper() {"},
                    {"entry_count", nullptr},
                    {"approximate", false},
                    {"unplaced_samples", json::object()},
                    {"blocks", {block("entry", nullptr, nullptr, {{"cpu-clock", 10}}, 0.05)}}};
  return {{"program", "ab"},
          {"program_name", "p"},
          {"profile_key", "cd"},
          {"profile_version", 3},
          {"sampling", sampling},
          {"functions", {counted, uncounted}},
          {"diagnostics", json::array()}};
}

} // namespace

TEST_CASE("annotate text: sampled shares and misses follow each block's count",
          "[fdoctl][annotate]") {
  const std::string text = render_annotation(document({{"event", "cpu-clock"}, {"samples", 200}}));
  CHECK_THAT(text, Catch::Contains("; sampled: 200 cpu-clock samples in program code"));
  CHECK_THAT(text,
             Catch::Contains("\nloop:                                   ; count 1010, 505.00 per "
                             "call, 20.0% of samples, branch-misses 7\n"));
  CHECK_THAT(text,
             Catch::Contains("\ncold:                                   ; count 101, 50.50 per "
                             "call, 0.0% of samples\n"));
  // Inlined code has no share here (it counts for the function it came from).
  CHECK_THAT(text, Catch::Contains(
                       "\ninlined.i:                              ; count 9, 4.50 per call\n"));
  // No counts, but samples: the share alone.
  CHECK_THAT(text,
             Catch::Contains("\nentry:                                  ; 5.0% of samples\n"));
  CHECK_THAT(text, Catch::Contains("; 3 cpu-clock samples in canonical blocks not shown below"));

  SECTION("a profile without per-block samples shows counts only") {
    json doc = document(nullptr);
    for (json& f : doc["functions"]) {
      f["unplaced_samples"] = json::object();
      for (json& b : f["blocks"]) {
        b["samples"] = json::object();
        b["sample_share"] = nullptr;
      }
    }
    const std::string plain = render_annotation(doc);
    CHECK_THAT(plain, !Catch::Contains("samples"));
    CHECK_THAT(plain,
               Catch::Contains(
                   "\nloop:                                   ; count 1010, 505.00 per call\n"));
    CHECK_THAT(plain, Catch::Contains("\nentry:\n"));
  }
}
