#include "fdo/ctl/diff.h"

#include "fdo/ctl/cs_summary.h"
#include "fdo/ctl/table.h"
#include "fdo/util/enum_names.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

namespace fdo::ctl {

using nlohmann::json;

namespace {
constexpr EnumNames<FunctionChange, 4> kFunctionChangeNames{{{
    {FunctionChange::added, "added"},
    {FunctionChange::removed, "removed"},
    {FunctionChange::changed, "changed"},
    {FunctionChange::unchanged, "unchanged"},
}}};
} // namespace

std::string_view to_string(FunctionChange c) {
  return kFunctionChangeNames.name(c);
}

namespace {

std::uint64_t sum(const std::vector<std::uint64_t>& v) {
  std::uint64_t s = 0;
  for (std::uint64_t x : v)
    s = (s > UINT64_MAX - x) ? UINT64_MAX : s + x;
  return s;
}

double share(std::uint64_t part, std::uint64_t whole) {
  return whole == 0 ? 0.0 : static_cast<double>(part) / static_cast<double>(whole);
}

json optional_json(const std::optional<int>& v) {
  return v ? json(*v) : json(nullptr);
}
json optional_json(const std::optional<CompileMode>& v) {
  return v ? json(std::string(to_string(*v))) : json(nullptr);
}

std::vector<KnobChange> diff_knobs(const Knobs& a, const Knobs& b) {
  std::vector<KnobChange> out;
  auto add = [&](const char* name, json before, json after) {
    if (before != after) out.push_back({name, std::move(before), std::move(after)});
  };
  add("opt_level", a.opt_level, b.opt_level);
  add("size_level", a.size_level, b.size_level);
  add("unroll", a.unroll, b.unroll);
  add("vectorize", a.vectorize, b.vectorize);
  add("inline_threshold", optional_json(a.inline_threshold), optional_json(b.inline_threshold));
  add("mode", optional_json(a.mode), optional_json(b.mode));
  add("text_offset", a.text_offset, b.text_offset);
  add("spec_min_share", a.spec_min_share, b.spec_min_share);
  add("spec_max_clones", a.spec_max_clones, b.spec_max_clones);
  add("cold_code", std::string(to_string(a.cold_code)), std::string(to_string(b.cold_code)));
  return out;
}

std::string signed_points(double delta) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.2f pts", delta * 100.0);
  return buf;
}

std::string join_indexes(const std::vector<std::uint32_t>& v) {
  std::string s;
  for (auto i : v)
    s += (s.empty() ? "" : ", ") + std::to_string(i);
  return s;
}

// The context-sensitive counts' part of the report; "" when neither side
// has any.
std::string render_cs_changes(const ProfileDiff& d) {
  if (d.cs_functions_before == 0 && d.cs_functions_after == 0) return "";
  std::string out =
      "\ncontext-sensitive counts (cs_functions): " + std::to_string(d.cs_functions_before) +
      " -> " + std::to_string(d.cs_functions_after) + " functions, " +
      format_count(d.cs_total_before) + " -> " + format_count(d.cs_total_after) + " counts\n";
  for (const CsFunctionDiff& c : d.cs_functions) {
    out += "  " + c.shown + ": ";
    if (!c.before)
      out += "added, " + format_count(c.total_after) + " counts\n";
    else if (!c.after)
      out += "removed (had " + format_count(c.total_before) + " counts)\n";
    else
      out += format_count(c.total_before) + " -> " + format_count(c.total_after) + " counts" +
             (c.counters_before != c.counters_after
                  ? ", " + std::to_string(c.counters_before) + " -> " +
                        std::to_string(c.counters_after) + " counters"
                  : std::string()) +
             "\n";
  }
  return out;
}

std::string knob_text(const json& v) {
  return v.is_null() ? "unset" : v.dump();
}

// Source name, with the PGO name beside it when they differ (static
// functions: the canonical key says nothing to a person).
std::string shown_name(const FunctionDiff& f) {
  if (f.source_name.empty() || f.source_name == f.name) return f.name;
  return f.source_name + " (" + f.name + ")";
}

// Context-sensitive counts, per function: totals on each side and the
// functions whose counts (or CFG) differ.
void diff_cs_functions(const ProfileDoc& before, const ProfileDoc& after, ProfileDiff& d) {
  std::map<std::string, CsFunctionDiff> by_name;
  // One side's functions into by_name and its totals.
  auto add_side = [&](const ProfileDoc& doc, bool CsFunctionDiff::*present,
                      std::size_t CsFunctionDiff::*counters, std::uint64_t CsFunctionDiff::*total,
                      std::size_t& functions, std::uint64_t& all) {
    for (const CsFunctionSummary& s : cs_summary(doc)) {
      CsFunctionDiff& c = by_name[s.name];
      c.name = s.name;
      c.shown = s.shown;
      c.*present = true;
      c.*counters = s.counters;
      c.*total = s.total;
      ++functions;
      all = all > UINT64_MAX - s.total ? UINT64_MAX : all + s.total;
    }
  };
  add_side(before, &CsFunctionDiff::before, &CsFunctionDiff::counters_before,
           &CsFunctionDiff::total_before, d.cs_functions_before, d.cs_total_before);
  add_side(after, &CsFunctionDiff::after, &CsFunctionDiff::counters_after,
           &CsFunctionDiff::total_after, d.cs_functions_after, d.cs_total_after);
  for (auto& [name, c] : by_name) {
    if (c.before && c.after && before.cs_functions.at(name) == after.cs_functions.at(name))
      continue;
    d.cs_functions.push_back(std::move(c));
  }
}

// The top value of each argument that differs between the two sides.
std::vector<std::string> diff_arg_values(const FunctionProfile& a, const FunctionProfile& b) {
  auto top = [](const FunctionProfile& f, std::uint32_t arg) -> std::string {
    for (const ArgValues& v : f.arg_values)
      if (v.arg == arg && !v.values.empty() && v.total() > 0)
        return std::to_string(v.values.front().first) + " (" +
               format_percent(static_cast<double>(v.values.front().second) /
                              static_cast<double>(v.total())) +
               ")";
    return "-";
  };
  std::set<std::uint32_t> args;
  for (const FunctionProfile* f : {&a, &b})
    for (const ArgValues& v : f->arg_values)
      args.insert(v.arg);
  std::vector<std::string> out;
  for (std::uint32_t arg : args) {
    std::string before = top(a, arg), after = top(b, arg);
    // The same value with another share is no change of what is bound.
    if (before.substr(0, before.find(' ')) == after.substr(0, after.find(' '))) continue;
    out.push_back("arg " + std::to_string(arg) + ": " + before + " -> " + after);
  }
  return out;
}

} // namespace

ProfileDiff diff_profiles(const ProfileDoc& before, const ProfileDoc& after,
                          const DiffOptions& options) {
  ProfileDiff d;
  d.knobs = diff_knobs(before.knobs, after.knobs);
  for (const auto& [name, f] : before.functions)
    d.total_before += sum(f.counts);
  for (const auto& [name, f] : after.functions)
    d.total_after += sum(f.counts);

  std::set<std::string> names;
  for (const auto& [name, f] : before.functions)
    names.insert(name);
  for (const auto& [name, f] : after.functions)
    names.insert(name);

  const double eps = 1e-12; // weights are ratios of integers: no real move is this small
  for (const auto& name : names) {
    FunctionDiff fd;
    fd.name = name;
    auto a = before.functions.find(name);
    auto b = after.functions.find(name);
    const FunctionProfile* fa = a == before.functions.end() ? nullptr : &a->second;
    const FunctionProfile* fb = b == after.functions.end() ? nullptr : &b->second;
    fd.source_name = fb != nullptr && !fb->source_name.empty() ? fb->source_name
                     : fa != nullptr                           ? fa->source_name
                                                               : std::string();
    if (fa != nullptr) {
      fd.code_layout_before = fa->layout;
      fd.cfg_hash_before = fa->cfg_hash;
      fd.counters_before = fa->counts.size();
      fd.total_before = sum(fa->counts);
      fd.share_before = share(fd.total_before, d.total_before);
    }
    if (fb != nullptr) {
      fd.code_layout_after = fb->layout;
      fd.cfg_hash_after = fb->cfg_hash;
      fd.counters_after = fb->counts.size();
      fd.total_after = sum(fb->counts);
      fd.share_after = share(fd.total_after, d.total_after);
    }
    if (fa == nullptr || fb == nullptr) {
      fd.change = fa == nullptr ? FunctionChange::added : FunctionChange::removed;
      d.functions.push_back(std::move(fd));
      continue;
    }
    fd.layout_changed = fa->cfg_hash != fb->cfg_hash || fa->counts.size() != fb->counts.size();
    fd.hotness_changed =
        std::fabs(fd.share_after - fd.share_before) + eps >= options.min_weight_change &&
        fd.share_after != fd.share_before;
    // Counters are comparable only under the same layout; a new layout means
    // the function's code changed and every counter means something else.
    if (!fd.layout_changed) {
      std::vector<CounterChange> moves;
      for (std::size_t i = 0; i < fa->counts.size(); ++i) {
        CounterChange c;
        c.index = i;
        c.before = fa->counts[i];
        c.after = fb->counts[i];
        c.weight_before = share(c.before, fd.total_before);
        c.weight_after = share(c.after, fd.total_after);
        double delta = std::fabs(c.weight_after - c.weight_before);
        fd.max_weight_change = std::max(fd.max_weight_change, delta);
        // A counter that went from never to ever (or back) is always a change
        // of shape, however small its weight.
        bool flipped =
            (c.before == 0) != (c.after == 0) && fd.total_before > 0 && fd.total_after > 0;
        if ((delta + eps >= options.min_weight_change && delta > 0) || flipped) moves.push_back(c);
      }
      fd.weights_changed = moves.size();
      std::stable_sort(moves.begin(), moves.end(),
                       [](const CounterChange& x, const CounterChange& y) {
                         return std::fabs(x.weight_after - x.weight_before) >
                                std::fabs(y.weight_after - y.weight_before);
                       });
      if (moves.size() > options.max_counters_per_function)
        moves.resize(options.max_counters_per_function);
      std::sort(moves.begin(), moves.end(),
                [](const CounterChange& x, const CounterChange& y) { return x.index < y.index; });
      fd.counters = std::move(moves);
    }
    std::set<std::uint32_t> ua(fa->unpredictable.begin(), fa->unpredictable.end());
    std::set<std::uint32_t> ub(fb->unpredictable.begin(), fb->unpredictable.end());
    for (auto i : ub)
      if (!ua.contains(i)) fd.unpredictable_added.push_back(i);
    for (auto i : ua)
      if (!ub.contains(i)) fd.unpredictable_removed.push_back(i);
    fd.arg_values_changed = diff_arg_values(*fa, *fb);
    bool changed = fd.layout_changed || fd.hotness_changed || fd.weights_changed > 0 ||
                   !fd.arg_values_changed.empty() || !fd.unpredictable_added.empty() ||
                   !fd.unpredictable_removed.empty() ||
                   fd.code_layout_before != fd.code_layout_after;
    fd.change = changed ? FunctionChange::changed : FunctionChange::unchanged;
    d.functions.push_back(std::move(fd));
  }
  for (const auto& f : d.functions) {
    switch (f.change) {
    case FunctionChange::added:
      ++d.added;
      break;
    case FunctionChange::removed:
      ++d.removed;
      break;
    case FunctionChange::changed:
      ++d.changed;
      break;
    case FunctionChange::unchanged:
      ++d.unchanged;
      break;
    }
  }
  std::stable_partition(d.functions.begin(), d.functions.end(), [](const FunctionDiff& f) {
    return f.change != FunctionChange::unchanged;
  });
  diff_cs_functions(before, after, d);
  ProfileDoc a = before, b = after;
  a.provenance = {};
  b.provenance = {};
  d.compile_affecting_equal = profile_digest(a) == profile_digest(b);
  return d;
}

json to_json(const ProfileDiff& d) {
  json knobs = json::array();
  for (const auto& k : d.knobs)
    knobs.push_back({{"knob", k.knob}, {"before", k.before}, {"after", k.after}});
  json functions = json::array();
  for (const auto& f : d.functions) {
    json counters = json::array();
    for (const auto& c : f.counters)
      counters.push_back({{"index", c.index},
                          {"before", c.before},
                          {"after", c.after},
                          {"weight_before", c.weight_before},
                          {"weight_after", c.weight_after}});
    functions.push_back({{"name", f.name},
                         {"source_name", f.source_name.empty() ? f.name : f.source_name},
                         {"change", std::string(to_string(f.change))},
                         {"cfg_hash_before", f.cfg_hash_before},
                         {"cfg_hash_after", f.cfg_hash_after},
                         {"counters_before", f.counters_before},
                         {"counters_after", f.counters_after},
                         {"total_before", f.total_before},
                         {"total_after", f.total_after},
                         {"share_before", f.share_before},
                         {"share_after", f.share_after},
                         {"layout_changed", f.layout_changed},
                         {"hotness_changed", f.hotness_changed},
                         {"weights_changed", f.weights_changed},
                         {"max_weight_change", f.max_weight_change},
                         {"counters", std::move(counters)},
                         {"unpredictable_added", f.unpredictable_added},
                         {"unpredictable_removed", f.unpredictable_removed},
                         {"code_layout_before", std::string(to_string(f.code_layout_before))},
                         {"code_layout_after", std::string(to_string(f.code_layout_after))},
                         {"arg_values_changed", f.arg_values_changed}});
  }
  json cs = json::array();
  for (const auto& c : d.cs_functions)
    cs.push_back({{"name", c.name},
                  {"shown", c.shown},
                  {"before", c.before},
                  {"after", c.after},
                  {"counters_before", c.counters_before},
                  {"counters_after", c.counters_after},
                  {"total_before", c.total_before},
                  {"total_after", c.total_after}});
  return {{"knobs", std::move(knobs)},
          {"functions", std::move(functions)},
          {"total_before", d.total_before},
          {"total_after", d.total_after},
          {"summary",
           {{"added", d.added},
            {"removed", d.removed},
            {"changed", d.changed},
            {"unchanged", d.unchanged}}},
          {"compile_affecting_equal", d.compile_affecting_equal},
          {"cs_functions",
           {{"functions_before", d.cs_functions_before},
            {"functions_after", d.cs_functions_after},
            {"total_before", d.cs_total_before},
            {"total_after", d.cs_total_after},
            {"changed", std::move(cs)}}}};
}

std::string render_diff(const ProfileDiff& d, const std::string& title, Unchanged unchanged) {
  std::string out = title + "\n";
  if (d.compile_affecting_equal)
    out += "no compile-affecting difference: both versions compile to the same code\n";
  out += "\nknobs:";
  if (d.knobs.empty()) {
    out += " unchanged\n";
  } else {
    out += "\n";
    for (const auto& k : d.knobs)
      out += "  " + k.knob + ": " + knob_text(k.before) + " -> " + knob_text(k.after) + "\n";
  }
  out += "\ncounts: " + format_count(d.total_before) + " -> " + format_count(d.total_after) +
         " in total\n";
  out += "functions: " + std::to_string(d.changed) + " changed, " + std::to_string(d.added) +
         " added, " + std::to_string(d.removed) + " removed, " + std::to_string(d.unchanged) +
         " unchanged\n";
  for (const auto& f : d.functions) {
    if (f.change == FunctionChange::unchanged) continue;
    out += '\n';
    out += shown_name(f);
    out += "  [" + std::string(to_string(f.change)) + "]";
    if (f.change == FunctionChange::added) {
      out += "  " + std::to_string(f.counters_after) + " counters, " + format_count(f.total_after) +
             " counts (" + format_percent(f.share_after) + " of all)\n";
      continue;
    }
    if (f.change == FunctionChange::removed) {
      out += "  had " + std::to_string(f.counters_before) + " counters, " +
             format_count(f.total_before) + " counts\n";
      continue;
    }
    out += "  counts " + format_count(f.total_before) + " -> " + format_count(f.total_after) +
           ", share of all " + format_percent(f.share_before) + " -> " +
           format_percent(f.share_after) + (f.hotness_changed ? " (hotness changed)" : "") + "\n";
    if (f.layout_changed) {
      char buf[96];
      std::snprintf(
          buf, sizeof buf, "  CFG changed: hash %016llx -> %016llx, %zu -> %zu counters\n",
          static_cast<unsigned long long>(f.cfg_hash_before),
          static_cast<unsigned long long>(f.cfg_hash_after), f.counters_before, f.counters_after);
      out += buf;
    }
    if (!f.counters.empty()) {
      Table t({{"counter", Align::right},
               {"before", Align::right},
               {"after", Align::right},
               {"weight before", Align::right},
               {"weight after", Align::right},
               {"change", Align::right}});
      for (const auto& c : f.counters)
        t.add_row({std::to_string(c.index), format_count(c.before), format_count(c.after),
                   format_percent(c.weight_before), format_percent(c.weight_after),
                   signed_points(c.weight_after - c.weight_before)});
      std::string rendered = t.render();
      std::size_t pos = 0;
      while (pos < rendered.size()) {
        std::size_t nl = rendered.find('\n', pos);
        out += "    " + rendered.substr(pos, nl - pos) + "\n";
        pos = nl + 1;
      }
      if (f.weights_changed > f.counters.size())
        out += "    ... and " + std::to_string(f.weights_changed - f.counters.size()) +
               " more counters moved\n";
    }
    if (!f.unpredictable_added.empty())
      out += "  !unpredictable added: " + join_indexes(f.unpredictable_added) + "\n";
    if (!f.unpredictable_removed.empty())
      out += "  !unpredictable removed: " + join_indexes(f.unpredictable_removed) + "\n";
    for (const std::string& a : f.arg_values_changed)
      out += "  argument values: " + a + "\n";
    if (f.code_layout_before != f.code_layout_after)
      out += "  code layout: " + std::string(to_string(f.code_layout_before)) + " -> " +
             std::string(to_string(f.code_layout_after)) + "\n";
  }
  out += render_cs_changes(d);
  if (unchanged == Unchanged::list && d.unchanged > 0) {
    out += "\nunchanged:";
    for (const auto& f : d.functions)
      if (f.change == FunctionChange::unchanged) out += " " + shown_name(f);
    out += "\n";
  }
  return out;
}

} // namespace fdo::ctl
