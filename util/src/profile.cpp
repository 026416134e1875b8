#include "fdo/util/profile.h"

#include "fdo/util/enum_names.h"
#include "fdo/util/hash.h"
#include "fdo/util/value_json.h"

#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>

namespace fdo {

using nlohmann::json;

namespace {
constexpr EnumNames<CompileMode, 4> kCompileModeNames{
    {{{CompileMode::plain, "plain"},
      {CompileMode::instrumented, "instrumented"},
      {CompileMode::optimized, "optimized"},
      {CompileMode::cs_instrumented, "cs_instrumented"}}}};
constexpr EnumNames<FunctionLayout, 3> kLayoutNames{{{{FunctionLayout::normal, "normal"},
                                                      {FunctionLayout::hot, "hot"},
                                                      {FunctionLayout::cold, "cold"}}}};
constexpr EnumNames<ColdCode, 2> kColdCodeNames{
    {{{ColdCode::baseline, "baseline"}, {ColdCode::optimize, "optimize"}}}};
} // namespace

std::string_view to_string(FunctionLayout layout) {
  return kLayoutNames.name(layout);
}

std::string_view to_string(CompileMode mode) {
  return kCompileModeNames.name(mode);
}

Expected<CompileMode> parse_compile_mode(std::string_view s) {
  if (auto m = kCompileModeNames.parse(s)) return *m;
  return make_error(Errc::invalid_argument, "unknown compile mode '" + std::string(s) +
                                                "' (expected " + kCompileModeNames.alternatives() +
                                                ")");
}

std::string_view to_string(ColdCode c) {
  return kColdCodeNames.name(c);
}

Expected<ColdCode> parse_cold_code(std::string_view s) {
  if (auto c = kColdCodeNames.parse(s)) return *c;
  return make_error(Errc::invalid_argument, "unknown cold code treatment '" + std::string(s) +
                                                "' (expected " + kColdCodeNames.alternatives() +
                                                ")");
}

namespace {

json knobs_json(const Knobs& k) {
  json j = {{"opt_level", k.opt_level},
            {"size_level", k.size_level},
            {"unroll", k.unroll},
            {"vectorize", k.vectorize}};
  j["inline_threshold"] = k.inline_threshold ? json(*k.inline_threshold) : json(nullptr);
  j["mode"] = k.mode ? json(std::string(to_string(*k.mode))) : json(nullptr);
  // Absent at 0, so that every document written before the knob existed
  // keeps its canonical form and digest (and its compiled outputs).
  if (k.text_offset != 0) j["text_offset"] = k.text_offset;
  // Likewise at their defaults.
  if (k.spec_min_share != Knobs::kDefaultSpecMinShare) j["spec_min_share"] = k.spec_min_share;
  if (k.spec_max_clones != Knobs::kDefaultSpecMaxClones) j["spec_max_clones"] = k.spec_max_clones;
  if (k.cold_code != ColdCode::baseline) j["cold_code"] = std::string(to_string(k.cold_code));
  return j;
}

Error field_error(const std::string& path, const std::string& what) {
  return profile_field_error(path, what);
}

json function_compile_json(const FunctionProfile& f) {
  json j = {{"cfg_hash", hash_to_hex(f.cfg_hash)},
            {"counts", f.counts},
            {"unpredictable", f.unpredictable}};
  // Only when present, so that documents without value profiles keep the
  // digest they always had.
  if (!f.indirect_calls.empty())
    j["indirect_calls"] = value_sites_json(f.indirect_calls, ValueText::hex);
  if (!f.memop_sizes.empty()) j["memop_sizes"] = value_sites_json(f.memop_sizes, ValueText::number);
  if (f.layout != FunctionLayout::normal) j["layout"] = to_string(f.layout);
  if (!f.arg_values.empty()) j["arg_values"] = arg_values_json(f.arg_values);
  return j;
}

template <class T>
Status get_int(const json& obj, const char* key, const std::string& path, T& out, long long lo,
               long long hi) {
  auto it = obj.find(key);
  if (it == obj.end()) return ok();
  if (!it->is_number_integer()) return field_error(path + "." + key, "must be an integer");
  long long v = it->get<long long>();
  if (v < lo || v > hi)
    return field_error(path + "." + key,
                       "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  out = static_cast<T>(v);
  return ok();
}

Status get_bool(const json& obj, const char* key, const std::string& path, bool& out) {
  auto it = obj.find(key);
  if (it == obj.end()) return ok();
  if (!it->is_boolean()) return field_error(path + "." + key, "must be a boolean");
  out = it->get<bool>();
  return ok();
}

Status get_string(const json& obj, const char* key, const std::string& path, std::string& out) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return ok();
  if (!it->is_string()) return field_error(path + "." + key, "must be a string");
  out = it->get<std::string>();
  return ok();
}

// The members of a functions-like object (`functions`, `cs_functions`).
Status get_functions(const json& j, const char* key, std::map<std::string, FunctionProfile>& out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return ok();
  if (!it->is_object()) return field_error(key, "must be an object keyed by function name");
  for (const auto& [name, fj] : it->items()) {
    std::string path = std::string(key) + "." + name;
    if (!fj.is_object()) return field_error(path, "must be an object");
    FunctionProfile f;
    std::string hash_hex;
    FDO_TRY_STATUS(get_string(fj, "cfg_hash", path, hash_hex));
    if (hash_hex.empty() || hash_hex.size() > 16)
      return field_error(path + ".cfg_hash", "must be 1 to 16 hex digits");
    char* end = nullptr;
    f.cfg_hash = std::strtoull(hash_hex.c_str(), &end, 16);
    if (end == nullptr || *end != '\0')
      return field_error(path + ".cfg_hash", "must be hex digits");
    if (auto c = fj.find("counts"); c != fj.end()) {
      if (!c->is_array()) return field_error(path + ".counts", "must be an array of counts");
      for (const json& v : *c) {
        if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<long long>() >= 0))
          return field_error(path + ".counts", "must hold non-negative integers");
        f.counts.push_back(v.get<std::uint64_t>());
      }
    }
    if (auto u = fj.find("unpredictable"); u != fj.end()) {
      if (!u->is_array())
        return field_error(path + ".unpredictable", "must be an array of branch indexes");
      for (const json& v : *u) {
        if (!v.is_number_integer() || v.get<long long>() < 0 || v.get<long long>() > 0xffffffffLL)
          return field_error(path + ".unpredictable", "must hold branch indexes");
        f.unpredictable.push_back(v.get<std::uint32_t>());
      }
    }
    FDO_TRY_STATUS(get_string(fj, "fingerprint", path, f.fingerprint));
    FDO_TRY_STATUS(get_string(fj, "source_name", path, f.source_name));
    FDO_TRY_STATUS(get_value_sites(fj, "indirect_calls", path, ValueText::hex, f.indirect_calls));
    FDO_TRY_STATUS(get_value_sites(fj, "memop_sizes", path, ValueText::number, f.memop_sizes));
    FDO_TRY_STATUS(get_arg_values(fj, path, f.arg_values));
    if (auto l = fj.find("layout"); l != fj.end() && !l->is_null()) {
      auto layout = l->is_string() ? kLayoutNames.parse(l->get<std::string>()) : std::nullopt;
      if (!layout)
        return field_error(path + ".layout", "must be one of " + kLayoutNames.alternatives());
      f.layout = *layout;
    }
    out.emplace(name, std::move(f));
  }
  return ok();
}
} // namespace

namespace {
json functions_json(const std::map<std::string, FunctionProfile>& functions) {
  json fns = json::object();
  for (const auto& [name, f] : functions) {
    json fj = function_compile_json(f);
    if (!f.fingerprint.empty()) fj["fingerprint"] = f.fingerprint;
    if (!f.source_name.empty()) fj["source_name"] = f.source_name;
    fns[name] = std::move(fj);
  }
  return fns;
}
} // namespace

json to_json(const ProfileDoc& doc) {
  json fns = functions_json(doc.functions);
  json out = {{"format", doc.format},
              {"knobs", knobs_json(doc.knobs)},
              {"functions", std::move(fns)},
              {"hardware", doc.hardware},
              {"provenance",
               {{"reason", doc.provenance.reason},
                {"created_at", doc.provenance.created_at},
                {"host", doc.provenance.host},
                {"stage", doc.provenance.stage},
                {"program", doc.provenance.program}}}};
  // Only when the guard has recorded something: older documents keep their form.
  if (!doc.guard.empty()) out["guard"] = to_json(doc.guard);
  // Likewise only in a drift re-profile.
  if (doc.reprofile_of > 0) out["reprofile_of"] = doc.reprofile_of;
  // Likewise only after a context-sensitive round.
  if (!doc.cs_functions.empty()) out["cs_functions"] = functions_json(doc.cs_functions);
  // And only in imported documents with records outside the program.
  if (!doc.outside_functions.empty())
    out["outside_functions"] = functions_json(doc.outside_functions);
  // And only in GPU programs' documents.
  if (!doc.gpu.empty()) out["gpu"] = to_json(doc.gpu);
  return out;
}

namespace {
// The "knobs" object of a profile document.
Expected<Knobs> get_knobs(const json& k) {
  if (!k.is_object()) return field_error("knobs", "must be an object");
  Knobs knobs;
  FDO_TRY_STATUS(get_int(k, "opt_level", "knobs", knobs.opt_level, 0, 3));
  FDO_TRY_STATUS(get_int(k, "size_level", "knobs", knobs.size_level, 0, 2));
  FDO_TRY_STATUS(get_bool(k, "unroll", "knobs", knobs.unroll));
  FDO_TRY_STATUS(get_bool(k, "vectorize", "knobs", knobs.vectorize));
  if (auto t = k.find("inline_threshold"); t != k.end() && !t->is_null()) {
    int v = 0;
    FDO_TRY_STATUS(get_int(k, "inline_threshold", "knobs", v, -10000, 100000));
    knobs.inline_threshold = v;
  }
  if (auto m = k.find("mode"); m != k.end() && !m->is_null()) {
    if (!m->is_string()) return field_error("knobs.mode", "must be a string or null");
    FDO_TRY(CompileMode mode, parse_compile_mode(m->get<std::string>()));
    knobs.mode = mode;
  }
  FDO_TRY_STATUS(get_int(k, "text_offset", "knobs", knobs.text_offset, 0, kTextOffsetWindow - 1));
  FDO_TRY_STATUS(get_int(k, "spec_min_share", "knobs", knobs.spec_min_share, 0, 100));
  if (knobs.spec_min_share != 0 && knobs.spec_min_share < 50)
    return field_error("knobs.spec_min_share",
                       "must be 0 (off) or a share in [50, 100] percent (a value passed by fewer "
                       "than half of the calls is no one value's)");
  FDO_TRY_STATUS(get_int(k, "spec_max_clones", "knobs", knobs.spec_max_clones, 0, 64));
  if (auto c = k.find("cold_code"); c != k.end()) {
    if (!c->is_string()) return field_error("knobs.cold_code", "must be a string");
    auto parsed = parse_cold_code(c->get<std::string>());
    if (!parsed) return field_error("knobs.cold_code", parsed.error().message());
    knobs.cold_code = *parsed;
  }
  if (knobs.text_offset % kTextOffsetStep != 0)
    return field_error("knobs.text_offset",
                       "must be a multiple of " + std::to_string(kTextOffsetStep));
  return knobs;
}
} // namespace

Expected<ProfileDoc> profile_from_json(const json& j) {
  if (!j.is_object()) return field_error("$", "profile must be a JSON object");
  ProfileDoc doc;
  FDO_TRY_STATUS(get_int(j, "format", "$", doc.format, 1, ProfileDoc::kFormat));
  if (auto it = j.find("knobs"); it != j.end() && !it->is_null()) {
    FDO_TRY(doc.knobs, get_knobs(*it));
  }
  FDO_TRY_STATUS(get_functions(j, "functions", doc.functions));
  FDO_TRY_STATUS(get_functions(j, "cs_functions", doc.cs_functions));
  for (const auto& [name, f] : doc.cs_functions)
    if (!is_cs_hash(f.cfg_hash))
      return field_error("cs_functions." + name + ".cfg_hash",
                         "must carry the context-sensitive flag (bit 60)");
  FDO_TRY_STATUS(get_functions(j, "outside_functions", doc.outside_functions));
  if (auto it = j.find("hardware"); it != j.end() && !it->is_null()) {
    if (!it->is_object()) return field_error("hardware", "must be an object");
    doc.hardware = *it;
  }
  if (auto it = j.find("guard"); it != j.end()) {
    FDO_TRY(doc.guard, guard_from_json(*it));
  }
  FDO_TRY_STATUS(
      get_int(j, "reprofile_of", "$", doc.reprofile_of, 0, std::numeric_limits<long long>::max()));
  if (auto it = j.find("gpu"); it != j.end()) {
    FDO_TRY(doc.gpu, gpu_profile_from_json(*it));
  }
  if (auto it = j.find("provenance"); it != j.end() && !it->is_null()) {
    if (!it->is_object()) return field_error("provenance", "must be an object");
    const json& p = *it;
    FDO_TRY_STATUS(get_string(p, "reason", "provenance", doc.provenance.reason));
    FDO_TRY_STATUS(get_string(p, "created_at", "provenance", doc.provenance.created_at));
    FDO_TRY_STATUS(get_string(p, "host", "provenance", doc.provenance.host));
    FDO_TRY_STATUS(get_string(p, "program", "provenance", doc.provenance.program));
    FDO_TRY_STATUS(get_int(p, "stage", "provenance", doc.provenance.stage, 0,
                           std::numeric_limits<long long>::max()));
  }
  return doc;
}

json to_json(const Knobs& knobs) {
  return knobs_json(knobs);
}

Expected<Knobs> knobs_from_json(const json& j) {
  if (j.is_null()) return Knobs{}; // as a document without knobs
  return get_knobs(j);
}

Expected<ProfileDoc> parse_profile(std::string_view json_text) {
  json j = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return make_error(Errc::parse, "profile is not valid JSON");
  return profile_from_json(j);
}

std::string canonical_json(const json& j) {
  // nlohmann's default object type is std::map: dump() emits keys sorted and,
  // with no indent, without insignificant whitespace.
  return j.dump(-1, ' ', /*ensure_ascii=*/false, json::error_handler_t::strict);
}

std::string_view no_profile_digest() {
  // Recognisable in keys and logs, and no real digest (64 hex digits) can equal it.
  return "none";
}

CompileMode choose_mode(const ProfileDoc* doc) {
  if (doc == nullptr) return CompileMode::instrumented;
  if (doc->knobs.mode) return *doc->knobs.mode;
  for (const auto& [name, f] : doc->functions)
    for (std::uint64_t c : f.counts)
      if (c != 0) return CompileMode::optimized;
  return CompileMode::instrumented;
}

std::string display_name(const std::string& pgo_name, const FunctionProfile& f) {
  return f.source_name.empty() ? pgo_name : f.source_name;
}

} // namespace fdo
