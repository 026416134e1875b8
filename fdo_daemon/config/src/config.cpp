// fdod's configuration over the key table (config_keys.h): setting and reading
// keys by name, the `key = value` file format, command-line overrides, and
// SIGHUP reloads (which keys move across, what is logged); store locations as
// shown with their passwords redacted.
#include "fdo/daemon/config.h"

#include "config_keys.h"
#include "fdo/util/fd.h"
#include "key_values.h"

#include <algorithm>
#include <map>
#include <thread>

namespace fdo::daemon {

using config_detail::find_key;
using config_detail::key_defs;
using config_detail::KeyDef;
using config_detail::shown;
using config_detail::trim;

namespace {

Error bad_value(std::string_view where, const KeyDef& d, std::string_view value,
                const std::string& expected) {
  return make_error(Errc::invalid_argument, std::string(where) + ": bad value for '" + d.name +
                                                "': '" + shown(d, value) + "' (expected " +
                                                expected + ")");
}

Status set_at(Config& c, std::string_view where, std::string_view key, std::string_view value) {
  const KeyDef* d = find_key(key);
  if (!d && config_detail::retired_key(key)) {
    log::warning(std::string(where) + ": '" + std::string(key) + "' is retired and ignored (" +
                 config_detail::retired_key(key) + ")");
    return ok();
  }
  if (!d)
    return make_error(Errc::invalid_argument,
                      std::string(where) + ": unknown key '" + std::string(key) + "'");
  if (auto expected = d->set(c, value)) return bad_value(where, *d, value, *expected);
  return ok();
}

} // namespace

Status Config::set(std::string_view key, std::string_view value) {
  return set_at(*this, "config", key, trim(value));
}

Status Config::apply_overrides(const ConfigOverrides& overrides) {
  for (const auto& [key, value] : overrides)
    FDO_TRY_STATUS(set_at(*this, "command line", key, trim(value)));
  return ok();
}

std::string Config::get(std::string_view key) const {
  const KeyDef* d = find_key(key);
  return d ? d->get(*this) : std::string();
}

std::string Config::get_shown(std::string_view key) const {
  const KeyDef* d = find_key(key);
  return d ? shown(*d, d->get(*this)) : std::string();
}

std::string Config::to_text() const {
  std::string out;
  for (const KeyDef& d : key_defs()) {
    out += d.name;
    out += " = ";
    out += d.get(*this);
    out += '\n';
  }
  return out;
}

unsigned Config::effective_handler_threads() const {
  if (handler_threads != 0) return handler_threads;
  return std::max(4u, 2 * std::thread::hardware_concurrency());
}

unsigned Config::effective_compile_threads() const {
  if (compile_threads != 0) return compile_threads;
  return std::clamp(std::thread::hardware_concurrency(), 1u, 8u);
}

unsigned Config::effective_max_running_compiles_per_uid() const {
  if (max_running_compiles_per_uid != 0) return max_running_compiles_per_uid;
  return std::max(1u, compile_workers - 1);
}

const std::vector<ConfigKeyInfo>& Config::keys() {
  static const std::vector<ConfigKeyInfo> infos = [] {
    std::vector<ConfigKeyInfo> v;
    Config defaults;
    for (const KeyDef& d : key_defs())
      v.push_back({d.name, shown(d, d.get(defaults)), d.reload, d.description});
    return v;
  }();
  return infos;
}

Expected<Config> Config::parse(std::string_view text, std::string_view origin,
                               const ConfigOverrides& overrides) {
  Config c;
  std::map<std::string, std::size_t, std::less<>> seen; // key -> line
  std::size_t line_no = 0;
  std::size_t pos = 0;
  while (pos < text.size()) {
    ++line_no;
    std::size_t nl = text.find('\n', pos);
    std::size_t end = nl == std::string_view::npos ? text.size() : nl;
    std::string_view line = trim(text.substr(pos, end - pos));
    pos = end + 1;
    if (line.empty() || line.front() == '#') continue;
    std::string where = std::string(origin) + ":" + std::to_string(line_no);
    std::size_t eq = line.find('=');
    if (eq == std::string_view::npos)
      return make_error(Errc::invalid_argument,
                        where + ": expected 'key = value', got '" + std::string(line) + "'");
    std::string_view key = trim(line.substr(0, eq));
    std::string_view value = trim(line.substr(eq + 1));
    if (key.empty()) return make_error(Errc::invalid_argument, where + ": missing key before '='");
    if (auto it = seen.find(key); it != seen.end())
      return make_error(Errc::invalid_argument, where + ": key '" + std::string(key) +
                                                    "' already set on line " +
                                                    std::to_string(it->second));
    FDO_TRY_STATUS(set_at(c, where, key, value));
    seen.emplace(std::string(key), line_no);
  }
  FDO_TRY_STATUS(c.apply_overrides(overrides));
  return c;
}

Expected<Config> Config::load(const std::string& path, const ConfigOverrides& overrides) {
  auto text = read_file(path, 1u << 20);
  if (!text) return std::move(text).error().context("config file " + path);
  return parse(*text, path, overrides);
}

Config with_runtime_keys(const Config& running, const Config& next) {
  Config out = running;
  for (const KeyDef& d : key_defs())
    if (d.reload == ReloadBehavior::runtime) {
      // Re-parsing the printed value moves exactly this key across.
      [[maybe_unused]] auto err = d.set(out, d.get(next));
    }
  return out;
}

Expected<ConfigReload> reload_config(const Config& running, const std::string& path,
                                     const ConfigOverrides& overrides) {
  FDO_TRY(Config fresh, Config::load(path, overrides));
  ConfigReload out{with_runtime_keys(running, fresh), {}, {}};
  for (const KeyDef& d : key_defs()) {
    std::string before = shown(d, d.get(running));
    std::string after = shown(d, d.get(fresh));
    if (before == after) continue;
    std::string change = std::string(d.name) + ": " + before + " -> " + after;
    if (d.reload == ReloadBehavior::runtime) {
      log::info("config reload: " + change);
      out.applied.push_back(std::move(change));
    } else {
      log::warning("config reload: " + change + " ignored; '" + d.name +
                   "' only changes on restart");
      out.ignored.push_back(std::move(change));
    }
  }
  if (out.applied.empty() && out.ignored.empty())
    log::info("config reload: " + path + " unchanged");
  return out;
}

std::string redact_store_location(std::string_view location) {
  std::string out(location);
  // The password of the userinfo: scheme://user:PASSWORD@host...
  if (std::size_t scheme = out.find("://"); scheme != std::string::npos) {
    std::size_t start = scheme + 3;
    std::size_t end = out.find_first_of("/?", start);
    std::size_t at = out.rfind('@', end == std::string::npos ? out.size() : end);
    if (at != std::string::npos && at >= start) {
      std::size_t colon = out.find(':', start);
      if (colon != std::string::npos && colon < at) out.replace(colon + 1, at - colon - 1, "***");
    }
  }
  // A password given as a query parameter: ...?password=PASSWORD&...
  for (std::size_t pos = 0; (pos = out.find("password=", pos)) != std::string::npos;) {
    if (pos == 0 || (out[pos - 1] != '?' && out[pos - 1] != '&')) {
      pos += 9;
      continue;
    }
    std::size_t value = pos + 9;
    std::size_t end = out.find('&', value);
    out.replace(value, (end == std::string::npos ? out.size() : end) - value, "***");
    pos = value + 3;
  }
  return out;
}

} // namespace fdo::daemon
