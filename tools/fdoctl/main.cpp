// fdoctl: the command line for fdod (docs/fdoctl.md).
#include "fdo/ctl/cli.h"

#include <iostream>
#include <unistd.h>

int main(int argc, char** argv) {
  std::ios::sync_with_stdio(false);
  std::vector<std::string> args(argv, argv + argc);
  fdo::ctl::Io io{std::cout, std::cerr, ::isatty(STDOUT_FILENO) == 1, ::isatty(STDERR_FILENO) == 1};
  return fdo::ctl::run_cli(args, io);
}
