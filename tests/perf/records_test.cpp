// The ring buffer and record parser over fixtures built in the kernel's format.
#include "fdo/perf/records.h"
#include "perf_fixtures.h"

#include <catch2/catch.hpp>
#include <cstdlib>

using namespace fdo::perf;
using namespace fdo::perf::testing;

namespace {

constexpr std::size_t kPage = 4096;

struct FixtureRing {
  std::vector<std::uint8_t> storage;
  explicit FixtureRing(std::size_t data_pages) : storage(kPage * (1 + data_pages), 0) {}
  std::span<std::uint8_t> span() { return storage; }
};

RecordLayout ip_tid_period(bool branches = false) {
  RecordLayout l;
  l.sample_type = PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_PERIOD;
  if (branches) l.sample_type |= PERF_SAMPLE_BRANCH_STACK;
  return l;
}

} // namespace

TEST_CASE("samples - lost and throttle records are read from a ring", "[perf][records]") {
  FixtureRing ring(1);
  RingWriter w(ring.span(), kPage);
  w.append(sample_record(0x1000, 10));
  w.append(comm_record());
  w.append(sample_record(0x2000, 20));
  w.append(lost_record(7, 5));
  w.append(throttle_record());
  w.append(sample_record(0x3000, 30));

  std::vector<Sample> out;
  ParseStats stats;
  std::size_t n = drain_ring(ring.span(), kPage, ip_tid_period(), 3, out, stats);
  CHECK(n == w.meta()->data_head);
  CHECK(w.meta()->data_tail == w.meta()->data_head);
  REQUIRE(out.size() == 3);
  CHECK(out[0].ip == 0x1000);
  CHECK(out[0].period == 10);
  CHECK(out[0].pid == 42);
  CHECK(out[0].tid == 43);
  CHECK(out[0].event == 3);
  CHECK(out[2].ip == 0x3000);
  CHECK(stats.samples == 3);
  CHECK(stats.lost_records == 1);
  CHECK(stats.lost_samples == 5);
  CHECK(stats.throttles == 1);
  CHECK(stats.other_records == 1);
  CHECK(stats.malformed == 0);

  // Nothing new: nothing read.
  CHECK(drain_ring(ring.span(), kPage, ip_tid_period(), 3, out, stats) == 0);
  CHECK(out.size() == 3);
}

TEST_CASE("a record straddling the end of the data area is reassembled", "[perf][records]") {
  FixtureRing ring(1);
  RingWriter w(ring.span(), kPage);
  // Many wraps already happened: head and tail are free-running 64-bit
  // offsets; start 20 bytes before the end of the 4096-byte data area.
  const std::uint64_t start = 37 * 4096 + 4096 - 20;
  w.set_position(start);
  std::vector<FixtureBranch> br{{0x10, 0x20, true}, {0x30, 0x40, false}};
  w.append(sample_record(0xAAAA, 1, &br)); // 8 + 24 + 8 + 48 = 88 bytes: wraps
  w.append(lost_record(1, 9));
  w.append(sample_record(0xBBBB, 2, &br));

  std::vector<Sample> out;
  ParseStats stats;
  drain_ring(ring.span(), kPage, ip_tid_period(true), 0, out, stats);
  REQUIRE(out.size() == 2);
  CHECK(out[0].ip == 0xAAAA);
  REQUIRE(out[0].branches.size() == 2);
  CHECK(out[0].branches[0].from == 0x10);
  CHECK(out[0].branches[0].to == 0x20);
  CHECK(out[0].branches[0].mispredicted);
  CHECK_FALSE(out[0].branches[1].mispredicted);
  CHECK(out[0].branches[1].predicted);
  CHECK(out[1].ip == 0xBBBB);
  CHECK(stats.lost_samples == 9);
  CHECK(stats.malformed == 0);
  CHECK(w.meta()->data_tail == w.meta()->data_head);

  // Keep writing after the drain: the reader picks up where it left off.
  w.append(sample_record(0xCCCC, 3, &br));
  out.clear();
  drain_ring(ring.span(), kPage, ip_tid_period(true), 0, out, stats);
  REQUIRE(out.size() == 1);
  CHECK(out[0].ip == 0xCCCC);
}

TEST_CASE("a ring without data_offset/data_size (old kernels) uses the mapping",
          "[perf][records]") {
  FixtureRing ring(2);
  RingWriter w(ring.span(), kPage, /*set_layout=*/false);
  // RingWriter computes the data area from the mapping too: 8192 bytes.
  w.set_position(8192 - 8);
  w.append(sample_record(0x42, 1));
  std::vector<Sample> out;
  ParseStats stats;
  drain_ring(ring.span(), kPage, ip_tid_period(), 0, out, stats);
  REQUIRE(out.size() == 1);
  CHECK(out[0].ip == 0x42);
}

TEST_CASE("malformed rings and records are counted - never crash", "[perf][records]") {
  std::vector<Sample> out;
  SECTION("record size too small") {
    RecordBytes r;
    r.u32(PERF_RECORD_SAMPLE).u16(0).u16(4);
    ParseStats stats;
    parse_records(r.bytes, ip_tid_period(), 0, out, stats);
    CHECK(stats.malformed == 1);
    CHECK(stats.first_error.find("impossible size 4") != std::string::npos);
    CHECK(out.empty());
  }
  SECTION("record size past the end") {
    auto rec = sample_record(0x1, 1);
    rec.resize(rec.size() - 8);
    ParseStats stats;
    parse_records(rec, ip_tid_period(), 0, out, stats);
    CHECK(stats.malformed == 1);
  }
  SECTION("sample shorter than its layout; later records still parsed") {
    auto rec = sample_record(0x1, 1); // no branch stack, but the layout wants one
    auto next = lost_record(1, 2);
    rec.insert(rec.end(), next.begin(), next.end());
    ParseStats stats;
    parse_records(rec, ip_tid_period(true), 0, out, stats);
    CHECK(stats.malformed == 1);
    CHECK(stats.first_error.find("branch stack") != std::string::npos);
    CHECK(stats.lost_samples == 2);
    CHECK(out.empty());
  }
  SECTION("truncated header") {
    std::vector<std::uint8_t> b{1, 2, 3};
    ParseStats stats;
    parse_records(b, ip_tid_period(), 0, out, stats);
    CHECK(stats.malformed == 1);
  }
  SECTION("PERF_SAMPLE_READ is refused") {
    RecordLayout l;
    l.sample_type = PERF_SAMPLE_IP | PERF_SAMPLE_READ;
    CHECK_FALSE(layout_supported(l));
    ParseStats stats;
    auto rec = sample_record(0x1, 1);
    parse_records(rec, l, 0, out, stats);
    CHECK(stats.malformed == 1);
  }
  SECTION("overrun: head more than a buffer ahead of tail") {
    FixtureRing ring(1);
    RingWriter w(ring.span(), kPage);
    w.meta()->data_head = 3 * 4096;
    ParseStats stats;
    drain_ring(ring.span(), kPage, ip_tid_period(), 0, out, stats);
    CHECK(stats.malformed == 1);
    CHECK(stats.first_error.find("overrun") != std::string::npos);
    CHECK(w.meta()->data_tail == 3 * 4096);
  }
  SECTION("inconsistent metadata") {
    FixtureRing ring(1);
    RingWriter w(ring.span(), kPage);
    w.meta()->data_size = 3000; // not a power of two
    w.meta()->data_head = 8;
    ParseStats stats;
    drain_ring(ring.span(), kPage, ip_tid_period(), 0, out, stats);
    CHECK(stats.malformed == 1);
    CHECK(stats.first_error.find("inconsistent") != std::string::npos);
  }
  SECTION("mapping too small") {
    std::vector<std::uint8_t> tiny(100);
    ParseStats stats;
    drain_ring(tiny, kPage, ip_tid_period(), 0, out, stats);
    CHECK(stats.malformed == 1);
  }
}

TEST_CASE("all the sample fields before the branch stack are skipped correctly",
          "[perf][records]") {
  RecordLayout l;
  l.sample_type = PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME |
                  PERF_SAMPLE_ADDR | PERF_SAMPLE_ID | PERF_SAMPLE_STREAM_ID | PERF_SAMPLE_CPU |
                  PERF_SAMPLE_PERIOD | PERF_SAMPLE_CALLCHAIN | PERF_SAMPLE_BRANCH_STACK;
  l.branch_sample_type = PERF_SAMPLE_BRANCH_ANY | PERF_SAMPLE_BRANCH_HW_INDEX;
  RecordBytes b;
  b.u64(99);              // identifier
  b.u64(0xfeed);          // ip
  b.u32(1).u32(2);        // pid, tid
  b.u64(123456);          // time
  b.u64(0xdead);          // addr
  b.u64(7);               // id
  b.u64(8);               // stream id
  b.u32(3).u32(0);        // cpu, res
  b.u64(500);             // period
  b.u64(2).u64(1).u64(2); // callchain nr=2
  b.u64(1);               // bnr
  b.u64(0);               // hw_idx
  b.u64(0x100).u64(0x200).u64(1);
  auto rec = with_header(PERF_RECORD_SAMPLE, b);
  std::vector<Sample> out;
  ParseStats stats;
  parse_records(rec, l, 1, out, stats);
  REQUIRE(out.size() == 1);
  CHECK(out[0].ip == 0xfeed);
  CHECK(out[0].pid == 1);
  CHECK(out[0].tid == 2);
  CHECK(out[0].period == 500);
  REQUIRE(out[0].branches.size() == 1);
  CHECK(out[0].branches[0].to == 0x200);
  CHECK(out[0].branches[0].mispredicted);
  CHECK(stats.malformed == 0);
}
