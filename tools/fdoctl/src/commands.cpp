// The read and operator commands: profiles, profile *, cache stats, explain,
// status, doctor, metrics. `run` lives in run_command.cpp.
#include "context.h"
#include "fdo/ctl/cs_summary.h"
#include "fdo/ctl/diff.h"
#include "fdo/ctl/doctor.h"
#include "fdo/ctl/gpu_view.h"
#include "fdo/ctl/hot_functions.h"
#include "fdo/ctl/lifecycle_view.h"
#include "fdo/ctl/self_test.h"
#include "fdo/ctl/table.h"
#include "fdo/gpu/session.h"
#include "fdo/jit/nvptx.h"
#include "fdo/perf/capabilities.h"
#include "fdo/profile_store/profile_store.h"
#include "fdo/util/base64.h"
#include "fdo/util/fd.h"
#include "fdo/util/hash.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

namespace fdo::ctl {

using nlohmann::json;

// --- context --------------------------------------------------------------

Expected<std::unique_ptr<Backend>> Context::backend(Need need) {
  if (g_.offline) {
    if (g_.state_dir.empty() && g_.store.empty())
      return make_error(Errc::invalid_argument,
                        "--offline reads the profile store and needs --state-dir DIR (fdod's "
                        "state directory) or --store LOCATION");
    if (need == Need::daemon)
      return make_error(Errc::invalid_argument,
                        "this command needs the daemon; --offline only reads the profile store");
    FDO_TRY(std::unique_ptr<StoreBackend> store, StoreBackend::open(g_.state_dir, g_.store));
    return std::unique_ptr<Backend>(std::move(store));
  }
  ClientOptions options = cli_client_options();
  // --timeout 0: no limit (ten years is as good as none and cannot overflow
  // the clock's arithmetic); the option is checked to be 0..a year.
  options.timeout = g_.timeout_s == 0
                        ? std::chrono::milliseconds(std::chrono::hours(24 * 3650))
                        : std::chrono::milliseconds(static_cast<std::int64_t>(g_.timeout_s * 1000));
  auto client = RpcClient::connect(g_.socket, options);
  if (client) return std::unique_ptr<Backend>(std::make_unique<DaemonBackend>(std::move(*client)));
  if (client.error().code() != Errc::unavailable) return std::move(client).error();
  if (need == Need::read && (!g_.state_dir.empty() || !g_.store.empty())) {
    auto store = StoreBackend::open(g_.state_dir, g_.store);
    if (!store) {
      connect_failed_ = true;
      return make_error(Errc::unavailable,
                        client.error().message() + "; and --state-dir: " + store.error().message());
    }
    note("fdod is not reachable at " + g_.socket + "; reading " + (*store)->describe());
    return std::unique_ptr<Backend>(std::move(*store));
  }
  connect_failed_ = true;
  return std::move(client).error();
}

void Context::emit(const json& doc) {
  io_.out << doc.dump(2, ' ', false, json::error_handler_t::replace) << '\n';
  io_.out.flush();
}

void Context::note(const std::string& line) {
  io_.err << "fdoctl: note: " << line << '\n';
}

Expected<json> call(Backend& backend, std::string_view method, const json& params) {
  auto r = backend.call(method, params);
  if (!r) return std::move(r).error().context(method);
  return r;
}

namespace {

bool is_lower_hex(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// Resolves a prefix among candidates; `what` names the kind for messages.
Expected<std::string> resolve_prefix(const std::string& prefix, const std::set<std::string>& all,
                                     const std::string& what, const std::string& hint) {
  std::vector<std::string> matches;
  for (const auto& k : all)
    if (k.starts_with(prefix)) matches.push_back(k);
  if (matches.empty())
    return make_error(Errc::not_found, "no " + what + " starts with '" + prefix + "'" + hint);
  if (matches.size() > 1) {
    std::string list;
    for (std::size_t i = 0; i < matches.size() && i < 5; ++i)
      list += (i ? ", " : "") + short_key(matches[i], 20);
    if (matches.size() > 5) list += ", ...";
    return make_error(Errc::invalid_argument,
                      "'" + prefix + "' is ambiguous: " + std::to_string(matches.size()) + " " +
                          what + "s match (" + list + "); give more digits");
  }
  return matches.front();
}

std::string yes_no(bool b) {
  return b ? "yes" : "no";
}

std::string str(const json& j, const char* key, std::string fallback = "") {
  return j.is_object() && j.contains(key) && j[key].is_string() ? j[key].get<std::string>()
                                                                : fallback;
}

std::int64_t num(const json& j, const char* key, std::int64_t fallback = 0) {
  return j.is_object() && j.contains(key) && j[key].is_number_integer() ? j[key].get<std::int64_t>()
                                                                        : fallback;
}

std::uint64_t unum(const json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_number()) return 0;
  if (j[key].is_number_unsigned()) return j[key].get<std::uint64_t>();
  if (j[key].is_number_integer())
    return static_cast<std::uint64_t>(std::max<std::int64_t>(0, j[key].get<std::int64_t>()));
  return static_cast<std::uint64_t>(std::max(0.0, j[key].get<double>()));
}

std::string knobs_text(const json& k) {
  if (!k.is_object()) return "?";
  auto onoff = [&](const char* key) {
    return k.contains(key) && k[key].is_boolean() ? (k[key].get<bool>() ? "on" : "off") : "?";
  };
  std::string s = "opt_level=" + (k.contains("opt_level") ? k["opt_level"].dump() : "?") +
                  " size_level=" + (k.contains("size_level") ? k["size_level"].dump() : "?") +
                  " unroll=" + onoff("unroll") + " vectorize=" + onoff("vectorize");
  s += " inline_threshold=" + (k.contains("inline_threshold") && !k["inline_threshold"].is_null()
                                   ? k["inline_threshold"].dump()
                                   : std::string("default"));
  s += " mode=" + (k.contains("mode") && k["mode"].is_string() ? k["mode"].get<std::string>()
                                                               : std::string("auto"));
  // Written only when not 0 (docs/jit.md, "Text offset").
  if (k.contains("text_offset") && k["text_offset"].is_number_integer())
    s += " text_offset=" + k["text_offset"].dump();
  // Likewise only when not at their defaults (docs/jit.md, "Value specialization").
  for (const char* key : {"spec_min_share", "spec_max_clones"})
    if (k.contains(key) && k[key].is_number_integer())
      s += std::string(" ") + key + "=" + k[key].dump();
  if (k.contains("cold_code") && k["cold_code"].is_string())
    s += " cold_code=" + k["cold_code"].get<std::string>();
  return s;
}

// The guard's record (docs/guard.md) for people: the variant served and the
// trials, newest last.
void print_guard(std::ostream& out, const json& guard) {
  if (!guard.is_object()) return;
  const json& inc = guard.value("incumbent", json(nullptr));
  out << "\nguard: serving "
      << (inc.is_object() ? str(inc, "base") + " build" : std::string("the profile as it is"))
      << (inc.is_object() && num(inc, "version") > 0
              ? " of profile v" + std::to_string(num(inc, "version"))
              : "")
      << (inc.is_object() && inc.contains("knobs") && inc["knobs"].is_object()
              ? " (knobs " + knobs_text(inc["knobs"]) + ")"
              : "")
      << ", " << num(guard, "tuning_step") << " knob variant(s) tried\n";
  if (const json& run = guard.value("running", json(nullptr)); run.is_object())
    out << "trial under way (saved for restarts): " << str(run, "id") << ", "
        << run.value("candidate_ns", json::array()).size() << "+"
        << run.value("incumbent_ns", json::array()).size() << " stages\n";
  const json& trials = guard.value("trials", json::array());
  if (trials.empty()) return;
  Table t({{"version", Align::right},
           {"candidate"},
           {"incumbent"},
           {"verdict"},
           {"ratio", Align::right},
           {"stages", Align::right},
           {"decided"}});
  for (const json& tr : trials) {
    char ratio[32];
    std::snprintf(ratio, sizeof ratio, "%.3f",
                  tr.contains("ratio") && tr["ratio"].is_number() ? tr["ratio"].get<double>()
                                                                  : 1.0);
    t.add_row({"v" + std::to_string(num(tr, "profile_version")), str(tr, "candidate"),
               str(tr, "incumbent"),
               str(tr, "verdict") + (tr.value("early_stop", false) ? " (early)" : ""), ratio,
               std::to_string(num(tr, "candidate_stages")) + "+" +
                   std::to_string(num(tr, "incumbent_stages")),
               str(tr, "decided_at")});
  }
  out << t.render();
}

std::string hex64(std::uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string indent_block(const std::string& text, const std::string& pad) {
  std::string out;
  for (std::size_t pos = 0; pos < text.size();) {
    std::size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    out += pad + text.substr(pos, nl - pos) + "\n";
    pos = nl + 1;
  }
  return out;
}

Expected<ProfileDoc> profile_of(const json& get_result) {
  if (!get_result.contains("profile"))
    return make_error(Errc::corrupt, "profile.get result has no \"profile\"");
  auto doc = profile_from_json(get_result["profile"]);
  if (!doc) return std::move(doc).error().context("profile document from the daemon");
  return doc;
}

Expected<std::string> read_input_file(const std::string& path) {
  if (path == "-") {
    std::ostringstream s;
    s << std::cin.rdbuf();
    return s.str();
  }
  auto bytes = read_file(path);
  if (!bytes)
    return make_error(Errc::invalid_argument,
                      "cannot read " + path + ": " + bytes.error().message());
  return bytes;
}

} // namespace

Expected<std::string> resolve_profile_key(Backend& backend, const std::string& text) {
  std::string key = lower(text);
  if (key.empty() || !is_lower_hex(key) || key.size() > 64)
    return make_error(Errc::invalid_argument,
                      "'" + text + "' is not a profile key (64 hex digits, or a unique prefix)");
  if (key.size() == 64) return key;
  FDO_TRY(json list, call(backend, "profile.list"));
  std::set<std::string> keys;
  for (const json& p : list.value("profiles", json::array()))
    keys.insert(str(p, "profile_key"));
  return resolve_prefix(key, keys, "profile key", " (`fdoctl profiles` lists them)");
}

// --- profiles -----------------------------------------------------------

Status cmd_profiles(Context& ctx) {
  FDO_TRY(auto backend, ctx.backend(Need::read));
  FDO_TRY(json list, call(*backend, "profile.list"));
  if (ctx.json_output()) {
    ctx.emit(list);
    return ok();
  }
  const json& profiles = list["profiles"];
  if (profiles.empty()) {
    ctx.io().out << "no profiles yet (a profile is written after a program's first stages; try "
                    "`fdoctl run FILE --entry NAME`)\n";
    return ok();
  }
  Table t({{"profile key"},
           {"programs"},
           {"version", Align::right},
           {"pinned"},
           {"functions", Align::right},
           {"owner", Align::right},
           {"updated"},
           {"digest"}});
  for (const json& p : profiles) {
    std::int64_t v = num(p, "version");
    std::string names; // the daemon names the caller's programs; the store does not
    for (const json& n : p.value("programs", json::array()))
      if (n.is_string()) names += (names.empty() ? "" : ", ") + n.get<std::string>();
    t.add_row({short_key(str(p, "profile_key")), names.empty() ? "-" : names,
               v == 0 ? "none" : "v" + std::to_string(v), yes_no(p.value("pinned", false)),
               std::to_string(num(p, "functions")),
               p.contains("owner") ? std::to_string(num(p, "owner")) : "", str(p, "updated_at"),
               short_key(str(p, "digest"), 12)});
  }
  ctx.io().out << t.render();
  ctx.io().out << profiles.size() << " profile(s) from " << backend->describe()
               << "; keys are shown by their first 16 digits, which every command accepts\n";
  return ok();
}

namespace {
// Source name, with the PGO name (the profile's key) beside it when they
// differ; documents without source names show the key alone.
std::string shown_name(const std::string& pgo_name, const FunctionProfile& f) {
  std::string shown = display_name(pgo_name, f);
  return shown == pgo_name ? shown : shown + " (" + pgo_name + ")";
}
} // namespace

Status cmd_profile_show(Context& ctx, const std::string& key_text,
                        std::optional<std::int64_t> version, RawCounts counts) {
  FDO_TRY(auto backend, ctx.backend(Need::read));
  FDO_TRY(std::string key, resolve_profile_key(*backend, key_text));
  json params = {{"profile_key", key}};
  if (version) params["version"] = *version;
  FDO_TRY(json got, call(*backend, "profile.get", params));
  if (ctx.json_output()) {
    ctx.emit(got);
    return ok();
  }
  const json& doc = got["profile"];
  const json& prov = doc.value("provenance", json::object());
  std::vector<std::pair<std::string, std::string>> fields = {
      {"profile", key},
      {"version", std::to_string(num(got, "version"))},
      {"pinned", yes_no(got.value("pinned", false))},
      {"digest", str(got, "digest")},
      {"created", str(got, "created_at")},
      {"reason", str(got, "reason")},
      {"knobs", knobs_text(doc.value("knobs", json::object()))},
  };
  if (!str(prov, "host").empty()) fields.push_back({"host", str(prov, "host")});
  if (num(prov, "stage") != 0 || !str(prov, "program").empty())
    fields.push_back({"from", "stage " + std::to_string(num(prov, "stage")) + " of program " +
                                  short_key(str(prov, "program"))});
  if (doc.contains("hardware") && doc["hardware"].is_object()) {
    json hardware = doc["hardware"];
    hardware.erase("sampling"); // its own table below
    if (!hardware.empty()) fields.push_back({"hardware", hardware.dump()});
  }
  std::ostream& out = ctx.io().out;
  out << render_fields(fields);
  print_guard(out, doc.value("guard", json(nullptr)));
  FDO_TRY(ProfileDoc typed, profile_of(got));
  out << render_gpu_profile(typed.gpu);
  std::uint64_t all = 0;
  std::vector<std::pair<std::uint64_t, std::string>> order; // hottest first
  for (const auto& [name, f] : typed.functions) {
    std::uint64_t total = 0;
    for (std::uint64_t c : f.counts)
      total = total > UINT64_MAX - c ? UINT64_MAX : total + c;
    all = all > UINT64_MAX - total ? UINT64_MAX : all + total;
    order.push_back({total, name});
  }
  std::stable_sort(order.begin(), order.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  out << "\nfunctions: " << typed.functions.size() << ", " << format_count(all)
      << " counts in total\n";
  if (typed.functions.empty()) return ok();
  Table t({{"function"},
           {"cfg hash"},
           {"counters", Align::right},
           {"total", Align::right},
           {"max", Align::right},
           {"share", Align::right},
           {"unpredictable"}});
  for (const auto& [total, name] : order) {
    const FunctionProfile& f = typed.functions.at(name);
    std::uint64_t mx = f.counts.empty() ? 0 : *std::max_element(f.counts.begin(), f.counts.end());
    std::string unpred;
    for (std::uint32_t u : f.unpredictable)
      unpred += (unpred.empty() ? "" : ",") + std::to_string(u);
    t.add_row(
        {shown_name(name, f), hex64(f.cfg_hash), std::to_string(f.counts.size()),
         format_count(total), format_count(mx),
         format_percent(all == 0 ? 0.0 : static_cast<double>(total) / static_cast<double>(all)),
         unpred.empty() ? "-" : unpred});
  }
  out << t.render();
  out << render_hot_functions(typed);
  out << render_code_layout(typed);
  out << render_arg_values(typed);
  out << render_cs_functions(typed);
  if (counts == RawCounts::print) {
    out << "\ncounts:\n";
    for (const auto& [total, name] : order)
      out << "  " << shown_name(name, typed.functions.at(name)) << ": "
          << json(typed.functions.at(name).counts).dump() << "\n";
  }
  return ok();
}

Status cmd_profile_history(Context& ctx, const std::string& key_text) {
  FDO_TRY(auto backend, ctx.backend(Need::read));
  FDO_TRY(std::string key, resolve_profile_key(*backend, key_text));
  FDO_TRY(json hist, call(*backend, "profile.history", {{"profile_key", key}}));
  if (ctx.json_output()) {
    ctx.emit(hist);
    return ok();
  }
  std::int64_t current = num(hist, "current_version");
  std::ostream& out = ctx.io().out;
  out << "profile " << key << "\ncurrent version: "
      << (current == 0 ? std::string("none (reset: the next stage compiles instrumented)")
                       : "v" + std::to_string(current))
      << ", pinned: " << yes_no(hist.value("pinned", false)) << "\n\n";
  Table t({{""},
           {"version", Align::right},
           {"created"},
           {"source"},
           {"stage", Align::right},
           {"program"},
           {"digest"},
           {"reason"}});
  for (const json& v : hist.value("versions", json::array())) {
    std::int64_t n = num(v, "version");
    t.add_row({n == current ? "*" : "", "v" + std::to_string(n), str(v, "created_at"),
               str(v, "source"), v.contains("stage") ? std::to_string(num(v, "stage")) : "",
               short_key(str(v, "program"), 12), short_key(str(v, "digest"), 12),
               str(v, "reason")});
  }
  out << t.render();
  return ok();
}

Status cmd_profile_diff(Context& ctx, const std::string& key_text, std::int64_t v1, std::int64_t v2,
                        double threshold_points, DiffDetail detail) {
  if (v1 < 1 || v2 < 1)
    return make_error(Errc::invalid_argument, "versions start at 1 (see `fdoctl profile history`)");
  if (!(threshold_points >= 0 && threshold_points <= 100))
    return make_error(Errc::invalid_argument, "--threshold is in percentage points, 0..100");
  FDO_TRY(auto backend, ctx.backend(Need::read));
  FDO_TRY(std::string key, resolve_profile_key(*backend, key_text));
  FDO_TRY(json a, call(*backend, "profile.get", {{"profile_key", key}, {"version", v1}}));
  FDO_TRY(json b, call(*backend, "profile.get", {{"profile_key", key}, {"version", v2}}));
  FDO_TRY(ProfileDoc da, profile_of(a));
  FDO_TRY(ProfileDoc db, profile_of(b));
  DiffOptions options;
  options.min_weight_change = threshold_points / 100.0;
  if (detail == DiffDetail::everything) options.max_counters_per_function = SIZE_MAX;
  ProfileDiff d = diff_profiles(da, db, options);
  if (ctx.json_output()) {
    json doc = to_json(d);
    doc["profile_key"] = key;
    doc["from"] = {{"version", v1}, {"digest", str(a, "digest")}, {"reason", str(a, "reason")}};
    doc["to"] = {{"version", v2}, {"digest", str(b, "digest")}, {"reason", str(b, "reason")}};
    doc["threshold"] = options.min_weight_change;
    ctx.emit(doc);
    return ok();
  }
  char thr[32];
  std::snprintf(thr, sizeof thr, "%.2f", threshold_points);
  std::string title = "profile " + key + ": v" + std::to_string(v1) + " (" + str(a, "reason") +
                      ") -> v" + std::to_string(v2) + " (" + str(b, "reason") + ")\n" +
                      "counter weight = share of its function's counts; listed when it moved by "
                      ">= " +
                      thr + " percentage points";
  ctx.io().out << render_diff(d, title,
                              detail == DiffDetail::everything ? Unchanged::list : Unchanged::omit);
  return ok();
}

Status cmd_profile_pin(Context& ctx, PinOp op, const std::string& key_text) {
  FDO_TRY(auto backend, ctx.backend(Need::daemon));
  FDO_TRY(std::string key, resolve_profile_key(*backend, key_text));
  const char* method = op == PinOp::pin     ? "profile.pin"
                       : op == PinOp::unpin ? "profile.unpin"
                                            : "profile.reset";
  FDO_TRY(json r, call(*backend, method, {{"profile_key", key}}));
  if (ctx.json_output()) {
    ctx.emit(r);
    return ok();
  }
  std::int64_t v = num(r, "version");
  std::string state = op == PinOp::reset
                          ? "reset: no current profile, the next stage compiles instrumented "
                            "(history kept)"
                          : std::string(r.value("pinned", false) ? "pinned" : "not pinned") +
                                ", current version " +
                                (v == 0 ? std::string("none") : "v" + std::to_string(v));
  ctx.io().out << "profile " << short_key(key) << ": " << state << "\n";
  return ok();
}

Status cmd_profile_export(Context& ctx, const std::vector<std::string>& keys_text,
                          ExportScope scope, const std::string& format, const std::string& output) {
  bool all = scope == ExportScope::all_profiles;
  if (format != "json" && format != "profdata")
    return make_error(Errc::invalid_argument, "--format must be json or profdata");
  if (all && !keys_text.empty())
    return make_error(Errc::invalid_argument, "give profile keys or --all, not both");
  if (!all && keys_text.empty())
    return make_error(Errc::invalid_argument, "give a profile key (or --all for every profile)");
  if (format == "profdata" && (all || keys_text.size() != 1))
    return make_error(Errc::invalid_argument, "--format profdata exports exactly one profile key");
  if (format == "profdata" && (output.empty() || output == "-") && ctx.json_output())
    return make_error(Errc::invalid_argument,
                      "--json prints one JSON document: with --format profdata pass -o FILE");
  if (format == "profdata" && output.empty() && ctx.io().out_is_tty)
    return make_error(Errc::invalid_argument,
                      "refusing to write a binary profile to the terminal: pass -o FILE");
  FDO_TRY(auto backend, ctx.backend(Need::read));
  json params = {{"format", format}};
  if (!all) {
    json keys = json::array();
    for (const auto& k : keys_text) {
      FDO_TRY(std::string key, resolve_profile_key(*backend, k));
      keys.push_back(key);
    }
    params["profile_keys"] = std::move(keys);
  }
  FDO_TRY(json r, call(*backend, "profile.export", params));
  std::string bytes;
  if (format == "json") {
    if (!r.contains("bundle"))
      return make_error(Errc::corrupt, "profile.export result has no bundle");
    bytes = r["bundle"].dump(2) + "\n";
  } else {
    if (!r.contains("profdata_base64") || !r["profdata_base64"].is_string())
      return make_error(Errc::corrupt, "profile.export result has no profdata_base64");
    auto decoded = base64_decode(r["profdata_base64"].get<std::string>());
    if (!decoded) return std::move(decoded).error().context("profdata_base64 from fdod");
    bytes = std::move(*decoded);
  }
  if (output.empty() || output == "-") {
    ctx.io().out << bytes;
    ctx.io().out.flush();
    return ok();
  }
  FDO_TRY_STATUS(write_file_atomic(output, bytes, Durability::fsync));
  std::string what = format == "json" ? "profile bundle" : "LLVM indexed profile";
  if (ctx.json_output()) {
    ctx.emit({{"format", format},
              {"file", output},
              {"bytes", bytes.size()},
              {"profile_keys", params.value("profile_keys", json::array())}});
    return ok();
  }
  ctx.io().out << "wrote " << what << " (" << format_bytes(bytes.size()) << ") to " << output;
  if (format == "profdata")
    ctx.io().out << "; read it with `llvm-profdata-16 show --all-functions " << output << "`";
  ctx.io().out << "\n";
  return ok();
}

Status cmd_profile_import(Context& ctx, const std::string& file) {
  FDO_TRY(std::string text, read_input_file(file));
  json doc = json::parse(text, nullptr, false);
  if (doc.is_discarded())
    return make_error(Errc::invalid_argument,
                      file + " is not JSON (expected a bundle from `fdoctl profile export`)");
  // Accept the bundle itself or a saved profile.export result around it.
  if (doc.is_object() && doc.contains("bundle") && doc["bundle"].is_object()) doc = doc["bundle"];
  FDO_TRY(auto backend, ctx.backend(Need::daemon));
  FDO_TRY(json r, call(*backend, "profile.import", {{"bundle", doc}}));
  if (ctx.json_output()) {
    ctx.emit(r);
    return ok();
  }
  Table t({{"profile key"}, {"version", Align::right}});
  for (const json& i : r.value("imported", json::array()))
    t.add_row({str(i, "profile_key"), "v" + std::to_string(num(i, "version"))});
  ctx.io().out << t.render() << r.value("imported", json::array()).size()
               << " profile(s) imported; the next stage of their programs compiles with them\n";
  return ok();
}

// --- cache, explain, status -------------------------------------------------

namespace {

// cache.stats of a tenant (scope "tenant"): its own stages and compiles.
std::string tenant_cache_stats_text(const json& s) {
  std::uint64_t prepares = unum(s, "prepares");
  auto share = [&](std::uint64_t n) {
    return prepares == 0 ? std::string("-")
                         : format_percent(static_cast<double>(n) / static_cast<double>(prepares));
  };
  const std::uint64_t mem = unum(s.value("memory", json::object()), "hits");
  const std::uint64_t disk = unum(s.value("disk", json::object()), "hits");
  const std::uint64_t remote = unum(s.value("remote", json::object()), "hits");
  std::vector<std::pair<std::string, std::string>> f = {
      {"your stages", format_count(prepares) + " (" + format_count(unum(s, "failures")) +
                          " got no code, " + format_count(unum(s, "stage_failures")) +
                          " failed to run)"},
      {"served from", format_count(mem) + " memory (" + share(mem) + "), " + format_count(disk) +
                          " disk (" + share(disk) + "), " + format_count(remote) + " remote"},
      {"compiles", format_count(unum(s, "compiles")) + " (" + format_count(unum(s, "joined")) +
                       " stages joined one), " + format_ms(s.value("compile_ms_total", 0.0)) +
                       " ms in total"},
      {"tier-up", format_count(unum(s.value("tier_up", json::object()), "stale_serves")) +
                      " stages served older code"},
      {"note", "your uid's figures only; the host's are shown to root and fdod's user"},
  };
  return render_fields(f);
}

std::string cache_stats_text(const json& s) {
  if (s.value("scope", "host") == "tenant") return tenant_cache_stats_text(s);
  const json& m = s.value("memory", json::object());
  const json& d = s.value("disk", json::object());
  const json& tu = s.value("tier_up", json::object());
  std::uint64_t prepares = unum(s, "prepares");
  auto rate = [&](std::uint64_t hits) {
    return prepares == 0
               ? std::string("-")
               : format_percent(static_cast<double>(hits) / static_cast<double>(prepares));
  };
  std::vector<std::pair<std::string, std::string>> f = {
      {"stages prepared",
       format_count(prepares) + " (" + format_count(unum(s, "failures")) + " failed)"},
      {"memory tier", format_count(unum(m, "hits")) + " hits (" + rate(unum(m, "hits")) + "), " +
                          format_count(unum(m, "misses")) + " misses, " +
                          format_count(unum(m, "entries")) + " entries, " +
                          format_bytes(unum(m, "bytes")) + " of " +
                          format_bytes(unum(m, "budget_bytes")) + ", " +
                          format_count(unum(m, "evictions")) + " evictions"},
      {"disk tier",
       format_count(unum(d, "hits")) + " hits (" + rate(unum(d, "hits")) + "), " +
           format_count(unum(d, "misses")) + " misses, " + format_count(unum(d, "entries")) +
           " entries, " + format_bytes(unum(d, "bytes")) + " of " +
           format_bytes(unum(d, "budget_bytes")) + ", " + format_count(unum(d, "evictions")) +
           " evictions, " + format_count(unum(d, "corrupt")) + " corrupt"},
      {"compiles", format_count(unum(s, "compiles")) + " (" + format_count(unum(s, "recompiles")) +
                       " recompiles after a profile change, " +
                       format_count(unum(s, "compile_failures")) + " failed), " +
                       format_ms(s.value("compile_ms_total", 0.0)) + " ms in total"},
      {"tier-up", format_count(unum(tu, "started")) + " started, " +
                      format_count(unum(tu, "installed")) + " installed, " +
                      format_count(unum(tu, "failed")) + " failed, " +
                      format_count(unum(tu, "queued")) + " queued, " +
                      format_count(unum(tu, "stale_serves")) + " stages served older code"},
  };
  if (s.contains("workers") && s["workers"].is_object())
    for (const auto& [name, w] : s["workers"].items()) {
      const json& fl = w.value("failures", json::object());
      f.push_back({name + " workers", std::to_string(num(w, "live")) + "/" +
                                          std::to_string(num(w, "size")) + " live, " +
                                          format_count(unum(w, "jobs")) + " jobs, " +
                                          format_count(unum(fl, "total")) + " failed, " +
                                          format_count(unum(w, "restarts")) + " restarts"});
    }
  return render_fields(f);
}

} // namespace

Status cmd_cache_stats(Context& ctx) {
  FDO_TRY(auto backend, ctx.backend(Need::daemon));
  FDO_TRY(json s, call(*backend, "cache.stats"));
  if (ctx.json_output()) {
    ctx.emit(s);
    return ok();
  }
  ctx.io().out << cache_stats_text(s);
  return ok();
}

namespace {

// Program ids a prefix can be matched against: the store's program registry
// when --state-dir is given, plus the programs named in profile histories.
Expected<std::set<std::string>> known_programs(Context& ctx, Backend& backend) {
  std::set<std::string> ids;
  if (!ctx.globals().state_dir.empty()) {
    profile_store::Options o;
    o.mode = profile_store::OpenMode::read_only;
    auto store = profile_store::ProfileStore::open(
        (std::filesystem::path(ctx.globals().state_dir) / "profiles.db").string(), o);
    if (store)
      if (auto programs = store->programs())
        for (const auto& p : *programs)
          ids.insert(p.ik);
  }
  FDO_TRY(json list, call(backend, "profile.list"));
  for (const json& p : list.value("profiles", json::array())) {
    auto hist = call(backend, "profile.history", {{"profile_key", str(p, "profile_key")}});
    if (!hist) continue;
    for (const json& v : hist->value("versions", json::array()))
      if (is_hex_key(str(v, "program"))) ids.insert(str(v, "program"));
  }
  return ids;
}

Expected<std::string> resolve_program(Context& ctx, Backend& backend, const std::string& text) {
  std::error_code ec;
  if (std::filesystem::is_regular_file(text, ec)) {
    FDO_TRY(std::string bytes, read_input_file(text));
    FDO_TRY(json reg, call(backend, "program.register",
                           {{"ir_base64", base64_encode(bytes)},
                            {"name", std::filesystem::path(text).stem().string()}}));
    return str(reg, "program");
  }
  std::string key = lower(text);
  if (key.empty() || key.size() > 64 || !is_lower_hex(key))
    return make_error(Errc::invalid_argument,
                      "'" + text +
                          "' is neither a program id (64 hex digits or a unique prefix) "
                          "nor an IR file");
  if (key.size() == 64) return key;
  FDO_TRY(std::set<std::string> ids, known_programs(ctx, backend));
  return resolve_prefix(key, ids, "program id",
                        " among the programs fdoctl can see (those named in profile histories, "
                        "and with --state-dir every registered one); give the full id or the IR "
                        "file");
}

std::string version_text(std::int64_t v) {
  if (v < 0) return "?";
  std::string s = "v";
  return s.append(std::to_string(v));
}

std::string key_kind(const std::string& key) {
  if (key.size() == 66 && key.ends_with("-v")) return "VK";
  if (key.size() == 97) return "CK";
  return "key";
}

} // namespace

Status cmd_explain(Context& ctx, const std::string& program_text, std::uint64_t limit) {
  FDO_TRY(auto backend, ctx.backend(Need::daemon));
  FDO_TRY(std::string ik, resolve_program(ctx, *backend, program_text));
  FDO_TRY(json r, call(*backend, "cache.explain", {{"program", ik}, {"limit", limit}}));
  if (ctx.json_output()) {
    ctx.emit(r);
    return ok();
  }
  std::ostream& out = ctx.io().out;
  const json& records = r.value("records", json::array());
  out << "program (IK)   " << ik << "\nprofile (PK)   "
      << (r["profile_key"].is_string() ? r["profile_key"].get<std::string>()
                                       : std::string("unknown"))
      << "\n";
  print_guard(out, r.value("guard", json(nullptr)));
  out << render_lifecycle(r.value("lifecycle", json(nullptr)));
  if (records.empty()) {
    out << "\nno stages recorded for this program since fdod started (explain history lives in "
           "the daemon's memory)\n";
    return ok();
  }
  // Lineage: the IK, the VK the first stage's output is stored under, then
  // one CK per profile version and mode in first-use order, each with the
  // stages that targeted it and where its output was found.
  struct Use {
    std::string mode;
    std::set<std::int64_t> versions;
    std::size_t stages = 0;
    std::set<std::string> stored_under; // when not the key itself (CK -> VK mapping)
  };
  std::vector<std::string> cks, vks;
  std::map<std::string, Use> uses;
  for (const json& rec : records) {
    std::string ck = str(rec, "cache_key");
    std::string sk = str(rec, "storage_key");
    if (!sk.empty() && sk != ck && !uses.contains(sk)) {
      vks.push_back(sk);
      uses[sk];
    }
    if (!sk.empty() && sk != ck) ++uses[sk].stages;
    if (ck.empty()) continue;
    if (!uses.contains(ck)) cks.push_back(ck);
    Use& u = uses[ck];
    u.mode = str(rec, "mode");
    u.versions.insert(num(rec, "profile_version", -1));
    ++u.stages;
    if (!sk.empty() && sk != ck) u.stored_under.insert(sk);
  }
  out << "\nlineage of keys (IK -> VK for the first stage -> one CK per profile version and "
         "mode):\n";
  out << "  IK  " << ik << "  program bytes + compiler identity\n";
  for (const auto& k : vks)
    out << "  " << key_kind(k) << "  " << k << "  served " << uses[k].stages
        << " stage(s) (the first stage's output, stored before the profile key was known)\n";
  for (const auto& k : cks) {
    const Use& u = uses[k];
    std::string versions;
    for (auto v : u.versions)
      versions += (versions.empty() ? "" : ",") + version_text(v);
    out << "  " << key_kind(k) << "  " << k << "  profile " << versions
        << (u.mode.empty() ? "" : " " + u.mode) << ", " << u.stages << " stage(s)";
    for (const auto& sk : u.stored_under)
      out << ", found under " << key_kind(sk) << " " << (sk.size() > 64 ? sk.substr(64) : sk)
          << " (CK -> VK mapping)";
    out << "\n";
  }
  out << "\n";
  Table t({{"seq", Align::right},
           {"time"},
           {"outcome"},
           {"reason"},
           {"profile"},
           {"mode"},
           {"compile ms", Align::right},
           {"stored under"},
           {"why"}});
  for (const json& rec : records) {
    std::int64_t from = num(rec, "from_version", -1), to = num(rec, "profile_version", -1);
    std::string profile =
        from >= 0 && from != to ? version_text(from) + "->" + version_text(to) : version_text(to);
    double cms = rec.contains("compile_ms") && rec["compile_ms"].is_number()
                     ? rec["compile_ms"].get<double>()
                     : 0.0;
    std::string sk = str(rec, "storage_key");
    std::string why = str(rec, "detail");
    if (!str(rec, "error").empty()) why += " [error: " + str(rec, "error") + "]";
    t.add_row({std::to_string(num(rec, "stage")), str(rec, "time"), str(rec, "outcome"),
               str(rec, "reason"), profile, str(rec, "mode"), cms > 0 ? format_ms(cms) : "-",
               key_kind(sk) + " " + short_key(sk.size() > 64 ? sk.substr(64) : sk, 33), why});
  }
  out << t.render();
  if (std::uint64_t kept = r.value("records_kept", std::uint64_t(0)); kept > records.size())
    out << "(the last " << records.size() << " of " << kept
        << " recorded stages; --limit 0 shows them all)\n";
  return ok();
}

Status cmd_status(Context& ctx) {
  FDO_TRY(auto backend, ctx.backend(Need::daemon));
  FDO_TRY(json health, call(*backend, "health"));
  FDO_TRY(json stats, call(*backend, "cache.stats"));
  FDO_TRY(json list, call(*backend, "profile.list"));
  std::size_t profiles = list.value("profiles", json::array()).size();
  std::size_t pinned = 0;
  for (const json& p : list.value("profiles", json::array()))
    pinned += p.value("pinned", false) ? 1 : 0;
  if (ctx.json_output()) {
    ctx.emit({{"socket", ctx.globals().socket},
              {"health", health},
              {"cache", stats},
              {"profiles", {{"count", profiles}, {"pinned", pinned}}}});
    return ok();
  }
  const json& w = health.value("workers", json::object());
  double up = health.value("uptime_s", 0.0);
  std::vector<std::pair<std::string, std::string>> f = {
      {"fdod", str(health, "status") + ", version " + str(health, "version") + ", pid " +
                   std::to_string(num(health, "pid")) + ", up " +
                   format_duration_ns(static_cast<std::uint64_t>(up * 1e9))},
      {"socket", ctx.globals().socket},
      {"live workers",
       std::to_string(num(w, "compile")) + " compile, " + std::to_string(num(w, "exec")) + " exec"},
      {"profiles",
       std::to_string(profiles) + " visible to you (" + std::to_string(pinned) + " pinned)"},
  };
  ctx.io().out << render_fields(f) << "\ncache:\n" << indent_block(cache_stats_text(stats), "  ");
  return ok();
}

namespace {

// capabilities.gpu as this process finds it when fdod is down: the driver
// loaded and asked here (fdod would ask it in a sandboxed GPU worker).
json local_gpu_probe() {
  json out = {{"available", false}, {"gpus", json::array()}};
  auto driver = gpu::load_cuda_driver();
  if (!driver) {
    out["reason"] = driver.error().message();
    return out;
  }
  auto gpus = gpu::probe(**driver);
  if (!gpus) {
    out["reason"] = gpus.error().message();
    return out;
  }
  for (const gpu::GpuInfo& g : *gpus)
    out["gpus"].push_back(gpu::to_json(g));
  if (gpus->empty()) {
    out["reason"] = "the NVIDIA driver sees no GPU";
    return out;
  }
  auto id = jit::gpu_identity({gpus->front().sm, gpus->front().driver_version});
  if (!id) {
    out["reason"] = id.error().message();
    return out;
  }
  out["available"] = true;
  out["arch"] = id->cpu;
  out["driver_version"] = gpus->front().driver_version;
  out["identity"] = id->canonical();
  return out;
}

} // namespace

Status cmd_doctor(Context& ctx, const DoctorOptions& options) {
  if (options.self_test) {
    const SelfTestRun run = run_self_test(options.fdod, options.max_stages);
    const std::vector<Link> links = evaluate_self_test(run);
    if (ctx.json_output())
      ctx.emit(self_test_json(run, links));
    else
      ctx.io().out << render_self_test(run, links);
    const auto failed = std::count_if(links.begin(), links.end(),
                                      [](const Link& l) { return l.status == LinkStatus::fail; });
    if (failed > 0)
      return make_error(Errc::unsupported, "self-test: " + std::to_string(failed) + " of " +
                                               std::to_string(links.size()) + " links failed");
    return ok();
  }
  json perf;
  json daemon = {{"socket", ctx.globals().socket}};
  json caps;
  std::string source;
  // doctor diagnoses; a daemon that is down is a finding, not a failure.
  auto backend = ctx.globals().offline ? Expected<std::unique_ptr<Backend>>(make_error(
                                             Errc::unavailable, "--offline: not asking fdod"))
                                       : ctx.backend(Need::daemon);
  json gpu;
  if (backend) {
    FDO_TRY(caps, call(**backend, "capabilities"));
    perf = caps.value("perf", json::object());
    gpu = caps.value("gpu", json{{"available", false},
                                 {"gpus", json::array()},
                                 {"reason", "this fdod predates GPU support"}});
    daemon["reachable"] = true;
    source = "fdod";
  } else {
    if (backend.error().code() != Errc::unavailable) return std::move(backend).error();
    daemon["reachable"] = false;
    daemon["error"] = backend.error().message();
    perf = perf::to_json(perf::probe());
    gpu = local_gpu_probe();
    source = "local";
  }
  std::vector<Finding> findings = diagnose(perf);
  std::error_code ec;
  const HostGpuNodes nodes =
      std::filesystem::exists("/dev/nvidiactl", ec) ? HostGpuNodes::present : HostGpuNodes::absent;
  findings.push_back(diagnose_gpu(gpu, nodes));
  if (!daemon["reachable"].get<bool>())
    findings.insert(findings.begin(),
                    Finding{Severity::problem, "fdod", backend.error().message(),
                            "the report below probes this fdoctl process instead; fdod under "
                            "systemd may see less (its capabilities, seccomp filter and user)"});
  if (ctx.json_output()) {
    json doc = {{"source", source},
                {"daemon", daemon},
                {"perf", perf},
                {"gpu", gpu},
                {"findings", to_json(findings)}};
    if (source == "fdod") {
      doc["target"] = caps.value("target", json::object());
      doc["llvm_version"] = caps.value("llvm_version", "");
      doc["fdo_version"] = caps.value("fdo_version", "");
      doc["tier_up"] = caps.value("tier_up", "");
    }
    ctx.emit(doc);
    return ok();
  }
  std::ostream& out = ctx.io().out;
  if (source == "fdod") {
    const json& t = caps.value("target", json::object());
    out << render_fields(
               {{"fdod", "fdo " + str(caps, "fdo_version") + ", LLVM " + str(caps, "llvm_version") +
                             ", tier-up " + str(caps, "tier_up")},
                {"target", str(t, "triple") + ", cpu " + str(t, "cpu")},
                {"measured by", "fdod at " + ctx.globals().socket}})
        << "\n";
  } else {
    out << "fdod is not reachable: probing this fdoctl process instead\n\n";
  }
  out << render_doctor(perf, findings);
  return ok();
}

Status cmd_metrics(Context& ctx) {
  FDO_TRY(auto backend, ctx.backend(Need::daemon));
  FDO_TRY(json r, call(*backend, "metrics"));
  if (ctx.json_output()) {
    ctx.emit(r);
    return ok();
  }
  ctx.io().out << str(r, "text");
  return ok();
}

Status cmd_config(Context& ctx) {
  FDO_TRY(auto backend, ctx.backend(Need::daemon));
  FDO_TRY(json r, call(*backend, "config"));
  if (ctx.json_output()) {
    ctx.emit(r);
    return ok();
  }
  Table t({{"key"}, {"value"}, {"default"}, {"on SIGHUP"}});
  for (const json& k : r.value("keys", json::array())) {
    std::string value = str(k, "value"), def = str(k, "default");
    t.add_row({str(k, "name"), value, value == def ? "" : def,
               str(k, "reload") == "runtime" ? "applied" : "restart only"});
  }
  ctx.io().out << t.render();
  return ok();
}

} // namespace fdo::ctl
