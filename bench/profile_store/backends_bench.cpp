// backends_bench: the profile store's SQLite and PostgreSQL back ends side by
// side, one run: profile-version writes/s (one per transaction), feedback
// rows/s (batches of 50; also with 16 functions' counts per row), current(pk) lookups/s
// (PostgreSQL: served by the notification-coherent cache) and lookup_profile_key(ik)/s (a query on
// both), with PostgreSQL / SQLite ratios. Medians over interleaved rounds.
//
// Usage: backends_bench [--rounds N] [--pg URI]
//   Without --pg it starts a throwaway PostgreSQL server like the tests do
//   (tests/support/postgres_server.h: Unix socket, fsync=off); SQLite runs in
//   a temp dir with synchronous=NORMAL, so neither side pays for fsync. Give --pg for a real server
//   (then writes pay its commit cost).
#include "common/stats.h"
#include "fdo/profile_store/profile_store.h"
#include "support/postgres_server.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

using namespace fdo;
using fdo::bench::median;
using namespace fdo::profile_store;

namespace {

double rate(std::size_t ops, const std::function<void()>& f) {
  auto t0 = std::chrono::steady_clock::now();
  f();
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return static_cast<double>(ops) / s;
}

template <class T> T must(Expected<T> r, const char* what) {
  if (!r) {
    std::fprintf(stderr, "backends_bench: %s: %s\n", what, r.error().describe().c_str());
    std::exit(1);
  }
  return std::move(*r);
}

ProfileDoc doc_for(std::uint64_t n) {
  ProfileDoc d;
  d.knobs.opt_level = 3;
  for (int f = 0; f < 20; ++f)
    d.functions["fn" + std::to_string(f)] = {
        0x1000u + static_cast<std::uint64_t>(f), {n, 2, 3, 4, 5, 6, 7, 8}, {}, ""};
  return d;
}

std::string key(const char* prefix, std::size_t i) {
  char buf[80];
  std::snprintf(buf, sizeof buf, "%s%058zx", prefix, i);
  return buf;
}

struct Figures {
  std::vector<double> writes, feedback, feedback_functions, current, lookup;
};

void round(ProfileStore& s, Figures& f, int r) {
  constexpr std::size_t kWrites = 200, kRows = 1000, kLookups = 5000;
  const std::string pk = key("pk", static_cast<std::size_t>(r));
  std::int64_t v = 0;
  f.writes.push_back(rate(kWrites, [&] {
    for (std::size_t i = 0; i < kWrites; ++i)
      v = must(s.write(pk, v, doc_for(i), {}), "write");
  }));
  std::vector<FeedbackRow> batch(50);
  for (std::size_t i = 0; i < batch.size(); ++i) {
    batch[i].pk = pk;
    batch[i].version = v;
    batch[i].stages = 1;
    batch[i].host = "host-" + std::to_string(i % 3);
    batch[i].counters = {{"cycles", 100}};
  }
  f.feedback.push_back(rate(kRows, [&] {
    for (std::size_t i = 0; i < kRows / batch.size(); ++i)
      must(s.append_feedback(batch), "append_feedback");
  }));
  // Rows as a stage of an instrumented program sends them: counts per function.
  for (std::size_t i = 0; i < batch.size(); ++i)
    for (int fn = 0; fn < 16; ++fn) {
      std::string name = std::to_string(fn); // (not "f" + ...: GCC 12's bogus -Wrestrict)
      batch[i].function_counts[name.insert(0, 1, 'f')] = {i, 2 * i, 3 * i, 4 * i};
    }
  f.feedback_functions.push_back(rate(kRows, [&] {
    for (std::size_t i = 0; i < kRows / batch.size(); ++i)
      must(s.append_feedback(batch), "append_feedback");
  }));
  must(s.put_profile_key(key("ik", static_cast<std::size_t>(r)), pk), "put_profile_key");
  must(s.current(pk), "current"); // warm
  f.current.push_back(rate(kLookups, [&] {
    for (std::size_t i = 0; i < kLookups; ++i)
      must(s.current(pk), "current");
  }));
  f.lookup.push_back(rate(kLookups, [&] {
    for (std::size_t i = 0; i < kLookups; ++i)
      must(s.lookup_profile_key(key("ik", static_cast<std::size_t>(r))), "lookup_profile_key");
  }));
}

} // namespace

int main(int argc, char** argv) {
  int rounds = 3;
  std::string pg_uri;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--rounds") && i + 1 < argc)
      rounds = std::max(1, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--pg") && i + 1 < argc)
      pg_uri = argv[++i];
    else {
      std::fprintf(stderr, "usage: backends_bench [--rounds N] [--pg URI]\n");
      return 2;
    }
  }
  std::unique_ptr<fdo::test_support::PostgresServer> server;
  if (pg_uri.empty()) {
    if (!fdo::test_support::PostgresServer::available()) {
      std::printf("backends_bench: %s\n", fdo::test_support::PostgresServer::skip_reason().c_str());
      return 0;
    }
    server = std::make_unique<fdo::test_support::PostgresServer>();
    pg_uri = "postgresql:///postgres?host=" + server->socket_dir() + "&user=postgres";
  }
  fdo::test_support::TempDir dir("fdo-bench");
  Options so;
  so.synchronous = Synchronous::normal;
  ProfileStore sqlite = must(ProfileStore::open(dir.file("profiles.db"), so), "open sqlite");
  ProfileStore pg = must(ProfileStore::open(pg_uri), "open postgresql");
  Figures fs, fp;
  for (int r = 0; r < rounds; ++r) {
    round(sqlite, fs, r);
    round(pg, fp, r);
  }
  std::printf("backends_bench: %d rounds (medians); PostgreSQL at %s\n", rounds,
              pg.location().c_str());
  std::printf("%-44s %12s %12s %8s\n", "", "SQLite", "PostgreSQL", "PG/SQL");
  auto line = [](const char* what, const std::vector<double>& a, const std::vector<double>& b) {
    std::printf("%-44s %12.0f %12.0f %8.3f\n", what, median(a), median(b), median(b) / median(a));
  };
  line("profile-version writes/s (1 per tx)", fs.writes, fp.writes);
  line("feedback rows/s (50 per batch, 3 hosts)", fs.feedback, fp.feedback);
  line("  the same, 16 functions' counts per row", fs.feedback_functions, fp.feedback_functions);
  line("current(pk)/s (PG: notification cache)", fs.current, fp.current);
  line("lookup_profile_key(ik)/s (a query)", fs.lookup, fp.lookup);
  return 0;
}
