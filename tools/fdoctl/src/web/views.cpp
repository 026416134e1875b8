#include "views.h"

#include "fdo/ctl/diff.h"
#include "fdo/util/profile.h"

#include <algorithm>
#include <set>

namespace fdo::ctl::web {

using nlohmann::json;

namespace {

Expected<ProfileDoc> profile_doc(const json& get_result) {
  if (!get_result.is_object() || !get_result.contains("profile"))
    return make_error(Errc::corrupt, "profile.get result has no \"profile\"");
  auto doc = profile_from_json(get_result["profile"]);
  if (!doc) return std::move(doc).error().context("profile document");
  return doc;
}

std::uint64_t saturating_sum(const std::vector<std::uint64_t>& v) {
  std::uint64_t s = 0;
  for (std::uint64_t x : v)
    s = s > UINT64_MAX - x ? UINT64_MAX : s + x;
  return s;
}

// Sampled figures for one function from the profile's sampling record
// (hardware.sampling, written with each version by the feedback loop;
// docs/perf.md): its share of the clock samples (`time_share`) and its miss
// samples per hardware event (e.g. `branch-misses`), keyed by PGO or source
// name. Numbers only; empty when the profile has none (instrumentation only,
// or sampling off).
json sampled_figures(const json& hardware, const std::string& pgo_name,
                     const std::string& source_name) {
  json out = json::object();
  if (!hardware.is_object()) return out;
  auto sampling = hardware.find("sampling");
  if (sampling == hardware.end() || !sampling->is_object()) return out;
  auto figure = [&](const json& table) -> const json* {
    if (!table.is_object()) return nullptr;
    auto it = table.find(pgo_name);
    if (it == table.end() && !source_name.empty()) it = table.find(source_name);
    return it != table.end() && it->is_number() ? &*it : nullptr;
  };
  if (auto t = sampling->find("time_share"); t != sampling->end())
    if (const json* v = figure(*t)) out["time_share"] = *v;
  if (auto m = sampling->find("misses"); m != sampling->end() && m->is_object())
    for (const auto& [event, by_function] : m->items())
      if (const json* v = figure(by_function)) out[event] = *v;
  return out;
}

} // namespace

Expected<json> overview_view(Backend& backend) {
  FDO_TRY(json profiles, backend.call("profile.list", json::object()));
  json out = {{"source", backend.describe()},
              {"backend", backend.kind() == BackendKind::daemon ? "daemon" : "store"},
              {"profiles", profiles.value("profiles", json::array())},
              {"programs", nullptr}};
  if (backend.kind() == BackendKind::daemon) {
    FDO_TRY(json programs, backend.call("program.list", json::object()));
    out["programs"] = programs.value("programs", json::array());
  } else {
    out["programs_note"] = "programs and their stages need a running fdod (the store is read "
                           "directly: profiles only)";
  }
  return out;
}

Expected<json> profile_view(Backend& backend, const std::string& pk,
                            std::optional<std::int64_t> version) {
  json params = {{"profile_key", pk}};
  if (version) params["version"] = *version;
  FDO_TRY(json got, backend.call("profile.get", params));
  FDO_TRY(ProfileDoc doc, profile_doc(got));
  std::uint64_t total = 0;
  for (const auto& [name, f] : doc.functions)
    total = saturating_sum({total, saturating_sum(f.counts)});
  json functions = json::array();
  std::set<std::string> figure_names;
  for (const auto& [name, f] : doc.functions) {
    std::uint64_t sum = saturating_sum(f.counts);
    json figures = sampled_figures(doc.hardware, name, f.source_name);
    for (const auto& [k, v] : figures.items())
      figure_names.insert(k);
    functions.push_back(
        {{"name", name},
         {"display_name", display_name(name, f)},
         {"source_name", f.source_name},
         {"cfg_hash", got["profile"]["functions"][name].value("cfg_hash", "")},
         {"total", sum},
         {"share", total == 0 ? 0.0 : static_cast<double>(sum) / static_cast<double>(total)},
         {"counts", f.counts},
         {"unpredictable", f.unpredictable},
         {"sampled", std::move(figures)}});
  }
  std::stable_sort(functions.begin(), functions.end(), [](const json& a, const json& b) {
    return a["total"].get<std::uint64_t>() > b["total"].get<std::uint64_t>();
  });
  return json{{"profile_key", pk},
              {"version", got.value("version", 0)},
              {"digest", got.value("digest", "")},
              {"pinned", got.value("pinned", false)},
              {"reason", got.value("reason", "")},
              {"created_at", got.value("created_at", "")},
              {"knobs", got["profile"].value("knobs", json::object())},
              {"hardware", doc.hardware},
              {"total", total},
              {"sampled_figures", figure_names},
              {"functions", std::move(functions)}};
}

Expected<json> history_view(Backend& backend, const std::string& pk) {
  FDO_TRY(json hist, backend.call("profile.history", {{"profile_key", pk}}));
  return hist;
}

Expected<json> diff_view(Backend& backend, const std::string& pk, std::int64_t v1,
                         std::int64_t v2) {
  FDO_TRY(json a, backend.call("profile.get", {{"profile_key", pk}, {"version", v1}}));
  FDO_TRY(json b, backend.call("profile.get", {{"profile_key", pk}, {"version", v2}}));
  FDO_TRY(ProfileDoc da, profile_doc(a));
  FDO_TRY(ProfileDoc db, profile_doc(b));
  json out = to_json(diff_profiles(da, db));
  out["profile_key"] = pk;
  out["from"] = {
      {"version", v1}, {"digest", a.value("digest", "")}, {"reason", a.value("reason", "")}};
  out["to"] = {
      {"version", v2}, {"digest", b.value("digest", "")}, {"reason", b.value("reason", "")}};
  return out;
}

Expected<json> program_view(Backend& backend, const std::string& ik) {
  FDO_TRY(json explain, backend.call("cache.explain", {{"program", ik}, {"limit", 0}}));
  FDO_TRY(json programs, backend.call("program.list", json::object()));
  json out = explain;
  out["name"] = "";
  for (const json& p : programs.value("programs", json::array()))
    if (p.value("program", "") == ik) {
      out["name"] = p.value("name", "");
      out["first_seen"] = p.value("first_seen", "");
      out["last_used"] = p.value("last_used", "");
    }
  return out;
}

} // namespace fdo::ctl::web
