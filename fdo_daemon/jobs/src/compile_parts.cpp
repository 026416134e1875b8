#include "fdo/daemon/compile_parts.h"

#include "fdo/jit/object_set.h"
#include "fdo/util/hash.h"

#include <map>
#include <optional>

namespace fdo::daemon {

using nlohmann::json;

namespace {

Expected<std::string> key_field(const json& part, const char* name) {
  auto it = part.find(name);
  if (it == part.end() || !it->is_string() || !is_hex_key(it->get_ref<const std::string&>()))
    return make_error(Errc::invalid_argument,
                      std::string("compile job: a held part's ") + name + " is not a key");
  return it->get<std::string>();
}

std::optional<jit::PartOrigin> origin_from(std::string_view s) {
  for (jit::PartOrigin o :
       {jit::PartOrigin::reused, jit::PartOrigin::not_held, jit::PartOrigin::profile_changed,
        jit::PartOrigin::input_changed, jit::PartOrigin::held_damaged})
    if (jit::to_string(o) == s) return o;
  return std::nullopt;
}

} // namespace

void add_held_parts(Message& job, const HeldBuild& held) {
  json parts = json::array();
  for (const jit::PartBuild& p : held.parts)
    parts.push_back({{"key", p.key}, {"slice", p.slice}, {"object_hash", p.object_hash}});
  job.header["held_parts"] = std::move(parts);
  job.header["program_bytes"] = job.payload.size();
  job.payload += held.objects;
}

Expected<JobParts> read_job_parts(const Message& job) {
  JobParts out;
  out.program = job.payload;
  auto parts = job.header.find("held_parts");
  if (parts == job.header.end()) return out;
  if (!parts->is_array())
    return make_error(Errc::invalid_argument, "compile job: held_parts is not an array");
  auto n = job.header.find("program_bytes");
  if (n == job.header.end() || !n->is_number_unsigned() ||
      n->get<std::uint64_t>() > job.payload.size())
    return make_error(Errc::invalid_argument,
                      "compile job: held_parts without a program_bytes within its payload");
  out.program = std::string_view(job.payload).substr(0, n->get<std::size_t>());
  std::vector<jit::HeldPart> held;
  for (const json& p : *parts) {
    if (!p.is_object())
      return make_error(Errc::invalid_argument, "compile job: a held part is not an object");
    jit::HeldPart h;
    FDO_TRY(h.key, key_field(p, "key"));
    FDO_TRY(h.slice, key_field(p, "slice"));
    FDO_TRY(h.object_hash, key_field(p, "object_hash"));
    held.push_back(std::move(h));
  }
  if (held.empty()) return out;
  const std::string_view blob = std::string_view(job.payload).substr(out.program.size());
  auto objects = jit::unpack_objects(blob);
  if (!objects) {
    out.unreadable = objects.error().describe();
    return out;
  }
  if (objects->size() != held.size()) {
    out.unreadable = "the held object set has " + std::to_string(objects->size()) +
                     " objects for " + std::to_string(held.size()) + " parts";
    return out;
  }
  for (std::size_t i = 0; i < held.size(); ++i)
    held[i].object = (*objects)[i];
  out.held = std::move(held);
  return out;
}

json part_builds_to_json(const std::vector<jit::PartBuild>& parts) {
  json out = json::array();
  for (const jit::PartBuild& p : parts)
    out.push_back({{"key", p.key},
                   {"slice", p.slice},
                   {"object_hash", p.object_hash},
                   {"origin", std::string(jit::to_string(p.origin))},
                   {"functions", p.functions},
                   {"first", p.first_function}});
  return out;
}

Expected<std::vector<jit::PartBuild>> part_builds_from_json(const json& j) {
  if (!j.is_array()) return make_error(Errc::internal, "compile reply: parts is not an array");
  std::vector<jit::PartBuild> out;
  for (const json& p : j) {
    if (!p.is_object()) return make_error(Errc::internal, "compile reply: a part is not an object");
    jit::PartBuild b;
    auto key = key_field(p, "key");
    auto slice = key_field(p, "slice");
    auto object_hash = key_field(p, "object_hash");
    auto origin = origin_from(p.value("origin", ""));
    if (!key || !slice || !object_hash || !origin ||
        !p.value("functions", json()).is_number_unsigned() || !p.value("first", json()).is_string())
      return make_error(Errc::internal, "compile reply: a part without key, slice, object_hash, "
                                        "origin, functions and first");
    b.key = std::move(*key);
    b.slice = std::move(*slice);
    b.object_hash = std::move(*object_hash);
    b.origin = *origin;
    b.functions = p["functions"].get<std::size_t>();
    b.first_function = p["first"].get<std::string>();
    out.push_back(std::move(b));
  }
  return out;
}

std::string explain_parts(const std::vector<jit::PartBuild>& parts,
                          const std::map<std::string, std::string>& source_names) {
  std::size_t reused = 0;
  std::vector<std::string> recompiled;
  bool any_held = false;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const jit::PartBuild& p = parts[i];
    if (p.origin == jit::PartOrigin::reused) {
      ++reused;
      any_held = true;
      continue;
    }
    if (p.origin != jit::PartOrigin::not_held) any_held = true;
    auto name = source_names.find(p.first_function);
    recompiled.push_back("part " + std::to_string(i) + " (" + std::to_string(p.functions) +
                         " functions from " +
                         (name == source_names.end() ? p.first_function : name->second) +
                         "): " + std::string(jit::to_string(p.origin)));
  }
  if (!any_held) return "";
  std::string out = "reused " + std::to_string(reused) + " of " + std::to_string(parts.size()) +
                    " parts from the program's last build";
  if (recompiled.empty()) return out;
  out += "; recompiled ";
  constexpr std::size_t kShown = 8;
  for (std::size_t i = 0; i < recompiled.size() && i < kShown; ++i)
    out += (i == 0 ? "" : ", ") + recompiled[i];
  if (recompiled.size() > kShown)
    out += " and " + std::to_string(recompiled.size() - kShown) + " more";
  return out;
}

} // namespace fdo::daemon
