// Where fdod's configuration comes from: the file an operator named, the
// default path, or none; and the two texts printed from the key table
// (`fdod --print-config` and the installed sample configuration).
#include "fdo/daemon/config.h"
#include "fdo/util/fd.h"

#include <cerrno>
#include <map>
#include <sys/stat.h>

namespace fdo::daemon {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

// key -> line number of every `key = value` line of a file parse() accepted.
std::map<std::string, std::size_t, std::less<>> keys_set_in(std::string_view text) {
  std::map<std::string, std::size_t, std::less<>> out;
  std::size_t line_no = 0, pos = 0;
  while (pos < text.size()) {
    ++line_no;
    std::size_t nl = text.find('\n', pos);
    std::size_t end = nl == std::string_view::npos ? text.size() : nl;
    std::string_view line = trim(text.substr(pos, end - pos));
    pos = end + 1;
    if (line.empty() || line.front() == '#') continue;
    std::size_t eq = line.find('=');
    if (eq == std::string_view::npos) continue;
    out.emplace(std::string(trim(line.substr(0, eq))), line_no);
  }
  return out;
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 || errno != ENOENT;
}

// `text` as comment lines of at most ~90 columns, each starting with "# ".
std::string comment(std::string_view text) {
  std::string out;
  std::size_t width = 0; // of the current line, 0 = none begun
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t sp = text.find(' ', pos);
    std::size_t end = sp == std::string_view::npos ? text.size() : sp;
    std::string_view word = text.substr(pos, end - pos);
    pos = end + 1;
    if (word.empty()) continue;
    if (width > 0 && width + 1 + word.size() > 90) {
      out.push_back('\n');
      width = 0;
    }
    if (width == 0) {
      out.push_back('#');
      width = 1;
    }
    out.push_back(' ');
    out.append(word);
    width += 1 + word.size();
  }
  out.push_back('\n');
  return out;
}

} // namespace

std::string config_file_for(const ConfigSource& source) {
  if (source.no_file) return {};
  if (!source.explicit_path.empty()) return source.explicit_path;
  if (!source.default_path.empty() && exists(source.default_path)) return source.default_path;
  return {};
}

Expected<LoadedConfig> load_config(const ConfigSource& source, const ConfigOverrides& overrides) {
  LoadedConfig out;
  out.file = config_file_for(source);
  std::string text;
  if (!out.file.empty()) {
    if (!source.explicit_path.empty() && !exists(out.file))
      return make_error(Errc::not_found,
                        "config file " + out.file +
                            " does not exist (given with --config; leave --config out to use " +
                            (source.default_path.empty()
                                 ? std::string("the defaults")
                                 : source.default_path + " or, without it, the defaults") +
                            ")");
    auto read = read_file(out.file, 1u << 20);
    if (!read) return std::move(read).error().context("config file " + out.file);
    text = std::move(*read);
  }
  auto config = Config::parse(text, out.file.empty() ? "defaults" : out.file, overrides);
  if (!config) return std::move(config).error();
  out.config = std::move(*config);
  auto in_file = keys_set_in(text);
  std::map<std::string, bool, std::less<>> on_command_line;
  for (const auto& [key, value] : overrides)
    on_command_line[key] = true;
  for (const ConfigKeyInfo& k : Config::keys()) {
    std::string origin = "default";
    if (on_command_line.count(k.name))
      origin = "command line";
    else if (auto it = in_file.find(k.name); it != in_file.end())
      origin = out.file + ":" + std::to_string(it->second);
    out.origins.emplace_back(k.name, std::move(origin));
  }
  return out;
}

std::string print_config(const LoadedConfig& loaded) {
  std::string out = "# fdod effective configuration; file: " +
                    (loaded.file.empty() ? std::string("none (built-in defaults)") : loaded.file) +
                    "\n";
  for (const auto& [key, origin] : loaded.origins) {
    out += "\n# from " + origin + "\n";
    out += key + " = " + loaded.config.get_shown(key) + "\n";
  }
  return out;
}

std::string sample_config() {
  std::string out =
      "# fdod configuration (fdod.conf(5); docs/fdod-config.md).\n"
      "#\n"
      "# One `key = value` per line; lines starting with # are comments. Every key\n"
      "# is listed below, commented out at its built-in default: uncomment a line to\n"
      "# change it. Command-line flags (--socket, --state-dir, --log-level) win over\n"
      "# this file. `systemctl reload fdod` applies keys marked \"SIGHUP: applied\";\n"
      "# the others take effect on the next restart. `fdod --print-config` shows\n"
      "# the effective value of every key and where it came from.\n";
  for (const ConfigKeyInfo& k : Config::keys()) {
    out += "\n";
    out += comment(k.description);
    out += k.reload == ReloadBehavior::runtime ? "# SIGHUP: applied\n" : "# SIGHUP: restart only\n";
    out += "#" + k.name + " = " + k.default_value + "\n";
  }
  return out;
}

} // namespace fdo::daemon
