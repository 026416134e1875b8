#include "fdo/daemon/exec_messages.h"
#include "fdo/daemon/stage_sampling.h"
#include "fdo/daemon/worker_jobs.h"
#include "fdo/jit/compiler.h"
#include "support/skip.h"

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

TEST_CASE("an exec job's sampling request is checked", "[jobs][sampling]") {
  CHECK(validate(StageSamplingRequest{{"cpu-clock"}, 499, 7}));
  auto fails = [](StageSamplingRequest r, const std::string& names) {
    auto bad = validate(r);
    REQUIRE_FALSE(bad);
    CHECK(bad.error().code() == Errc::invalid_argument);
    CHECK_THAT(bad.error().describe(), Catch::Contains(names));
  };
  fails({{}, 1000, 10}, "sampling.events");
  fails({{""}, 1000, 10}, "sampling.events");
  fails({{"cpu-clock"}, 0, 10}, "sampling.frequency_hz");
  fails({{"cpu-clock"}, 1000, 0}, "sampling.max_samples");
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

  auto j = stage_sample_report(events, request, set, ranges);
  REQUIRE(j);
  CHECK(j->recorded == 9);
  CHECK(j->attributed == 9);
  CHECK(j->lost_samples == 3);
  CHECK(j->functions.at("hot").at("cpu-clock") == 6);
  CHECK(j->functions.at("cold").at("cpu-clock") == 1);
  CHECK(j->functions.at("cold").at("branch-misses") == 1);
  CHECK_FALSE(j->functions.contains("idle")); // no samples, not listed
  CHECK(j->outside_jit.at("cpu-clock") == 1);
  CHECK(j->events[1].status == perf::EventStatus::no_pmu);

  // The same stage relinked elsewhere: attribution follows the ranges.
  std::vector<jit::FunctionRange> moved = {{"hot", 0x2000, 0x40}, {"cold", 0x1000, 0x100}};
  auto m = stage_sample_report(events, request, set, moved);
  REQUIRE(m);
  CHECK(m->functions.at("cold").at("cpu-clock") == 6);
  CHECK(m->functions.at("hot").at("branch-misses") == 1);

  // Past the budget: thinned, and the report says how many were recorded.
  request.max_samples = 3;
  auto t = stage_sample_report(events, request, set, ranges);
  REQUIRE(t);
  CHECK(t->recorded == 9);
  CHECK(t->attributed == 3);

  // Overlapping ranges are the loader's bug: an error, not a wrong answer.
  std::vector<jit::FunctionRange> overlapping = {{"a", 0x1000, 0x100}, {"b", 0x1080, 0x10}};
  CHECK_FALSE(stage_sample_report(events, request, set, overlapping));
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

Message exec_message(const jit::CompileResult& compiled,
                     std::optional<StageSamplingRequest> sampling, std::uint64_t n,
                     bool verbose = false) {
  ExecJob job;
  job.key = "spin-program";
  job.metadata = jit::metadata_to_json(compiled).dump();
  job.entry = "run";
  job.slots = {n};
  job.buffer_of_param = {-1};
  job.object_size = compiled.object.size();
  job.sampling = std::move(sampling);
  job.verbose = verbose;
  auto m = exec_job_message(job);
  REQUIRE(m);
  m->payload += compiled.object;
  return std::move(*m);
}

StageObservation observed(const Expected<Message>& reply) {
  REQUIRE(reply);
  auto decoded = exec_reply_of(*reply);
  REQUIRE(decoded);
  REQUIRE(decoded->value.outcome == ExecOutcome::ran);
  return std::move(decoded->value.observation);
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

  StageSamplingRequest sampling{{"cpu-clock", "branch-misses"}, 2000, 10000};
  StageObservation obs = observed((*jobs)->handle(exec_message(*compiled, sampling, 200'000'000)));
  REQUIRE(obs.samples);
  const StageSampleReport& s = *obs.samples;
  REQUIRE(s.error.empty());
  REQUIRE(s.events.size() == 2);
  if (s.events[0].status != perf::EventStatus::available) {
    FDO_SKIP("skipped: cpu-clock sampling unavailable here: " + perf::to_json(s.events[0]).dump());
  }
  // The object's functions came with the first sampled stage.
  REQUIRE(obs.function_ranges);
  CHECK_FALSE(obs.function_ranges->empty());
  // The spin function (a local symbol, named canonically: not `run`, not the
  // thunk) holds nearly all of the stage's clock samples.
  std::uint64_t top = 0, total = 0;
  std::string top_name;
  for (const auto& [fn, per_event] : s.functions) {
    auto it = per_event.find("cpu-clock");
    std::uint64_t n = it == per_event.end() ? 0 : it->second;
    total += n;
    if (n > top) {
      top = n;
      top_name = fn;
    }
  }
  if (auto it = s.outside_jit.find("cpu-clock"); it != s.outside_jit.end()) total += it->second;
  INFO("top " << top_name << " " << top << " of " << total);
  REQUIRE(total >= 20);
  CHECK(top_name != "run");
  CHECK(top_name.rfind("__fdo_thunk_", 0) != 0);
  CHECK(static_cast<double>(top) / static_cast<double>(total) > 0.8);
  // Without a PMU the hardware event is reported, not fatal; its explanation
  // travels only in a verbose stage's reply (the same text every stage).
  for (const perf::SamplerEvent& e : s.events)
    CHECK(e.reason.empty());

  // The next stage of the same program (kept linked) samples afresh: nothing
  // of the first stage is counted again.
  StageObservation again = observed((*jobs)->handle(exec_message(*compiled, sampling, 1000, true)));
  REQUIRE(again.samples);
  CHECK(again.samples->recorded < 20);
  const auto& verbose_events = again.samples->events;
  REQUIRE(verbose_events.size() == 2);
  if (verbose_events[1].status != perf::EventStatus::available)
    CHECK_FALSE(verbose_events[1].reason.empty());

  // No sampling asked for: no samples, no ranges.
  StageObservation plain = observed((*jobs)->handle(exec_message(*compiled, std::nullopt, 1000)));
  CHECK_FALSE(plain.samples);
  CHECK_FALSE(plain.function_ranges);

  // A request the worker refuses is a clear job error, not a crash.
  auto bad =
      (*jobs)->handle(exec_message(*compiled, StageSamplingRequest{{"cpu-clock"}, 0, 10000}, 1000));
  REQUIRE_FALSE(bad);
  CHECK_THAT(bad.error().describe(), Catch::Contains("sampling.frequency_hz"));
}
