// The JSON of value profiles, as profile documents hold them (schemas/
// profile.schema.json: functions[*].indirect_calls, memop_sizes,
// arg_values) and as feedback.submit carries an in-process runtime's
// (schemas/methods/feedback.submit.json): one codec for both.
#pragma once

#include "fdo/util/expected.h"
#include "fdo/util/profile.h"

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace fdo {

// Indirect-call targets are MD5 hashes: hex text like the CFG hash. Sizes
// and argument values are plain integers.
enum class ValueText { hex, number };

// [[ [value, count], ... ] per site].
nlohmann::json value_sites_json(const std::vector<ValueSite>& sites, ValueText text);
// [{arg, values: [[value, count], ...], other}].
nlohmann::json arg_values_json(const std::vector<ArgValues>& args);

// Reads obj[key] (absent or null: nothing) in value_sites_json's form into
// `out`; errors name path.key.
Status get_value_sites(const nlohmann::json& obj, const char* key, const std::string& path,
                       ValueText text, std::vector<ValueSite>& out);
// Reads fj["arg_values"] (absent or null: nothing); an argument listed twice
// is an error.
Status get_arg_values(const nlohmann::json& fj, const std::string& path,
                      std::vector<ArgValues>& out);

// "profile field '<path>': <what>", invalid_argument.
Error profile_field_error(const std::string& path, const std::string& what);
// 16 lowercase hex digits (a CFG hash, an MD5 target).
std::string hash_to_hex(std::uint64_t h);
// 1 to 16 hex digits.
std::optional<std::uint64_t> parse_hex64(const std::string& text);
// A non-negative JSON integer.
std::optional<std::uint64_t> json_u64(const nlohmann::json& v);

} // namespace fdo
