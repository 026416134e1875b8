#include "fdo/util/value_json.h"

#include "fdo/util/hash.h"

#include <cstdio>
#include <cstdlib>

namespace fdo {

using nlohmann::json;

namespace {
Error field_error(const std::string& path, const std::string& what) {
  return profile_field_error(path, what);
}
} // namespace

std::string hash_to_hex(std::uint64_t h) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

Error profile_field_error(const std::string& path, const std::string& what) {
  return make_error(Errc::invalid_argument, "profile field '" + path + "': " + what);
}

std::optional<std::uint64_t> parse_hex64(const std::string& text) {
  if (text.empty() || text.size() > 16) return std::nullopt;
  char* end = nullptr;
  std::uint64_t v = std::strtoull(text.c_str(), &end, 16);
  if (end == nullptr || *end != '\0') return std::nullopt;
  return v;
}

std::optional<std::uint64_t> json_u64(const json& v) {
  if (v.is_number_unsigned()) return v.get<std::uint64_t>();
  if (v.is_number_integer() && v.get<long long>() >= 0) return v.get<std::uint64_t>();
  return std::nullopt;
}

json value_sites_json(const std::vector<ValueSite>& sites, ValueText text) {
  json out = json::array();
  for (const ValueSite& site : sites) {
    json s = json::array();
    for (const auto& [value, count] : site)
      s.push_back({text == ValueText::hex ? json(hash_to_hex(value)) : json(value), count});
    out.push_back(std::move(s));
  }
  return out;
}

json arg_values_json(const std::vector<ArgValues>& args) {
  json out = json::array();
  for (const ArgValues& a : args)
    out.push_back({{"arg", a.arg},
                   {"values", value_sites_json({a.values}, ValueText::number)[0]},
                   {"other", a.other}});
  return out;
}

Status get_value_sites(const json& obj, const char* key, const std::string& path, ValueText text,
                       std::vector<ValueSite>& out) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return ok();
  const std::string where = path + "." + key;
  if (!it->is_array()) return field_error(where, "must be an array of value sites");
  for (const json& site : *it) {
    if (!site.is_array()) return field_error(where, "each site must be an array of [value, count]");
    ValueSite vs;
    for (const json& pair : site) {
      if (!pair.is_array() || pair.size() != 2)
        return field_error(where, "each entry must be [value, count]");
      std::optional<std::uint64_t> value =
          text == ValueText::hex
              ? (pair[0].is_string() ? parse_hex64(pair[0].get<std::string>()) : std::nullopt)
              : json_u64(pair[0]);
      if (!value)
        return field_error(where, text == ValueText::hex ? "values must be 1 to 16 hex digits"
                                                         : "values must be non-negative integers");
      std::optional<std::uint64_t> count = json_u64(pair[1]);
      if (!count) return field_error(where, "counts must be non-negative integers");
      vs.emplace_back(*value, *count);
    }
    out.push_back(std::move(vs));
  }
  return ok();
}
// A function's "arg_values": [{arg, values: [[value, count], ...], other}].
Status get_arg_values(const json& fj, const std::string& path, std::vector<ArgValues>& out) {
  auto it = fj.find("arg_values");
  if (it == fj.end() || it->is_null()) return ok();
  const std::string where = path + ".arg_values";
  if (!it->is_array()) return field_error(where, "must be an array of argument profiles");
  for (const json& a : *it) {
    if (!a.is_object()) return field_error(where, "each entry must be an object");
    ArgValues av;
    if (!a.contains("arg")) return field_error(where + ".arg", "is required");
    const json& arg = a["arg"];
    if (!arg.is_number_integer() || arg.get<long long>() < 0 || arg.get<long long>() > 0xffff)
      return field_error(where + ".arg", "must be in [0, 65535]");
    av.arg = arg.get<std::uint32_t>();
    std::vector<ValueSite> sites;
    json wrapped = {{"values", json::array({a.value("values", json::array())})}};
    FDO_TRY_STATUS(get_value_sites(wrapped, "values", where, ValueText::number, sites));
    av.values = std::move(sites.at(0));
    if (auto o = a.find("other"); o != a.end()) {
      std::optional<std::uint64_t> other = json_u64(*o);
      if (!other) return field_error(where + ".other", "must be a non-negative integer");
      av.other = *other;
    }
    for (const ArgValues& seen : out)
      if (seen.arg == av.arg) return field_error(where, "lists an argument twice");
    out.push_back(std::move(av));
  }
  return ok();
}

} // namespace fdo
