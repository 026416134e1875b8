#include "fdo/util/log.h"

#include "fdo/util/log_record.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>
#include <string>
#include <sys/time.h>
#include <unistd.h>

namespace fdo::log {

namespace {
struct LoggerState {
  std::atomic<int> min_level{static_cast<int>(Level::info)};
  std::atomic<int> fd{STDERR_FILENO};
  std::mutex mu;
  std::string ident = "fdo";
  bool journal = std::getenv("JOURNAL_STREAM") != nullptr;
  std::atomic<RecordSink> sink{nullptr};
};

LoggerState& state() {
  static LoggerState s;
  return s;
}

const char* level_name(Level l) {
  switch (l) {
  case Level::debug:
    return "debug";
  case Level::info:
    return "info";
  case Level::notice:
    return "notice";
  case Level::warning:
    return "warning";
  case Level::error:
    return "error";
  }
  return "?";
}
} // namespace

void set_output_fd(int fd) {
  state().fd = fd;
}

void set_level(Level min_level) {
  state().min_level = static_cast<int>(min_level);
}
Level level() {
  return static_cast<Level>(state().min_level.load());
}

void set_ident(std::string_view ident) {
  std::lock_guard lk(state().mu);
  state().ident = std::string(ident);
}

bool parse_level(std::string_view name, Level& out) {
  for (Level l : {Level::debug, Level::info, Level::notice, Level::warning, Level::error})
    if (name == level_name(l)) {
      out = l;
      return true;
    }
  return false;
}

void write(Level lvl, std::string_view message) {
  LoggerState& s = state();
  // Larger numeric value = less severe (syslog order).
  if (static_cast<int>(lvl) > s.min_level.load()) return;
  std::string line;
  std::lock_guard lk(s.mu);
  if (s.journal) {
    line.push_back('<');
    line.append(std::to_string(static_cast<int>(lvl)));
    line.push_back('>');
    line.append(s.ident);
    line.append(": ");
  } else {
    timeval tv{};
    ::gettimeofday(&tv, nullptr);
    tm t{};
    ::gmtime_r(&tv.tv_sec, &t);
    char ts[96];
    std::snprintf(ts, sizeof ts, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", t.tm_year + 1900,
                  t.tm_mon + 1, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec,
                  static_cast<long>(tv.tv_usec / 1000));
    line.append(ts);
    line.push_back(' ');
    line.append(s.ident);
    line.push_back(' ');
    line.append(level_name(lvl));
    line.append(": ");
  }
  line.append(message);
  line.push_back('\n');
  // One write(2) per line so lines from several processes do not interleave.
  ssize_t r = ::write(s.fd.load(), line.data(), line.size());
  (void)r;
}

void set_record_sink(RecordSink sink) {
  state().sink = sink;
}

std::string with_fields(std::string_view message, std::span<const Field> fields) {
  std::string out(message);
  bool open = false;
  for (const Field& f : fields) {
    if (f.value.empty()) continue;
    out += open ? " " : " [";
    open = true;
    out.append(f.name).append("=").append(f.value);
  }
  if (open) out += "]";
  return out;
}

void record(Level lvl, std::string_view message, std::span<const Field> fields) {
  LoggerState& s = state();
  if (static_cast<int>(lvl) > s.min_level.load()) return;
  if (RecordSink sink = s.sink.load(); sink != nullptr && sink(lvl, message, fields)) return;
  write(lvl, with_fields(message, fields));
}

} // namespace fdo::log
