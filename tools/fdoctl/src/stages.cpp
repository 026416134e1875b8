#include "fdo/ctl/stages.h"

#include <algorithm>

namespace fdo::ctl {

using nlohmann::json;

namespace {

Error field_error(const std::string& field, const std::string& what) {
  return make_error(Errc::corrupt, "execute result: stage." + field + " " + what);
}

template <class T> Expected<T> field(const json& obj, const char* key, const std::string& path) {
  if (!obj.is_object() || !obj.contains(key)) return field_error(path + key, "is missing");
  const json& v = obj[key];
  if constexpr (std::is_same_v<T, std::string>) {
    if (!v.is_string()) return field_error(path + key, "is not a string");
  } else if constexpr (std::is_same_v<T, bool>) {
    if (!v.is_boolean()) return field_error(path + key, "is not a boolean");
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!v.is_number()) return field_error(path + key, "is not a number");
  } else {
    if (!v.is_number_integer()) return field_error(path + key, "is not an integer");
  }
  return v.get<T>();
}

const json* find_event(const json& counters, std::string_view name) {
  if (!counters.is_object() || !counters.contains("events") || !counters["events"].is_array())
    return nullptr;
  for (const json& e : counters["events"])
    if (e.is_object() && e.value("name", "") == name) return &e;
  return nullptr;
}

std::optional<std::uint64_t> event_value(const json* e) {
  if (e == nullptr || !e->contains("value") || !(*e)["value"].is_number_integer())
    return std::nullopt;
  const json& v = (*e)["value"];
  if (v.is_number_unsigned()) return v.get<std::uint64_t>();
  std::int64_t s = v.get<std::int64_t>();
  return s < 0 ? std::nullopt : std::optional<std::uint64_t>(static_cast<std::uint64_t>(s));
}

std::string group_label(const OutputGroup& g) {
  return "v" + std::to_string(g.profile_version) + " " + g.mode;
}

std::string stage_range(std::int64_t a, std::int64_t b) {
  return a == b ? std::to_string(a) : std::to_string(a) + "-" + std::to_string(b);
}

// Storage keys all start with the program's IK: show its head and the part
// that differs ("4d153fa2..-v", "4d153fa2..-2d1748cb930d").
std::string storage_label(const std::string& key) {
  if (key.size() <= 64) return short_key(key, 20);
  return key.substr(0, 8) + ".." + key.substr(64, 13);
}

double ratio(std::uint64_t base, std::uint64_t last) {
  return last == 0 ? 0.0 : static_cast<double>(base) / static_cast<double>(last);
}

} // namespace

Expected<StageRow> stage_row(const json& result) {
  if (!result.is_object() || !result.contains("stage") || !result["stage"].is_object())
    return make_error(Errc::corrupt, "execute result has no \"stage\" object");
  const json& s = result["stage"];
  StageRow r;
  FDO_TRY(r.number, field<std::int64_t>(s, "number", ""));
  FDO_TRY(r.mode, field<std::string>(s, "mode", ""));
  FDO_TRY(r.storage_key, field<std::string>(s, "storage_key", ""));
  FDO_TRY(r.profile_version, field<std::int64_t>(s, "profile_version", ""));
  FDO_TRY(r.recompiled, field<bool>(s, "recompiled", ""));
  FDO_TRY(r.compile_ms, field<double>(s, "compile_ms", ""));
  FDO_TRY(std::int64_t exec_ns, field<std::int64_t>(s, "exec_ns", ""));
  r.exec_ns = exec_ns < 0 ? 0 : static_cast<std::uint64_t>(exec_ns);
  if (!s.contains("cache") || !s["cache"].is_object()) return field_error("cache", "is missing");
  FDO_TRY(r.outcome, field<std::string>(s["cache"], "outcome", "cache."));
  FDO_TRY(r.reason, field<std::string>(s["cache"], "reason", "cache."));
  r.policy = s.value("policy", "");
  if (s.contains("profile_rewritten") && s["profile_rewritten"].is_object()) {
    const json& rw = s["profile_rewritten"];
    FDO_TRY(r.rewritten_from, field<std::int64_t>(rw, "from", "profile_rewritten."));
    FDO_TRY(r.rewritten_to, field<std::int64_t>(rw, "to", "profile_rewritten."));
  }
  const json counters = s.value("counters", json::object());
  const json* misses = find_event(counters, "branch-misses");
  r.branch_misses = event_value(misses);
  r.branch_instructions = event_value(find_event(counters, "branch-instructions"));
  if (!r.branch_misses) {
    if (misses == nullptr)
      r.branch_misses_status = "not counted (branch-misses is not in fdod's perf_events)";
    else
      r.branch_misses_status = misses->value("status", std::string("unavailable")) +
                               (misses->contains("reason") && (*misses)["reason"].is_string()
                                    ? ": " + (*misses)["reason"].get<std::string>()
                                    : std::string());
  }
  if (auto lc = s.find("lifecycle"); lc != s.end() && lc->is_object()) {
    FDO_TRY(r.phase, field<std::string>(*lc, "phase", "lifecycle."));
    for (const json& t : lc->value("transitions", json::array()))
      if (t.is_object())
        r.transitions.push_back(t.value("from", "?") + "->" + t.value("to", "?") + " (" +
                                t.value("cause", "?") + ")");
  }
  r.value = result.contains("value") ? result["value"] : json(nullptr);
  return r;
}

std::vector<Column> stage_columns() {
  return {
      {"stage", Align::right, 5},       {"cache", Align::left, 10}, {"reason", Align::left, 19},
      {"profile", Align::right, 7},     {"mode", Align::left, 15},  {"recompiled", Align::left, 10},
      {"compile ms", Align::right, 10}, {"exec", Align::right, 9},  {"br-misses", Align::right, 11},
      {"miss rate", Align::right, 9},   {"phase", Align::left, 12}, {"note", Align::left, 0}};
}

std::vector<std::string> stage_cells(const StageRow& r) {
  std::string misses = r.branch_misses ? format_count(*r.branch_misses) : "n/a";
  std::string rate = "n/a";
  if (r.branch_misses && r.branch_instructions && *r.branch_instructions > 0)
    rate = format_percent(static_cast<double>(*r.branch_misses) /
                          static_cast<double>(*r.branch_instructions));
  std::string note;
  if (r.rewritten_to)
    note = "profile rewritten v" + std::to_string(*r.rewritten_from) + " -> v" +
           std::to_string(*r.rewritten_to);
  for (const std::string& t : r.transitions)
    note += (note.empty() ? "" : "; ") + t;
  return {std::to_string(r.number),
          r.outcome,
          r.reason,
          "v" + std::to_string(r.profile_version),
          r.mode,
          r.recompiled ? "yes" : "no",
          r.recompiled ? format_ms(r.compile_ms) : "-",
          format_duration_ns(r.exec_ns),
          misses,
          rate,
          r.phase,
          note};
}

std::uint64_t median(std::vector<std::uint64_t> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  std::size_t n = v.size();
  if (n % 2 == 1) return v[n / 2];
  // Average without overflow.
  std::uint64_t a = v[n / 2 - 1], b = v[n / 2];
  return a / 2 + b / 2 + (a % 2 + b % 2) / 2;
}

RunSummary summarize(const std::vector<StageRow>& rows) {
  RunSummary s;
  s.stages = rows.size();
  if (rows.empty()) return s;
  std::vector<std::vector<std::uint64_t>> times;
  std::vector<std::size_t> group_of(rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const StageRow& r = rows[i];
    if (s.groups.empty() || s.groups.back().storage_key != r.storage_key ||
        s.groups.back().mode != r.mode || s.groups.back().profile_version != r.profile_version) {
      OutputGroup g;
      g.storage_key = r.storage_key;
      g.mode = r.mode;
      g.profile_version = r.profile_version;
      g.first_stage = r.number;
      s.groups.push_back(g);
      times.emplace_back();
    }
    s.groups.back().last_stage = r.number;
    ++s.groups.back().stages;
    times.back().push_back(r.exec_ns);
    group_of[i] = s.groups.size() - 1;
    if (r.rewritten_to) ++s.rewrites;
    if (r.recompiled) ++s.recompiles;
    if (r.value != rows.front().value) s.values_agree = false;
  }
  for (std::size_t g = 0; g < s.groups.size(); ++g)
    s.groups[g].median_exec_ns = median(times[g]);

  std::size_t last = rows.size() - 1;
  auto speedup = [&](std::size_t base) {
    Speedup sp;
    sp.base_stage = rows[base].number;
    sp.base_median_ns = s.groups[group_of[base]].median_exec_ns;
    sp.last_median_ns = s.groups[group_of[last]].median_exec_ns;
    sp.ratio = ratio(sp.base_median_ns, sp.last_median_ns);
    sp.base_single_ns = rows[base].exec_ns;
    sp.last_single_ns = rows[last].exec_ns;
    sp.single_ratio = ratio(sp.base_single_ns, sp.last_single_ns);
    sp.same_output = group_of[base] == group_of[last];
    return sp;
  };
  s.over_stage0 = speedup(0);
  for (std::size_t i = 0; i < rows.size(); ++i)
    if (rows[i].mode == "optimized") {
      s.over_first_optimized = speedup(i);
      break;
    }
  return s;
}

json to_json(const RunSummary& s) {
  auto sp_json = [](const std::optional<Speedup>& sp) -> json {
    if (!sp) return nullptr;
    return {{"base_stage", sp->base_stage},
            {"base_median_exec_ns", sp->base_median_ns},
            {"last_median_exec_ns", sp->last_median_ns},
            {"speedup", sp->ratio},
            {"base_exec_ns", sp->base_single_ns},
            {"last_exec_ns", sp->last_single_ns},
            {"single_stage_speedup", sp->single_ratio},
            {"same_output", sp->same_output}};
  };
  json groups = json::array();
  for (const auto& g : s.groups)
    groups.push_back({{"storage_key", g.storage_key},
                      {"mode", g.mode},
                      {"profile_version", g.profile_version},
                      {"first_stage", g.first_stage},
                      {"last_stage", g.last_stage},
                      {"stages", g.stages},
                      {"median_exec_ns", g.median_exec_ns}});
  return {{"stages", s.stages},
          {"rewrites", s.rewrites},
          {"recompiles", s.recompiles},
          {"values_agree", s.values_agree},
          {"outputs", std::move(groups)},
          {"speedup_over_stage0", sp_json(s.over_stage0)},
          {"speedup_over_first_optimized", sp_json(s.over_first_optimized)}};
}

std::string render_summary(const RunSummary& s, const std::vector<StageRow>& rows) {
  if (rows.empty()) return "no stages ran\n";
  std::string out = "\nsummary: " + std::to_string(s.stages) + " stage(s), " +
                    std::to_string(s.rewrites) + " profile rewrite(s), " +
                    std::to_string(s.recompiles) + " compile(s); returned " +
                    rows.back().value.dump() + "\n";
  if (!s.values_agree) {
    for (const auto& r : rows)
      if (r.value != rows.front().value) {
        out += "warning: stage " + std::to_string(r.number) + " returned " + r.value.dump() +
               " but stage " + std::to_string(rows.front().number) + " returned " +
               rows.front().value.dump() + "\n";
        break;
      }
  }
  Table t({{"compiled output", Align::left},
           {"stages", Align::left},
           {"median exec", Align::right},
           {"storage key", Align::left}});
  for (const auto& g : s.groups)
    t.add_row({group_label(g), stage_range(g.first_stage, g.last_stage),
               format_duration_ns(g.median_exec_ns), storage_label(g.storage_key)});
  std::string rendered = t.render();
  for (std::size_t pos = 0; pos < rendered.size();) {
    std::size_t nl = rendered.find('\n', pos);
    out += "  " + rendered.substr(pos, nl - pos) + "\n";
    pos = nl + 1;
  }
  auto line = [&](const char* what, const Speedup& sp) {
    std::string l = std::string("speed-up of the last stage over ") + what + ": " +
                    format_ratio(sp.ratio) + " (median " + format_duration_ns(sp.base_median_ns) +
                    " -> " + format_duration_ns(sp.last_median_ns) + "; single stages " +
                    format_duration_ns(sp.base_single_ns) + " -> " +
                    format_duration_ns(sp.last_single_ns) + ", " + format_ratio(sp.single_ratio) +
                    ")";
    if (sp.same_output) l += " [same compiled output]";
    return l + "\n";
  };
  if (s.over_stage0) {
    // A run on an already registered program starts where the daemon's
    // numbering is: compare with this run's first stage then.
    std::string base =
        s.over_stage0->base_stage == 0
            ? std::string("stage 0")
            : "this run's first stage (" + std::to_string(s.over_stage0->base_stage) + ")";
    out += line(base.c_str(), *s.over_stage0);
  }
  if (s.over_first_optimized)
    out += line(
        ("the first optimized stage (" + std::to_string(s.over_first_optimized->base_stage) + ")")
            .c_str(),
        *s.over_first_optimized);
  else
    out += "no stage ran optimized code yet: the profile is written after policy.min_stages "
           "instrumented stages with enough counts (policy.min_counts); run more --stages\n";
  bool any_misses = false;
  for (const auto& r : rows)
    any_misses = any_misses || r.branch_misses.has_value();
  if (!any_misses)
    out += "branch misses: n/a (" + rows.back().branch_misses_status +
           "); `fdoctl doctor` says what this host can count\n";
  return out;
}

} // namespace fdo::ctl
