#include "fdo/profile_store/location.h"

namespace fdo::profile_store {

bool is_postgres_uri(std::string_view location) {
  return location.starts_with("postgresql://") || location.starts_with("postgres://");
}

std::string redact_location(std::string_view location) {
  if (!is_postgres_uri(location)) return std::string(location);
  std::string out(location);
  const std::size_t scheme_end = out.find("://") + 3;
  // user[:password]@ ends at the last '@' before the path or the parameters.
  std::size_t authority_end = out.find_first_of("/?", scheme_end);
  if (authority_end == std::string::npos) authority_end = out.size();
  std::size_t at = out.rfind('@', authority_end);
  if (at != std::string::npos && at >= scheme_end) {
    std::size_t colon = out.find(':', scheme_end);
    if (colon != std::string::npos && colon < at) out.replace(colon + 1, at - colon - 1, "***");
  }
  // password=... among the parameters.
  std::size_t query = out.find('?');
  while (query != std::string::npos) {
    std::size_t key = query + 1;
    std::size_t next = out.find('&', key);
    std::size_t end = next == std::string::npos ? out.size() : next;
    std::string_view param(out.data() + key, end - key);
    if (param.starts_with("password=")) {
      out.replace(key + 9, end - key - 9, "***");
      next = out.find('&', key);
    }
    query = next;
  }
  return out;
}

} // namespace fdo::profile_store
