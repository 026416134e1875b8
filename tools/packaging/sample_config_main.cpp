// Writes the commented sample configuration (every key of the key table at
// its default) to the file named by argv[1]; the build installs it as
// /etc/fdod/fdod.conf (tools/packaging/CMakeLists.txt).
#include "fdo/daemon/config.h"

#include <cstdio>
#include <fstream>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTPUT\n", argv[0]);
    return 2;
  }
  std::ofstream out(argv[1], std::ios::binary | std::ios::trunc);
  out << fdo::daemon::sample_config();
  out.close();
  if (!out) {
    std::fprintf(stderr, "%s: cannot write %s\n", argv[0], argv[1]);
    return 1;
  }
  return 0;
}
