// fdo_gen_module: prints bench::generate_module(N) (the synthetic IR module of
// jit_bench) on stdout, so scripts can hand the very same module to fdod.
// Usage: fdo_gen_module [functions]   (default 48: about 2,000 lines)
#include "gen_module.h"

#include <cstdio>
#include <cstdlib>
#include <string>

int main(int argc, char** argv) {
  if (argc > 2) {
    std::fprintf(stderr, "usage: %s [functions]\n", argv[0]);
    return 2;
  }
  int functions = 48;
  if (argc == 2) {
    char* end = nullptr;
    const long n = std::strtol(argv[1], &end, 10);
    // Beyond 100,000 functions the text runs into gigabytes: refuse, do not thrash.
    if (end == argv[1] || *end != '\0' || n < 1 || n > 100000) {
      std::fprintf(stderr, "%s: functions must be a whole number from 1 to 100000, got '%s'\n",
                   argv[0], argv[1]);
      return 2;
    }
    functions = static_cast<int>(n);
  }
  const std::string text = fdo::jit::bench::generate_module(functions);
  if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size() || std::fflush(stdout) != 0) {
    std::perror("fdo_gen_module: write");
    return 1;
  }
  return 0;
}
