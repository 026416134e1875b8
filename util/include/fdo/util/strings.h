// Small string helpers shared across libraries.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace fdo {

// "a<sep>b<sep>c"; empty for no parts.
template <class Range> std::string join(const Range& parts, std::string_view sep = ", ") {
  std::string out;
  bool first = true;
  for (const auto& p : parts) {
    if (!first) out += sep;
    out += std::string_view(p);
    first = false;
  }
  return out;
}

} // namespace fdo
