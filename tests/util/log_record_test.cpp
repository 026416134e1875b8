// log::record: a structured record goes to the installed sink; without one,
// or when the sink declines, it is one log line with its fields appended;
// the level filter applies either way.
#include "fdo/util/log_record.h"

#include <catch2/catch.hpp>
#include <fcntl.h>
#include <string>
#include <unistd.h>

using namespace fdo;

namespace {

int sink_calls = 0;
bool sink_accepts = true;

bool counting_sink(log::Level, std::string_view, std::span<const log::Field> fields) {
  ++sink_calls;
  return sink_accepts && fields.size() == 2;
}

// The lines the logger writes while this object lives.
struct LogPipe {
  int fds[2] = {-1, -1};
  log::Level before = log::level();
  LogPipe() {
    REQUIRE(::pipe2(fds, O_NONBLOCK | O_CLOEXEC) == 0);
    log::set_output_fd(fds[1]);
  }
  ~LogPipe() {
    log::set_output_fd(STDERR_FILENO);
    log::set_record_sink(nullptr);
    log::set_level(before);
    ::close(fds[0]);
    ::close(fds[1]);
  }
  std::string read_all() {
    std::string out;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(fds[0], buf, sizeof buf)) > 0)
      out.append(buf, static_cast<std::size_t>(n));
    return out;
  }
};

} // namespace

TEST_CASE("log record: sink first, else a line with the fields", "[log]") {
  LogPipe pipe;
  log::set_level(log::Level::info);
  log::record(log::Level::info, "stage 3 ran", {{"FDO_PROGRAM", "abc"}, {"FDO_PROFILE_KEY", ""}});
  std::string line = pipe.read_all();
  CHECK_THAT(line, Catch::EndsWith("stage 3 ran [FDO_PROGRAM=abc]\n"));

  sink_calls = 0;
  sink_accepts = true;
  log::set_record_sink(counting_sink);
  log::record(log::Level::info, "to the sink", {{"FDO_PROGRAM", "abc"}, {"FDO_TENANT_UID", "7"}});
  CHECK(sink_calls == 1);
  CHECK(pipe.read_all().empty());

  // A record the sink cannot deliver is not lost.
  sink_accepts = false;
  log::record(log::Level::info, "declined", {{"FDO_PROGRAM", "abc"}, {"FDO_TENANT_UID", "7"}});
  CHECK(sink_calls == 2);
  CHECK_THAT(pipe.read_all(), Catch::Contains("declined [FDO_PROGRAM=abc FDO_TENANT_UID=7]"));

  // Below the level: neither.
  log::record(log::Level::debug, "quiet", {{"FDO_PROGRAM", "abc"}, {"FDO_TENANT_UID", "7"}});
  CHECK(sink_calls == 2);
  CHECK(pipe.read_all().empty());
}
