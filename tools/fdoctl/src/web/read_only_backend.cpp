#include "read_only_backend.h"

#include <algorithm>
#include <array>

namespace fdo::ctl::web {

namespace {
constexpr std::array<std::string_view, 8> kReadMethods = {
    "profile.list",  "profile.get", "profile.history", "program.list",
    "cache.explain", "cache.stats", "health",          "program.source"};
} // namespace

bool is_read_method(std::string_view method) {
  return std::find(kReadMethods.begin(), kReadMethods.end(), method) != kReadMethods.end();
}

Expected<nlohmann::json> ReadOnlyBackend::call(std::string_view method,
                                               const nlohmann::json& params) {
  if (!is_read_method(method))
    return make_error(Errc::permission_denied,
                      "the web view is read-only: it does not call " + std::string(method));
  return inner_->call(method, params);
}

} // namespace fdo::ctl::web
