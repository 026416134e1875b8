#include "fdo/daemon/compile_parts.h"

#include <map>

namespace fdo::daemon {

std::string explain_prefix(const jit::PrefixBuild& prefix) {
  switch (prefix.origin) {
  case jit::PrefixOrigin::reused:
    return "the pipeline's prefix taken from the program's last build";
  case jit::PrefixOrigin::not_held:
    return "";
  case jit::PrefixOrigin::input_changed:
  case jit::PrefixOrigin::held_damaged:
    break;
  }
  return "the pipeline's prefix run again (" + std::string(jit::to_string(prefix.origin)) + ")";
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
