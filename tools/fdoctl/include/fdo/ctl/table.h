// Plain-text tables and number formatting for fdoctl's human output. ASCII
// only, two spaces between columns, no trailing spaces: easy to read, and easy
// to `awk` for people who did not ask for --json.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fdo::ctl {

enum class Align { left, right };

struct Column {
  std::string header;
  Align align = Align::left;
  std::size_t min_width = 0; // for StreamTable, the width rows are printed at
};

class Table {
public:
  explicit Table(std::vector<Column> columns) : columns_(std::move(columns)) {}

  // Missing cells render empty; extra cells are an error in the caller's
  // code, so they are dropped rather than shifting other columns.
  void add_row(std::vector<std::string> cells);
  std::size_t rows() const { return rows_.size(); }

  // Header, then one line per row; widths fit the widest cell of each column.
  std::string render() const;

private:
  std::vector<Column> columns_;
  std::vector<std::vector<std::string>> rows_;
};

// Rows printed as they arrive (fdoctl run prints a stage as soon as it ends),
// so widths are fixed up front: each column is max(header, min_width) wide and
// a longer cell simply pushes the rest of its line right.
class StreamTable {
public:
  explicit StreamTable(std::vector<Column> columns) : columns_(std::move(columns)) {}
  std::string header() const;
  std::string row(const std::vector<std::string>& cells) const;

private:
  std::vector<Column> columns_;
};

// "key: value" lines with the values aligned.
std::string render_fields(const std::vector<std::pair<std::string, std::string>>& fields,
                          std::size_t indent = 0);

// --- formatting ---------------------------------------------------------
// 950 ns, 12.3 us, 45.2 ms, 1.23 s, 2 min 3 s
std::string format_duration_ns(std::uint64_t ns);
// Milliseconds as fdod reports compile times: "0.8", "12.3", "1234".
std::string format_ms(double ms);
// 512 B, 12.0 KiB, 3.4 MiB, 1.0 GiB
std::string format_bytes(std::uint64_t bytes);
// 1234567 -> "1,234,567"
std::string format_count(std::uint64_t n);
// 2.25 -> "2.25x"
std::string format_ratio(double ratio);
// 0.0312 -> "3.12%"
std::string format_percent(double fraction);
// The first `n` characters of a key (keys are 64 hex digits; 16 is plenty to
// be unique in practice and is accepted back as a prefix).
std::string short_key(std::string_view key, std::size_t n = 16);

} // namespace fdo::ctl
