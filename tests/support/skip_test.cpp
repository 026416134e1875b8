// support/skip.h: a skipped case makes the runner exit 77 under CTest (and
// only then), and a case that fails is a failure whether or not it skipped.
#include "support/skip.h"

#include <catch2/catch.hpp>
#include <cstdlib>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

namespace {

// This binary run again on one hidden test case: its exit status.
int run_case(const std::string& name, bool under_ctest) {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    if (under_ctest)
      ::setenv("FDO_SKIP_RETURN_CODE", "77", 1);
    else
      ::unsetenv("FDO_SKIP_RETURN_CODE");
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
}
