#include "fdo/daemon/stage_sampling.h"
#include "fdo/daemon/worker_jobs.h"
#include "fdo/jit/compiler.h"

#include <catch2/catch.hpp>

using namespace fdo;
using namespace fdo::daemon;
using nlohmann::json;

namespace {
perf::Sample at(std::uint32_t event, std::uint64_t ip) {
  perf::Sample s;
  s.event = event;
  s.ip = ip;
  return s;
}
} // namespace

TEST_CASE("the exec header's sampling request is read and checked", "[jobs][sampling]") {
  auto none = sampling_request_from(json{{"op", "exec"}});
  REQUIRE(none);
  CHECK_FALSE(none->has_value());
  auto null = sampling_request_from(json{{"sampling", nullptr}});
  REQUIRE(null);
  CHECK_FALSE(null->has_value());

  auto r = sampling_request_from(
      json{{"sampling",
            {{"events", json::array({"cpu-clock"})}, {"frequency_hz", 499}, {"max_samples", 7}}}});
  REQUIRE(r);
  REQUIRE(r->has_value());
  CHECK((*r)->events == std::vector<std::string>{"cpu-clock"});
  CHECK((*r)->frequency_hz == 499);
  CHECK((*r)->max_samples == 7);

  auto fails = [](json sampling, const std::string& names) {
    auto bad = sampling_request_from(json{{"sampling", std::move(sampling)}});
    REQUIRE_FALSE(bad);
    CHECK(bad.error().code() == Errc::invalid_argument);
    CHECK_THAT(bad.error().describe(), Catch::Contains(names));
  };
  fails(json::array(), "'sampling' must be an object");
  fails(json::object(), "sampling.events");
  fails({{"events", json::array()}}, "sampling.events");
  fails({{"events", json::array({""})}}, "sampling.events");
  fails({{"events", json::array({"cpu-clock"})}, {"frequency_hz", 0}}, "sampling.frequency_hz");
  fails({{"events", json::array({"cpu-clock"})}, {"max_samples", -3}}, "sampling.max_samples");
}

TEST_CASE("thinning keeps exactly the budget, spread evenly", "[jobs][sampling]") {
  std::vector<perf::Sample> samples;
  for (std::uint64_t i = 0; i < 1000; ++i)
    samples.push_back(at(i < 600 ? 0 : 1, i));
  CHECK(thin_samples(samples, 2000).size() == 1000);
  auto kept = thin_samples(samples, 100);
  REQUIRE(kept.size() == 100);
  // Each event keeps its proportion (600:400) and the kept samples cover the
  // whole sequence, not its first part.
  auto first = std::count_if(kept.begin(), kept.end(), [](auto& s) { return s.event == 0; });
  CHECK(first == 60);
  CHECK(kept.front().ip < 10);
  CHECK(kept.back().ip >= 990);
}

TEST_CASE("stage samples are attributed to functions and the rest is counted outside",
          "[jobs][sampling]") {
  std::vector<perf::SamplerEvent> events(2);
  events[0].name = "cpu-clock";
  events[0].status = perf::EventStatus::available;
  events[1].name = "branch-misses";
  events[1].status = perf::EventStatus::no_pmu;
  events[1].reason = "no PMU";
  perf::SampleSet set;
  set.events = {"cpu-clock", "branch-misses"};
  for (int i = 0; i < 6; ++i)
    set.samples.push_back(at(0, 0x1000 + i)); // hot
  set.samples.push_back(at(0, 0x2010));       // cold
  set.samples.push_back(at(1, 0x2000));       // cold, a miss
  set.samples.push_back(at(0, 0x9999));       // libc, say
  set.stats.lost_samples = 3;
  std::vector<jit::FunctionRange> ranges = {
      {"hot", 0x1000, 0x100}, {"cold", 0x2000, 0x40}, {"idle", 0x3000, 0x40}};
  StageSamplingRequest request{{"cpu-clock", "branch-misses"}, 1000, 100};

  auto j = stage_samples_json(events, request, set, ranges);
  REQUIRE(j);
  CHECK((*j)["recorded"] == 9);
  CHECK((*j)["attributed"] == 9);
  CHECK((*j)["lost_samples"] == 3);
  CHECK((*j)["functions"]["hot"]["cpu-clock"] == 6);
  CHECK((*j)["functions"]["cold"]["cpu-clock"] == 1);
  CHECK((*j)["functions"]["cold"]["branch-misses"] == 1);
  CHECK_FALSE((*j)["functions"].contains("idle")); // no samples, not listed
  CHECK((*j)["outside_jit"]["cpu-clock"] == 1);
  CHECK((*j)["events"][1]["status"] == "no_pmu");

  // The same stage relinked elsewhere: attribution follows the ranges.
  std::vector<jit::FunctionRange> moved = {{"hot", 0x2000, 0x40}, {"cold", 0x1000, 0x100}};
  auto m = stage_samples_json(events, request, set, moved);
  REQUIRE(m);
  CHECK((*m)["functions"]["cold"]["cpu-clock"] == 6);
  CHECK((*m)["functions"]["hot"]["branch-misses"] == 1);

  // Past the budget: thinned, and the reply says how many were recorded.
  request.max_samples = 3;
  auto t = stage_samples_json(events, request, set, ranges);
  REQUIRE(t);
  CHECK((*t)["recorded"] == 9);
  CHECK((*t)["attributed"] == 3);

  // Overlapping ranges are the loader's bug: an error, not a wrong answer.
  std::vector<jit::FunctionRange> overlapping = {{"a", 0x1000, 0x100}, {"b", 0x1080, 0x10}};
  CHECK_FALSE(stage_samples_json(events, request, set, overlapping));
}

namespace {
// Two functions: `spin` does the work, `entry` calls it (noinline keeps it a
// function of its own in the object).
constexpr const char* kSpinProgram = R"(
define internal i64 @spin(i64 %n, i64 %seed) noinline {
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i.next, %loop ]
  %x = phi i64 [ %seed, %entry ], [ %x3, %loop ]
  %a = shl i64 %x, 13
  %x1 = xor i64 %x, %a
  %b = lshr i64 %x1, 7
  %x2 = xor i64 %x1, %b
  %c = shl i64 %x2, 17
  %x3 = xor i64 %x2, %c
  %i.next = add i64 %i, 1
  %done = icmp eq i64 %i.next, %n
  br i1 %done, label %out, label %loop
out:
  ret i64 %x3
}

define i64 @run(i64 %n) {
entry:
  %r = call i64 @spin(i64 %n, i64 88172645463325252)
  ret i64 %r
}
)";

Message exec_message(const jit::CompileResult& compiled, json sampling, std::uint64_t n,
                     bool verbose = false) {
  Message m;
  m.header = {{"op", "exec"},
              {"key", "spin-program"},
              {"metadata", jit::metadata_to_json(compiled)},
              {"entry", "run"},
              {"slots", json::array({n})},
              {"buffer_of_param", json::array({-1})},
              {"events", json::array()},
              {"object_size", compiled.object.size()},
              {"sampling", std::move(sampling)},
              {"verbose", verbose}};
  m.payload = compiled.object;
  return m;
}
} // namespace

TEST_CASE("an exec job samples the stage with the software clock and names the function",
          "[jobs][sampling][real]") {
  jit::CompileRequest req;
  req.mode = CompileMode::plain;
  auto compiled = jit::compile(kSpinProgram, req);
  REQUIRE(compiled);
  auto jobs = ExecJobs::create();
  REQUIRE(jobs);

  json sampling = {{"events", json::array({"cpu-clock", "branch-misses"})}, {"frequency_hz", 2000}};
  auto reply = (*jobs)->handle(exec_message(*compiled, sampling, 200'000'000));
  REQUIRE(reply);
  const json& s = reply->header.at("samples");
  REQUIRE_FALSE(s.contains("error"));
  REQUIRE(s["events"].size() == 2);
  if (s["events"][0]["status"] != "available") {
    WARN("skipped: cpu-clock sampling unavailable here: " + s["events"][0].dump());
    return;
  }
  // The spin function (a local symbol, named canonically: not `run`, not the
  // thunk) holds nearly all of the stage's clock samples.
  std::uint64_t top = 0, total = 0;
  std::string top_name;
  for (auto it = s["functions"].begin(); it != s["functions"].end(); ++it) {
    std::uint64_t n = it->value("cpu-clock", std::uint64_t{0});
    total += n;
    if (n > top) {
      top = n;
      top_name = it.key();
    }
  }
  total += s["outside_jit"].value("cpu-clock", std::uint64_t{0});
  INFO(s.dump());
  REQUIRE(total >= 20);
  CHECK(top_name != "run");
  CHECK(top_name.rfind("__fdo_thunk_", 0) != 0);
  CHECK(static_cast<double>(top) / static_cast<double>(total) > 0.8);
  // Without a PMU the hardware event is reported, not fatal; its explanation
  // travels only in a verbose stage's reply (the same text every stage).
  for (const json& e : s["events"])
    CHECK_FALSE(e.contains("reason"));

  // The next stage of the same program (kept linked) samples afresh: nothing
  // of the first stage is counted again.
  auto again = (*jobs)->handle(exec_message(*compiled, sampling, 1000, true));
  REQUIRE(again);
  CHECK(again->header["samples"]["recorded"].get<std::uint64_t>() < 20);
  const json& verbose_events = again->header["samples"]["events"];
  REQUIRE(verbose_events.size() == 2);
  for (const json& e : verbose_events)
    REQUIRE(e.contains("reason"));
  if (verbose_events[1]["status"] != "available")
    CHECK_FALSE(verbose_events[1]["reason"].get<std::string>().empty());

  // No sampling asked for: no samples member.
  auto plain = (*jobs)->handle(exec_message(*compiled, nullptr, 1000));
  REQUIRE(plain);
  CHECK_FALSE(plain->header.contains("samples"));

  // A request the sampler refuses is a clear job error, not a crash.
  auto bad = (*jobs)->handle(exec_message(
      *compiled, json{{"events", json::array({"cpu-clock"})}, {"frequency_hz", "fast"}}, 1000));
  REQUIRE_FALSE(bad);
  CHECK_THAT(bad.error().describe(), Catch::Contains("sampling.frequency_hz"));
}
