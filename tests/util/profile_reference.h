// The profile document's canonical text and digest built the long way, from
// its nlohmann tree (to_json): what the store wrote before profile_write.cpp
// wrote them straight from the struct, kept here as the reference the fast
// writers are checked against.
#pragma once

#include "fdo/util/gpu_profile.h"
#include "fdo/util/hash.h"
#include "fdo/util/profile.h"

#include <nlohmann/json.hpp>
#include <string>

namespace fdo::test {

inline std::string reference_text(const ProfileDoc& doc) {
  return canonical_json(to_json(doc));
}

// The compile-affecting members of to_json(doc): function entries without
// their bookkeeping (fingerprint, source_name), the optional sections only
// when present, the GPU launch bounds (to_json writes them sorted).
inline std::string reference_digest(const ProfileDoc& doc) {
  nlohmann::json j = to_json(doc);
  auto compile_only = [](nlohmann::json fns) {
    for (auto& [name, f] : fns.items()) {
      (void)name;
      f.erase("fingerprint");
      f.erase("source_name");
    }
    return fns;
  };
  nlohmann::json part = {
      {"format", j["format"]}, {"knobs", j["knobs"]}, {"functions", compile_only(j["functions"])}};
  for (const char* member : {"cs_functions", "outside_functions"})
    if (j.contains(member)) part[member] = compile_only(j[member]);
  if (j.contains("gpu") && j["gpu"].contains("launch_bounds") && !j["gpu"]["launch_bounds"].empty())
    part["gpu_launch_bounds"] = j["gpu"]["launch_bounds"];
  return blake3_hex("fdo.profile.v1\n" + canonical_json(part));
}

} // namespace fdo::test
