// The Catch2 runner of every test binary, with support/skip.h's exit status.
#define CATCH_CONFIG_RUNNER
#include "support/skip.h"

#include <cstdlib>
#include <fstream>
#include <iostream>

namespace fdo::test_support {
namespace {
// The skips of this run (one test case per process under CTest).
int& skips() {
  static int n = 0;
  return n;
}
} // namespace

void note_skip(const std::string& reason) {
  ++skips();
  const std::string name = Catch::getResultCapture().getCurrentTestName();
  std::cerr << "SKIPPED: " << name << ": " << reason << "\n";
  // tools/test.sh lists the skips of a whole run from this file.
  if (const char* log = std::getenv("FDO_SKIP_LOG"); log != nullptr && *log != '\0') {
    std::string line = name + ": " + reason;
    for (char& c : line)
      if (c == '\n') c = ' ';
    std::ofstream(log, std::ios::app) << line << "\n";
  }
}
} // namespace fdo::test_support

int main(int argc, char* argv[]) {
  const int rc = Catch::Session().run(argc, argv);
  const char* skip_rc = std::getenv("FDO_SKIP_RETURN_CODE");
  if (rc == 0 && fdo::test_support::skips() > 0 && skip_rc != nullptr) return std::atoi(skip_rc);
  return rc;
}
