// Text helpers shared by the cgroup files: /proc and cgroupfs files are
// lines of space-separated fields.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

namespace fdo::daemon::cgroup_text {

inline std::vector<std::string_view> split(std::string_view text, char sep) {
  std::vector<std::string_view> out;
  while (!text.empty()) {
    std::size_t at = text.find(sep);
    out.push_back(text.substr(0, at));
    if (at == std::string_view::npos) break;
    text.remove_prefix(at + 1);
  }
  return out;
}

inline std::vector<std::string_view> lines(std::string_view text) {
  return split(text, '\n');
}

inline std::vector<std::string_view> fields(std::string_view line) {
  std::vector<std::string_view> out;
  for (std::string_view f : split(line, ' '))
    if (!f.empty()) out.push_back(f);
  return out;
}

inline std::string join_path(const std::string& dir, std::string_view rel) {
  std::string out = dir;
  while (out.size() > 1 && out.back() == '/')
    out.pop_back();
  if (!rel.empty() && rel != "/") {
    if (rel.front() != '/') out += '/';
    out += rel;
  }
  return out;
}

// "key value" lines (memory.events, memory.oom_control): value of `key`, 0 if absent.
inline std::uint64_t keyed_value(std::string_view text, std::string_view key) {
  for (std::string_view line : lines(text)) {
    auto f = fields(line);
    if (f.size() == 2 && f[0] == key) return std::strtoull(std::string(f[1]).c_str(), nullptr, 10);
  }
  return 0;
}

inline bool has_word(std::string_view text, std::string_view word) {
  for (std::string_view line : lines(text))
    for (std::string_view f : fields(line))
      if (f == word) return true;
  return false;
}

} // namespace fdo::daemon::cgroup_text
