#include "fdo/ctl/table.h"

#include <catch2/catch.hpp>

using namespace fdo::ctl;

TEST_CASE("Table aligns columns to the widest cell and leaves no trailing spaces") {
  Table t({{"name"}, {"count", Align::right}, {"note"}});
  t.add_row({"a", "1", ""});
  t.add_row({"longer", "12345", "x"});
  std::string out = t.render();
  CHECK(out == "name    count  note\n"
               "a           1\n"
               "longer  12345  x\n");
  CHECK(t.rows() == 2);
}

TEST_CASE("Table pads missing cells and drops extra ones") {
  Table t({{"a"}, {"b"}});
  t.add_row({"1"});
  t.add_row({"1", "2", "3"});
  CHECK(t.render() == "a  b\n1\n1  2\n");
}

TEST_CASE("StreamTable prints rows at fixed widths as they arrive") {
  StreamTable t({{"stage", Align::right, 5}, {"cache", Align::left, 8}, {"exec", Align::right, 6}});
  CHECK(t.header() == "stage  cache       exec\n");
  CHECK(t.row({"0", "compiled", "1 ms"}) == "    0  compiled    1 ms\n");
  // A longer cell pushes the rest of its line right instead of truncating.
  CHECK(t.row({"1", "memory_hit", "2 ms"}) == "    1  memory_hit    2 ms\n");
}

TEST_CASE("render_fields aligns values") {
  CHECK(render_fields({{"a", "1"}, {"long key", "2"}}) == "a:        1\nlong key: 2\n");
  CHECK(render_fields({{"k", "v"}}, 2) == "  k: v\n");
}

TEST_CASE("durations pick a unit and keep three significant digits") {
  CHECK(format_duration_ns(0) == "0 ns");
  CHECK(format_duration_ns(999) == "999 ns");
  CHECK(format_duration_ns(1000) == "1.00 us");
  CHECK(format_duration_ns(12'345) == "12.3 us");
  CHECK(format_duration_ns(45'200'000) == "45.2 ms");
  CHECK(format_duration_ns(999'000'000) == "999 ms");
  CHECK(format_duration_ns(1'234'000'000) == "1.23 s");
  CHECK(format_duration_ns(123'000'000'000ull) == "2 min 3 s");
}

TEST_CASE("numbers - bytes - ratios and keys") {
  CHECK(format_count(0) == "0");
  CHECK(format_count(999) == "999");
  CHECK(format_count(1000) == "1,000");
  CHECK(format_count(1234567) == "1,234,567");
  CHECK(format_count(UINT64_MAX) == "18,446,744,073,709,551,615");
  CHECK(format_bytes(512) == "512 B");
  CHECK(format_bytes(2048) == "2.0 KiB");
  CHECK(format_bytes(3u << 20) == "3.0 MiB");
  CHECK(format_ratio(2.254) == "2.25x");
  CHECK(format_ratio(12.34) == "12.3x");
  CHECK(format_ratio(1.0 / 0.0) == "n/a");
  CHECK(format_percent(0.0312) == "3.12%");
  CHECK(format_percent(0.5) == "50.0%");
  CHECK(format_ms(0.5) == "0.50");
  CHECK(format_ms(12.34) == "12.3");
  CHECK(format_ms(1234.5) == "1234");
  CHECK(short_key("0123456789abcdef0123") == "0123456789abcdef");
  CHECK(short_key("abc") == "abc");
}
