// row_layout_bench: what the layout of the profile_versions table costs a big
// program's profile write, side by side in one run (schema v7, docs/
// profile_store.md "Schema"):
//   without_rowid  schema v1-v6: a WITHOUT ROWID table (an index b-tree),
//                  the document the fourth of twelve columns
//   rowid          schema v7: a rowid table, the document the last column
// Each round writes one version of the same key to each layout (a document
// of --kb KiB of JSON-like text, then the retention DELETE and the commit,
// synchronous=FULL in WAL mode, as the store does) in alternating order, so
// drift on a shared host hits both alike; --gap-ms waits between rounds, as
// stages do (memory the allocator returned meanwhile is faulted in again).
// Prints the median of the statements (insert + delete) and of the whole
// transaction per layout, and their ratio.
//
// Usage: profile_store_row_layout_bench [--kb N] [--rounds N] [--gap-ms N] [--retention N]
#include "common/stats.h"
#include "fdo/profile_store/sqlite.h"
#include "support/temp_dir.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

using namespace fdo;
using fdo::bench::median;
using namespace fdo::profile_store;

namespace {

using Clock = std::chrono::steady_clock;

double ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

struct Layout {
  const char* name;
  const char* table; // CREATE TABLE ... (columns named as the store's)
  sqlite::Connection db;
  std::vector<double> statements, total;
};

[[noreturn]] void die(const Error& e) {
  std::fprintf(stderr, "row_layout_bench: %s\n", e.describe().c_str());
  std::exit(1);
}

void check(const Status& s) {
  if (!s) die(s.error());
}

void write_version(Layout& l, std::int64_t version, const std::string& body, int retention) {
  const std::string pk(64, 'a');
  auto t0 = Clock::now();
  check(l.db.exec("BEGIN IMMEDIATE"));
  auto ins = l.db.cached("INSERT INTO profile_versions (pk, version, digest, body, functions, "
                         "source, reason, author, host, stage, program, created_at) VALUES (?1, "
                         "?2, ?3, ?4, 1000, 'feedback', 'bench', 0, 'host', ?2, ?5, 0)");
  if (!ins) die(ins.error());
  (*ins)
      ->bind(1, pk)
      .bind(2, version)
      .bind(3, std::string(64, 'd'))
      .bind(4, body)
      .bind(5, std::string(64, 'p'));
  check((*ins)->run());
  auto del = l.db.cached("DELETE FROM profile_versions WHERE pk = ?1 AND version <= ?2");
  if (!del) die(del.error());
  (*del)->bind(1, pk).bind(2, version - retention);
  check((*del)->run());
  auto t1 = Clock::now();
  check(l.db.exec("COMMIT"));
  auto t2 = Clock::now();
  l.statements.push_back(ms(t0, t1));
  l.total.push_back(ms(t0, t2));
}

} // namespace

int main(int argc, char** argv) {
  int kb = 400, rounds = 40, gap_ms = 0, retention = 8;
  for (int i = 1; i + 1 < argc; i += 2) {
    const int v = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--kb"))
      kb = v;
    else if (!std::strcmp(argv[i], "--rounds"))
      rounds = v;
    else if (!std::strcmp(argv[i], "--gap-ms"))
      gap_ms = v;
    else if (!std::strcmp(argv[i], "--retention"))
      retention = v;
    else {
      std::fprintf(stderr, "usage: %s [--kb N] [--rounds N] [--gap-ms N] [--retention N]\n",
                   argv[0]);
      return 2;
    }
  }
  if (kb < 1 || rounds < 4 || gap_ms < 0 || retention < 1) {
    std::fprintf(stderr, "row_layout_bench: --kb >= 1, --rounds >= 4, --retention >= 1\n");
    return 2;
  }
  // Declared before the layouts: their databases close before it goes.
  const test_support::TempDir dir("fdo-row-layout");
  Layout layouts[] = {
      {"without_rowid",
       "CREATE TABLE profile_versions (pk TEXT NOT NULL, version INTEGER NOT NULL, digest TEXT "
       "NOT NULL, body TEXT NOT NULL, functions INTEGER NOT NULL, source TEXT NOT NULL, reason "
       "TEXT NOT NULL, author INTEGER NOT NULL, host TEXT NOT NULL, stage INTEGER NOT NULL, "
       "program TEXT NOT NULL, created_at INTEGER NOT NULL, PRIMARY KEY (pk, version)) STRICT, "
       "WITHOUT ROWID",
       {},
       {},
       {}},
      {"rowid",
       "CREATE TABLE profile_versions (pk TEXT NOT NULL, version INTEGER NOT NULL, digest TEXT "
       "NOT NULL, functions INTEGER NOT NULL, source TEXT NOT NULL, reason TEXT NOT NULL, "
       "author INTEGER NOT NULL, host TEXT NOT NULL, stage INTEGER NOT NULL, program TEXT NOT "
       "NULL, created_at INTEGER NOT NULL, body TEXT NOT NULL, PRIMARY KEY (pk, version)) "
       "STRICT",
       {},
       {},
       {}},
  };
  for (Layout& l : layouts) {
    auto db = sqlite::Connection::open(dir.file(std::string(l.name) + ".db"),
                                       sqlite::Access::read_write_create);
    if (!db) die(db.error());
    l.db = std::move(*db);
    check(l.db.exec("PRAGMA journal_mode = WAL"));
    check(l.db.exec("PRAGMA synchronous = FULL"));
    check(l.db.exec(l.table));
  }
  // JSON-like text of digits and punctuation: not compressible by anything
  // SQLite does (it does nothing), like a document's counters.
  std::mt19937_64 rng(7);
  std::string body;
  while (body.size() < static_cast<std::size_t>(kb) * 1024)
    body += "\"fdo.local." + std::to_string(rng() % 100000) + "\":[" + std::to_string(rng()) + "," +
            std::to_string(rng() % 1000) + "],";
  const int warmup = 2;
  for (int r = 0; r < rounds + warmup; ++r) {
    body[static_cast<std::size_t>(r) % body.size()] = 'x'; // each version differs
    for (int k = 0; k < 2; ++k) {
      Layout& l = layouts[(r + k) % 2];
      write_version(l, r + 1, body, retention);
    }
    if (gap_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(gap_ms));
  }
  std::printf("row_layout_bench: %d KiB documents, %d rounds, %d ms apart, retention %d\n", kb,
              rounds, gap_ms, retention);
  double stmt[2], tot[2];
  for (int i = 0; i < 2; ++i) {
    Layout& l = layouts[i];
    l.statements.erase(l.statements.begin(), l.statements.begin() + warmup);
    l.total.erase(l.total.begin(), l.total.begin() + warmup);
    stmt[i] = median(l.statements);
    tot[i] = median(l.total);
    std::printf("  %-14s insert + delete %7.3f ms   with commit %7.3f ms\n", l.name, stmt[i],
                tot[i]);
  }
  std::printf("  rowid / without_rowid: statements %.2fx, transaction %.2fx\n", stmt[1] / stmt[0],
              tot[1] / tot[0]);
  return 0;
}
