// feedback_flush_bench: what one feedback flush of a big program's stage
// costs the store's writer (fdod's flusher appends one row per (profile,
// version, host) it collected; a rewrite landing meanwhile waits for it).
// A row carries --functions functions of 12-24 counts each, as run_big.py's
// program does; the store already holds the same functions for the version
// (a steady program: every flush after the first adds to existing rows), and
// with --hosts N as many other hosts' rows beside them (a fleet store).
// Prints the median append_feedback call, and per function. Run this binary
// built before and after a change, alternately, to compare.
//
// Usage: profile_store_feedback_flush_bench [--functions N] [--hosts N] [--rounds N] [--dir DIR]
//   defaults: 1000 functions, 1 host, 15 rounds, DIR = $TMPDIR or /var/tmp
//   (a disk: the commit's fsync costs what it costs in production).
#include "common/stats.h"
#include "fdo/profile_store/profile_store.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

using namespace fdo;
using fdo::bench::median;
using namespace fdo::profile_store;

namespace {

using Clock = std::chrono::steady_clock;

template <class T> T must(Expected<T> v, const char* what) {
  if (!v) {
    std::fprintf(stderr, "feedback_flush_bench: %s: %s\n", what, v.error().describe().c_str());
    std::exit(1);
  }
  return std::move(*v);
}

} // namespace

int main(int argc, char** argv) {
  int functions = 1000, hosts = 1, rounds = 15;
  const char* tmp = std::getenv("TMPDIR");
  std::string base_dir = tmp != nullptr && *tmp != '\0' ? tmp : "/var/tmp";
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--functions") && i + 1 < argc)
      functions = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--hosts") && i + 1 < argc)
      hosts = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--rounds") && i + 1 < argc)
      rounds = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--dir") && i + 1 < argc)
      base_dir = argv[++i];
    else {
      std::fprintf(stderr, "usage: %s [--functions N] [--hosts N] [--rounds N] [--dir DIR]\n",
                   argv[0]);
      return 2;
    }
  }
  if (functions < 1 || hosts < 1 || rounds < 1) {
    std::fprintf(stderr, "feedback_flush_bench: --functions, --hosts and --rounds must be >= 1\n");
    return 2;
  }
  std::string tmpl = base_dir + "/fdo-flush-bench-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) {
    std::perror(("mkdtemp " + tmpl).c_str());
    return 1;
  }
  const std::string dir = tmpl;
  {
    auto store = must(ProfileStore::open(dir + "/profiles.db", Options{}), "open");
    const std::string pk(64, 'a');
    const std::int64_t version =
        must(store.write(pk, 0, ProfileDoc{}, WriteInfo{}), "write the profile");

    std::mt19937_64 rng(538);
    FeedbackRow row;
    row.pk = pk;
    row.version = version;
    row.stages = 1;
    row.exec_ns = 1'000'000;
    row.counters = {{"cpu-clock-samples", 40}};
    for (int f = 0; f < functions; ++f) {
      std::vector<std::uint64_t> counts(12 + rng() % 13);
      for (auto& c : counts)
        c = rng() % 3 == 0 ? 0 : rng() % 100000;
      row.function_counts["fdo:fdo.local." + std::to_string(f)] = std::move(counts);
    }
    // The other hosts' rows, then this host's first flush: every timed flush
    // adds to rows that exist.
    for (int h = 1; h <= hosts; ++h) {
      FeedbackRow r = row;
      r.host = h == hosts ? "this-host" : "host-" + std::to_string(h);
      std::vector<FeedbackRow> one = {std::move(r)};
      must(store.append_feedback(one), "seed");
    }
    row.host = "this-host";
    std::vector<double> ms;
    for (int r = 0; r < rounds; ++r) {
      std::vector<FeedbackRow> one = {row};
      auto t0 = Clock::now();
      must(store.append_feedback(one), "append_feedback");
      ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
    const double m = median(ms);
    std::printf("feedback flush: one row of %d functions, %d host(s) in the store; %d rounds\n",
                functions, hosts, rounds);
    std::printf("  append_feedback (median)   %8.2f ms   %6.2f us per function\n", m,
                1000.0 * m / functions);
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return 0;
}
