// support/skip.h: a skipped case makes the runner exit 77 under CTest (and
// only then), and a case that fails is a failure whether or not it skipped.
#include "support/skip.h"

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

namespace {

// Where the demo cases log their skips: never the run's own $FDO_SKIP_LOG.
std::string demo_log() {
  return "/tmp/fdo-skip-demo." + std::to_string(::getpid()) + ".txt";
}

// This binary run again on one hidden test case: its exit status.
int run_case(const std::string& name, bool under_ctest) {
  const std::string log = demo_log(); // this process's pid, not the child's
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    if (under_ctest)
      ::setenv("FDO_SKIP_RETURN_CODE", "77", 1);
    else
      ::unsetenv("FDO_SKIP_RETURN_CODE");
    ::setenv("FDO_SKIP_LOG", log.c_str(), 1);
    const std::string self = "/proc/self/exe";
    ::execl(self.c_str(), "fdo_support_tests", name.c_str(), "-o", "/dev/null",
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  return WEXITSTATUS(status);
}

} // namespace

TEST_CASE("skip demo: skips", "[.skip_demo]") {
  FDO_SKIP("skipped: a prerequisite this demo never has");
}

TEST_CASE("skip demo: fails after a partial skip", "[.skip_demo]") {
  fdo::test_support::note_skip("skipped: the PostgreSQL part");
  CHECK(1 == 2);
}

TEST_CASE("skip demo: passes", "[.skip_demo]") {
  CHECK(1 == 1);
}

TEST_CASE("skip: a skipped case exits 77 under CTest and never hides a failure", "[support]") {
  CHECK(run_case("skip demo: skips", true) == 77);
  CHECK(run_case("skip demo: skips", false) == 0);
  CHECK(run_case("skip demo: passes", true) == 0);
  CHECK(run_case("skip demo: fails after a partial skip", true) == 1);
  // Each skip is logged with its case's name (tools/test.sh lists them).
  std::ifstream log(demo_log());
  std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  ::unlink(demo_log().c_str());
  CHECK(text == "skip demo: skips: skipped: a prerequisite this demo never has\n"
                "skip demo: skips: skipped: a prerequisite this demo never has\n"
                "skip demo: fails after a partial skip: skipped: the PostgreSQL part\n");
}
