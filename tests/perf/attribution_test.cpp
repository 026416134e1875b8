// Attribution of recorded sample streams to JIT function address ranges.
#include "fdo/perf/attribution.h"
#include "perf_fixtures.h"

#include <catch2/catch.hpp>

using namespace fdo;
using namespace fdo::perf;
using namespace fdo::perf::testing;

namespace {

Sample at(std::uint32_t event, std::uint64_t ip, std::uint64_t period = 1) {
  Sample s;
  s.event = event;
  s.ip = ip;
  s.period = period;
  return s;
}

// Deliberately unsorted, with two adjacent functions.
std::vector<FunctionRange> jit_ranges() {
  return {{"hot_loop", 0x2000, 0x80}, {"main_entry", 0x1000, 0x100}, {"helper", 0x1100, 0x10}};
}

} // namespace

TEST_CASE("samples land in the right function - or outside_jit", "[perf][attribution]") {
  SampleSet set;
  set.events = {"branch-misses", "L1-icache-load-misses"};
  set.samples = {
      at(0, 0x1000, 100),                      // first byte of main_entry
      at(0, 0x10ff, 100),                      // last byte of main_entry
      at(0, 0x1100, 100),                      // first byte of helper (adjacent)
      at(0, 0x2040, 100),  at(0, 0x2040, 300), // hot_loop
      at(0, 0x2080, 100),                      // one past hot_loop: outside
      at(0, 0x500, 100),                       // below every range: outside
      at(1, 0x207f, 1000),                     // last byte of hot_loop
      at(1, ~0ull, 1000),                      // top of the address space: outside
  };
  set.stats.lost_records = 2;
  set.stats.lost_samples = 17;
  ExecCounts counts;
  counts.instructions = 1'000'000;
  counts.executions = 10;
  auto a = attribute(set, jit_ranges(), counts);
  REQUIRE(a);
  CHECK(a->samples == 9);
  CHECK(a->lost_records == 2);
  CHECK(a->lost_samples == 17);
  REQUIRE(a->functions.size() == 3);
  CHECK(a->functions[0].name == "main_entry"); // sorted by address
  CHECK(a->functions[1].name == "helper");
  CHECK(a->functions[2].name == "hot_loop");

  const auto* main_entry = a->find("main_entry");
  REQUIRE(main_entry);
  CHECK(main_entry->events[0].samples == 2);
  CHECK(main_entry->events[1].samples == 0);
  CHECK(a->find("helper")->events[0].samples == 1);

  const auto* hot = a->find("hot_loop");
  REQUIRE(hot);
  CHECK(hot->samples == 3);
  CHECK(hot->events[0].samples == 2);
  CHECK(hot->events[0].estimated_events == 400);
  CHECK(hot->events[0].share == Approx(2.0 / 7.0));
  REQUIRE(hot->events[0].per_kilo_instructions);
  CHECK(*hot->events[0].per_kilo_instructions == Approx(0.4)); // 400 per 1e6 instructions
  REQUIRE(hot->events[0].per_execution);
  CHECK(*hot->events[0].per_execution == Approx(40.0));
  CHECK(hot->events[1].samples == 1);
  CHECK(hot->events[1].share == Approx(0.5));

  const auto& out = a->outside_jit;
  CHECK(out.name == "[outside_jit]");
  CHECK(out.events[0].samples == 2);
  CHECK(out.events[1].samples == 1);
  CHECK(out.events[0].estimated_events == 200);

  auto j = to_json(*a);
  CHECK(j["functions"][2]["events"]["branch-misses"]["samples"] == 2);
  CHECK(j["outside_jit"]["events"]["L1-icache-load-misses"]["samples"] == 1);
  CHECK(j["lost_samples"] == 17);
}

TEST_CASE("without exec counts there are no rates", "[perf][attribution]") {
  SampleSet set;
  set.events = {"branch-misses"};
  set.samples = {at(0, 0x1010)};
  auto a = attribute(set, jit_ranges());
  REQUIRE(a);
  CHECK_FALSE(a->find("main_entry")->events[0].per_kilo_instructions);
  CHECK_FALSE(a->find("main_entry")->events[0].per_execution);
  CHECK(a->find("main_entry")->events[0].share == 1.0);
  CHECK(to_json(*a)["functions"][0]["events"]["branch-misses"]["per_execution"].is_null());
}

TEST_CASE("bad ranges and samples are clear errors", "[perf][attribution]") {
  SampleSet set;
  set.events = {"branch-misses"};
  auto overlap = attribute(set, {{"a", 0x1000, 0x100}, {"b", 0x10f0, 0x10}});
  REQUIRE_FALSE(overlap);
  CHECK(overlap.error().code() == Errc::invalid_argument);
  CHECK(overlap.error().message().find("'a'") != std::string::npos);
  CHECK(overlap.error().message().find("'b'") != std::string::npos);

  auto wrap = attribute(set, {{"huge", ~0ull - 4, 100}});
  REQUIRE_FALSE(wrap);
  CHECK(wrap.error().message().find("huge") != std::string::npos);

  set.samples = {at(3, 0x1000)};
  auto bad_event = attribute(set, jit_ranges());
  REQUIRE_FALSE(bad_event);
  CHECK(bad_event.error().message().find("event index 3") != std::string::npos);

  // Zero-size ranges are legal and never match.
  set.samples = {at(0, 0x3000)};
  auto zero = attribute(set, {{"empty", 0x3000, 0}});
  REQUIRE(zero);
  CHECK(zero->find("empty")->samples == 0);
  CHECK(zero->outside_jit.samples == 1);
}

TEST_CASE("a recorded ring stream - with wraparound and losses - is attributed",
          "[perf][attribution]") {
  // Two events' rings as the kernel would leave them, drained, then attributed.
  constexpr std::size_t page = 4096;
  std::vector<std::uint8_t> ring0(page * 2), ring1(page * 2);
  RingWriter w0(ring0, page), w1(ring1, page);
  w0.set_position(10 * 4096 - 40); // the first sample straddles the end
  w0.append(sample_record(0x2010, 50));
  w0.append(sample_record(0x2020, 50));
  w0.append(lost_record(0, 3));
  w0.append(sample_record(0x1050, 50));
  w0.append(sample_record(0x7fff0000, 50)); // libc: outside
  w1.append(sample_record(0x1108, 7));
  w1.append(lost_record(0, 1));

  RecordLayout layout;
  layout.sample_type = PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_PERIOD;
  SampleSet set;
  set.events = {"branch-misses", "L1-icache-load-misses"};
  drain_ring(ring0, page, layout, 0, set.samples, set.stats);
  drain_ring(ring1, page, layout, 1, set.samples, set.stats);
  CHECK(set.stats.malformed == 0);
  auto a = attribute(set, jit_ranges(), ExecCounts{std::nullopt, 5});
  REQUIRE(a);
  CHECK(a->samples == 5);
  CHECK(a->lost_records == 2);
  CHECK(a->lost_samples == 4);
  CHECK(a->find("hot_loop")->events[0].samples == 2);
  CHECK(*a->find("hot_loop")->events[0].per_execution == Approx(20.0));
  CHECK(a->find("main_entry")->events[0].samples == 1);
  CHECK(a->find("helper")->events[1].samples == 1);
  CHECK(a->find("helper")->events[1].estimated_events == 7);
  CHECK(a->outside_jit.events[0].samples == 1);
  CHECK(a->outside_jit.events[0].share == Approx(0.25));
}
