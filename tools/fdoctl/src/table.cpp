#include "fdo/ctl/table.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace fdo::ctl {

namespace {

void append_cell(std::string& line, const std::string& cell, std::size_t width, Align align,
                 bool last) {
  std::size_t pad = cell.size() < width ? width - cell.size() : 0;
  if (align == Align::right) line.append(pad, ' ');
  line += cell;
  if (align == Align::left && !last) line.append(pad, ' ');
}

std::string join_line(const std::vector<std::string>& cells, const std::vector<Column>& columns,
                      const std::vector<std::size_t>& widths) {
  std::string line;
  for (std::size_t i = 0; i < columns.size(); ++i) {
    if (i > 0) line += "  ";
    const std::string empty;
    const std::string& cell = i < cells.size() ? cells[i] : empty;
    append_cell(line, cell, widths[i], columns[i].align, i + 1 == columns.size());
  }
  while (!line.empty() && line.back() == ' ')
    line.pop_back();
  return line;
}

std::vector<std::string> headers_of(const std::vector<Column>& columns) {
  std::vector<std::string> h;
  for (const auto& c : columns)
    h.push_back(c.header);
  return h;
}

std::string printf_string(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

} // namespace

void Table::add_row(std::vector<std::string> cells) {
  cells.resize(columns_.size());
  rows_.push_back(std::move(cells));
}

std::string Table::render() const {
  std::vector<std::size_t> widths;
  for (const auto& c : columns_)
    widths.push_back(std::max(c.header.size(), c.min_width));
  for (const auto& r : rows_)
    for (std::size_t i = 0; i < columns_.size(); ++i)
      widths[i] = std::max(widths[i], r[i].size());
  std::string out = join_line(headers_of(columns_), columns_, widths) + '\n';
  for (const auto& r : rows_)
    out += join_line(r, columns_, widths) + '\n';
  return out;
}

std::string StreamTable::header() const {
  std::vector<std::size_t> widths;
  for (const auto& c : columns_)
    widths.push_back(std::max(c.header.size(), c.min_width));
  return join_line(headers_of(columns_), columns_, widths) + '\n';
}

std::string StreamTable::row(const std::vector<std::string>& cells) const {
  std::vector<std::size_t> widths;
  for (const auto& c : columns_)
    widths.push_back(std::max(c.header.size(), c.min_width));
  return join_line(cells, columns_, widths) + '\n';
}

std::string render_fields(const std::vector<std::pair<std::string, std::string>>& fields,
                          std::size_t indent) {
  std::size_t width = 0;
  for (const auto& [k, v] : fields)
    width = std::max(width, k.size() + 1);
  std::string out;
  for (const auto& [k, v] : fields) {
    std::string line(indent, ' ');
    line += k + ":";
    if (!v.empty()) {
      line.append(width - (k.size() + 1) + 1, ' ');
      line += v;
    }
    out += line + '\n';
  }
  return out;
}

std::string format_duration_ns(std::uint64_t ns) {
  double v = static_cast<double>(ns);
  if (ns < 1000) return std::to_string(ns) + " ns";
  if (ns < 1'000'000)
    return printf_string(v < 9'999.5 ? "%.2f us" : (v < 99'999.5 ? "%.1f us" : "%.0f us"), v / 1e3);
  if (ns < 1'000'000'000)
    return printf_string(v < 9'999'500 ? "%.2f ms" : (v < 99'999'500 ? "%.1f ms" : "%.0f ms"),
                         v / 1e6);
  if (ns < 120'000'000'000ull)
    return printf_string(v < 9'999'500'000 ? "%.2f s" : "%.1f s", v / 1e9);
  std::uint64_t secs = ns / 1'000'000'000ull;
  return std::to_string(secs / 60) + " min " + std::to_string(secs % 60) + " s";
}

std::string format_ms(double ms) {
  if (!(ms >= 0)) return "?";
  if (ms < 10) return printf_string("%.2f", ms);
  if (ms < 100) return printf_string("%.1f", ms);
  return printf_string("%.0f", ms);
}

std::string format_bytes(std::uint64_t bytes) {
  if (bytes < 1024) return std::to_string(bytes) + " B";
  static const char* units[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes) / 1024.0;
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  return printf_string("%.1f ", v) + units[u];
}

std::string format_count(std::uint64_t n) {
  std::string digits = std::to_string(n);
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string format_ratio(double ratio) {
  if (!std::isfinite(ratio)) return "n/a";
  return printf_string(ratio < 10 ? "%.2fx" : "%.1fx", ratio);
}

std::string format_percent(double fraction) {
  if (!std::isfinite(fraction)) return "n/a";
  double p = fraction * 100.0;
  return printf_string(std::fabs(p) < 10 ? "%.2f%%" : "%.1f%%", p);
}

std::string short_key(std::string_view key, std::size_t n) {
  return std::string(key.substr(0, std::min(n, key.size())));
}

} // namespace fdo::ctl
