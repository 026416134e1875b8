#include "fdo/ctl/hot_functions.h"

#include "fdo/ctl/table.h"

#include <algorithm>
#include <map>
#include <vector>

namespace fdo::ctl {

using nlohmann::json;

namespace {
std::string source_name_of(const ProfileDoc& doc, const std::string& name) {
  auto it = doc.functions.find(name);
  if (it == doc.functions.end()) return name;
  std::string shown = display_name(name, it->second);
  return shown == name ? shown : shown + " (" + name + ")";
}

std::uint64_t count_of(const json& v) {
  if (v.is_number_unsigned()) return v.get<std::uint64_t>();
  if (v.is_number_integer() && v.get<std::int64_t>() > 0)
    return static_cast<std::uint64_t>(v.get<std::int64_t>());
  return 0;
}
// The hot functions' branches with sampled misses (hardware.sampling.branches),
// most missed first, a few per function.
std::string render_branch_misses(const ProfileDoc& doc, const json& rec,
                                 const std::vector<std::string>& functions) {
  constexpr std::size_t kPerFunction = 3;
  auto b = rec.find("branches");
  if (b == rec.end() || !b->is_object()) return "";
  Table t({{"branch"}, {"miss samples", Align::right}, {"taken", Align::right}, {"marked"}});
  bool any = false;
  for (const std::string& fn : functions) {
    auto f = b->find(fn);
    if (f == b->end() || !f->is_object()) continue;
    struct Row {
      std::uint64_t misses;
      std::string index;
      const json* entry;
    };
    std::vector<Row> rows;
    for (auto it = f->begin(); it != f->end(); ++it) {
      if (!it->is_object()) continue;
      std::uint64_t n = 0;
      if (auto m = it->find("misses"); m != it->end() && m->is_object())
        for (const json& v : *m)
          n += count_of(v);
      rows.push_back({n, it.key(), &*it});
    }
    std::stable_sort(rows.begin(), rows.end(),
                     [](const Row& x, const Row& y) { return x.misses > y.misses; });
    const auto fp = doc.functions.find(fn);
    for (std::size_t i = 0; i < rows.size() && i < kPerFunction; ++i) {
      const json& e = *rows[i].entry;
      const std::uint64_t taken = count_of(e.value("taken", json(0)));
      const std::uint64_t not_taken = count_of(e.value("not_taken", json(0)));
      std::string split =
          taken + not_taken == 0
              ? "-"
              : format_percent(static_cast<double>(taken) / static_cast<double>(taken + not_taken));
      bool marked = false;
      if (fp != doc.functions.end())
        for (std::uint32_t u : fp->second.unpredictable)
          marked = marked || std::to_string(u) == rows[i].index;
      t.add_row({source_name_of(doc, fn) + " #" + rows[i].index, format_count(rows[i].misses),
                 split, marked ? "!unpredictable" : ""});
      any = true;
    }
  }
  return any ? "\nsampled branch misses of the hottest functions:\n" + t.render() : "";
}
} // namespace

std::string render_hot_functions(const ProfileDoc& doc, std::size_t limit) {
  auto s = doc.hardware.find("sampling");
  if (s == doc.hardware.end() || !s->is_object()) return "";
  const json& rec = *s;
  std::vector<std::pair<double, std::string>> order;
  if (auto t = rec.find("time_share"); t != rec.end() && t->is_object())
    for (auto it = t->begin(); it != t->end(); ++it)
      if (it->is_number()) order.push_back({it->get<double>(), it.key()});
  // Miss events, each with its total so a function's part of it reads as a share.
  std::map<std::string, std::pair<std::uint64_t, std::map<std::string, std::uint64_t>>> misses;
  if (auto m = rec.find("misses"); m != rec.end() && m->is_object())
    for (auto ev = m->begin(); ev != m->end(); ++ev) {
      if (!ev->is_object()) continue;
      auto& [total, per_fn] = misses[ev.key()];
      for (auto f = ev->begin(); f != ev->end(); ++f) {
        per_fn[f.key()] = count_of(*f);
        total += count_of(*f);
        if (std::none_of(order.begin(), order.end(), [&](auto& o) { return o.second == f.key(); }))
          order.push_back({0.0, f.key()});
      }
    }
  std::stable_sort(order.begin(), order.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  std::string out = "\nsampled: " + format_count(count_of(rec.value("samples", json(0)))) + " " +
                    rec.value("event", std::string("clock")) + " samples in program code over " +
                    std::to_string(count_of(rec.value("stages", json(0)))) + " stages, " +
                    format_count(count_of(rec.value("outside_samples", json(0)))) + " outside it\n";
  if (order.empty()) return out;
  std::vector<Column> columns = {{"hottest functions"}, {"time share", Align::right}};
  for (const auto& [event, m] : misses)
    columns.push_back({event + " samples", Align::right});
  Table t(columns);
  for (std::size_t i = 0; i < order.size() && i < limit; ++i) {
    const auto& [share, name] = order[i];
    std::vector<std::string> row = {source_name_of(doc, name), format_percent(share)};
    for (const auto& [event, m] : misses) {
      auto it = m.second.find(name);
      std::uint64_t n = it == m.second.end() ? 0 : it->second;
      row.push_back(format_count(n) + " (" +
                    format_percent(m.first == 0
                                       ? 0.0
                                       : static_cast<double>(n) / static_cast<double>(m.first)) +
                    ")");
    }
    t.add_row(row);
  }
  out += t.render();
  if (order.size() > limit)
    out += "(" + std::to_string(order.size() - limit) + " more functions)\n";
  std::vector<std::string> shown;
  for (std::size_t i = 0; i < order.size() && i < limit; ++i)
    shown.push_back(order[i].second);
  out += render_branch_misses(doc, rec, shown);
  return out;
}

std::string render_code_layout(const ProfileDoc& doc) {
  std::string hot, cold;
  for (const auto& [name, f] : doc.functions) {
    std::string& list = f.layout == FunctionLayout::hot ? hot : cold;
    if (f.layout == FunctionLayout::normal) continue;
    list += (list.empty() ? "" : ", ") + source_name_of(doc, name);
  }
  if (hot.empty() && cold.empty()) return "";
  std::string out = "\ncode layout from sampled i-cache misses:\n";
  if (!hot.empty()) out += "  hot (together, first in the text): " + hot + "\n";
  if (!cold.empty()) out += "  cold (optimized for size, last): " + cold + "\n";
  return out;
}

std::string render_arg_values(const ProfileDoc& doc) {
  Table t({{"function"},
           {"arg", Align::right},
           {"top value", Align::right},
           {"share", Align::right},
           {"calls", Align::right},
           {"distinct"}});
  std::size_t rows = 0;
  for (const auto& [name, f] : doc.functions)
    for (const ArgValues& a : f.arg_values) {
      const std::uint64_t total = a.total();
      if (a.values.empty() || total == 0) continue;
      const auto& [value, count] = a.values.front();
      t.add_row({source_name_of(doc, name), std::to_string(a.arg), std::to_string(value),
                 format_percent(static_cast<double>(count) / static_cast<double>(total)),
                 format_count(total), std::to_string(a.values.size()) + (a.other ? "+" : "")});
      ++rows;
    }
  if (rows == 0) return "";
  return "\nargument values (value specialization, knobs.spec_min_share " +
         std::to_string(doc.knobs.spec_min_share) + "%):\n" + t.render();
}

} // namespace fdo::ctl
