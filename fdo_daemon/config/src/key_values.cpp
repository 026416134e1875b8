// The parsers of key values (key_values.h): trimming, integers, numbers and
// booleans, event names, metrics listen addresses and profile store locations.
#include "key_values.h"

#include <charconv>
#include <cmath>

namespace fdo::daemon::config_detail {

std::string_view trim(std::string_view s) {
  auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  while (!s.empty() && is_space(s.front()))
    s.remove_prefix(1);
  while (!s.empty() && is_space(s.back()))
    s.remove_suffix(1);
  return s;
}

std::optional<std::uint64_t> parse_u64(std::string_view s) {
  if (s.empty() || s.front() < '0' || s.front() > '9') return std::nullopt;
  std::uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

std::optional<double> parse_double(std::string_view s) {
  if (s.empty()) return std::nullopt;
  double v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

std::string format_double(double v) {
  char buf[64];
  auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v);
  (void)ec;
  return std::string(buf, p);
}

std::optional<bool> parse_bool(std::string_view v) {
  if (v == "true" || v == "yes" || v == "on" || v == "1") return true;
  if (v == "false" || v == "no" || v == "off" || v == "0") return false;
  return std::nullopt;
}

bool valid_event_name(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == ':' || c == '.' || c == '=' || c == '/';
  });
}

// metrics_listen: "", "PORT", "A.B.C.D:PORT" or "[v6]:PORT"; the reason if not.
std::optional<std::string> check_listen_address(std::string_view s) {
  if (s.empty()) return std::nullopt;
  const char* what = "empty, a port, 127.0.0.1:PORT or [::1]:PORT (port 1-65535)";
  std::size_t colon = s.rfind(':');
  std::string_view host = colon == std::string_view::npos ? "" : s.substr(0, colon);
  std::string_view port = colon == std::string_view::npos ? s : s.substr(colon + 1);
  auto p = parse_u64(port);
  if (!p || *p == 0 || *p > 65535) return what;
  if (colon == std::string_view::npos) return std::nullopt;
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') return std::nullopt;
  int dots = 0;
  for (char ch : host) {
    if (ch == '.')
      ++dots;
    else if (ch < '0' || ch > '9')
      return what;
  }
  if (dots != 3) return what;
  return std::nullopt;
}

// profile_store: "sqlite" (or empty) or a libpq URI; the reason if not.
std::optional<std::string> check_profile_store(std::string_view s) {
  const char* what = "sqlite, or a postgresql:// or postgres:// URI";
  if (s.empty() || s == kSqliteStore) return std::nullopt;
  for (std::string_view scheme : {"postgresql://", "postgres://"})
    if (s.starts_with(scheme)) {
      for (unsigned char ch : s)
        if (ch <= 0x20 || ch >= 0x7f) return std::string(what) + ", without spaces";
      return std::nullopt;
    }
  return what;
}

} // namespace fdo::daemon::config_detail
