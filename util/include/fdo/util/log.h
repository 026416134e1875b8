// The one global in the project: the logger. Writes one line per message to
// stderr. Under systemd (JOURNAL_STREAM set) each line starts with the
// sd-daemon priority prefix ("<6>") so journald records the level; otherwise
// with a timestamp and level name for people.
#pragma once

#include <string_view>

namespace fdo::log {

enum class Level { debug = 7, info = 6, notice = 5, warning = 4, error = 3 };

void set_level(Level min_level);
// Where lines go (default stderr). A worker whose stdout and stderr capture
// the program it runs logs to a descriptor of its own instead.
void set_output_fd(int fd);
Level level();
// Whether a message at `lvl` would be written: a caller that builds an
// expensive message checks first.
inline bool enabled(Level lvl) {
  return static_cast<int>(lvl) <= static_cast<int>(level());
}
// Name shown in front of messages ("fdod", "fdo-worker[1234]").
void set_ident(std::string_view ident);
bool parse_level(std::string_view name, Level& out);

void write(Level lvl, std::string_view message);
inline void debug(std::string_view m) {
  write(Level::debug, m);
}
inline void info(std::string_view m) {
  write(Level::info, m);
}
inline void notice(std::string_view m) {
  write(Level::notice, m);
}
inline void warning(std::string_view m) {
  write(Level::warning, m);
}
inline void error(std::string_view m) {
  write(Level::error, m);
}

} // namespace fdo::log
