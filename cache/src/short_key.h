// Keys in log lines and explain texts are shortened: enough to tell them
// apart, while explain records and stage outputs carry the full keys.
#pragma once

#include <string>
#include <string_view>

namespace fdo::cache::detail {

inline std::string short_key(std::string_view key) {
  return std::string(key.substr(0, 12)) + (key.size() > 12 ? "…" : "");
}

} // namespace fdo::cache::detail
