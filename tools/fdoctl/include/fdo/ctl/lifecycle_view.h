// The program lifecycle as `fdoctl explain` prints it (docs/lifecycle.md):
// from cache.explain's `lifecycle` member, the phase the program is in and
// the transitions that brought it there, one line each with its cause.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace fdo::ctl {

// Nothing when `lifecycle` is null (no stage of the program ran under this
// fdod yet).
std::string render_lifecycle(const nlohmann::json& lifecycle);

} // namespace fdo::ctl
