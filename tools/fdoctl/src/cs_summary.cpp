#include "fdo/ctl/cs_summary.h"

#include "fdo/ctl/table.h"

#include <algorithm>

namespace fdo::ctl {

namespace {
// The name a person knows: the CS record's own source name, else the one the
// ordinary record of the same function carries.
std::string shown_cs_name(const ProfileDoc& doc, const std::string& name,
                          const FunctionProfile& cs) {
  std::string shown = display_name(name, cs);
  if (shown == name)
    if (auto it = doc.functions.find(name); it != doc.functions.end())
      shown = display_name(name, it->second);
  return shown == name ? shown : shown + " (" + name + ")";
}
} // namespace

std::vector<CsFunctionSummary> cs_summary(const ProfileDoc& doc) {
  std::vector<CsFunctionSummary> out;
  for (const auto& [name, f] : doc.cs_functions) {
    CsFunctionSummary s{name, shown_cs_name(doc, name, f), f.counts.size(), 0};
    for (std::uint64_t c : f.counts)
      s.total = s.total > UINT64_MAX - c ? UINT64_MAX : s.total + c;
    out.push_back(std::move(s));
  }
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return a.total != b.total ? a.total > b.total : a.name < b.name;
  });
  return out;
}

std::string render_cs_functions(const ProfileDoc& doc, std::size_t limit) {
  const std::vector<CsFunctionSummary> summary = cs_summary(doc);
  if (summary.empty()) return "";
  std::uint64_t all = 0;
  for (const CsFunctionSummary& s : summary)
    all = all > UINT64_MAX - s.total ? UINT64_MAX : all + s.total;
  std::string out = "\ncontext-sensitive counts (cs_functions): " + std::to_string(summary.size()) +
                    " functions, " + format_count(all) + " counts in total\n";
  Table t(
      {{"function"}, {"counters", Align::right}, {"total", Align::right}, {"share", Align::right}});
  for (std::size_t i = 0; i < summary.size() && i < limit; ++i) {
    const CsFunctionSummary& s = summary[i];
    t.add_row(
        {s.shown, std::to_string(s.counters), format_count(s.total),
         format_percent(all == 0 ? 0.0 : static_cast<double>(s.total) / static_cast<double>(all))});
  }
  out += t.render();
  if (summary.size() > limit) {
    // Appended piece by piece: GCC 12 misreads "(" + std::string as an
    // overlapping copy (-Wrestrict).
    out += '(';
    out += std::to_string(summary.size() - limit);
    out += " more functions)\n";
  }
  return out;
}

} // namespace fdo::ctl
