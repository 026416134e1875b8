// Multi-process behaviour: crash safety under SIGKILL, two writer processes
// racing on one key, and read-only inspection while another process holds the
// write lock. Children are forked and report over pipes; they never touch
// Catch2 and leave with _exit. The race runs against both back ends
// (backends.h): two processes are two hosts on PostgreSQL.
#include "backends.h"
#include "fdo/profile_store/profile_store.h"
#include "fdo/profile_store/sqlite.h"
#include "test_util.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <set>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

using namespace fdo;
using namespace fdo::profile_store;
using fdo::profile_store::test::sample_doc;
using fdo::profile_store::test::TempDir;

namespace {

const std::string kPk(64, 'e');

struct Pipe {
  int read = -1;
  int write = -1;
  Pipe() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
    read = fds[0];
    write = fds[1];
  }
  ~Pipe() {
    close_read();
    close_write();
  }
  void close_read() {
    if (read >= 0) ::close(read);
    read = -1;
  }
  void close_write() {
    if (write >= 0) ::close(write);
    write = -1;
  }
};

// 16-byte records are written atomically (< PIPE_BUF), so a killed child
// never leaves half a record behind.
struct Record {
  std::int64_t kind;
  std::int64_t value;
};
enum : std::int64_t { kCommitted = 1, kConflicts = 2 };

void send(int fd, Record r) {
  const char* p = reinterpret_cast<const char*>(&r);
  size_t left = sizeof r;
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) _exit(90);
    p += n;
    left -= static_cast<size_t>(n);
  }
}

std::vector<Record> read_all(int fd) {
  std::vector<Record> out;
  std::string buf;
  char chunk[4096];
  while (true) {
    ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    buf.append(chunk, static_cast<size_t>(n));
  }
  for (size_t off = 0; off + sizeof(Record) <= buf.size(); off += sizeof(Record)) {
    Record r;
    std::memcpy(&r, buf.data() + off, sizeof r);
    out.push_back(r);
  }
  return out;
}

int wait_child(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

// Child body: write versions of kPk forever, reporting each one after its
// commit returned. Larger documents make each commit take longer, so kills
// land inside transactions more often.
[[noreturn]] void crash_writer(const std::string& path, int report_fd) {
  Options o;
  o.retention = 1'000'000;
  o.busy_timeout = std::chrono::milliseconds(30'000);
  auto store = ProfileStore::open(path, o);
  if (!store) {
    std::fprintf(stderr, "crash writer: open: %s\n", store.error().describe().c_str());
    _exit(2);
  }
  WriteInfo wi;
  wi.host = "crash-child";
  while (true) {
    auto cur = store->current(kPk);
    if (!cur) _exit(3);
    std::int64_t v = *cur ? (*cur)->version : 0;
    auto w = store->write(kPk, v, sample_doc(static_cast<std::uint64_t>(v + 1), 60), wi);
    if (!w) _exit(4);
    std::vector<FeedbackRow> fb = {{kPk, *w, 1, 100, {{"cycles", 7}}, {{"fn0", {1, 2, 3}}}}};
    send(report_fd, {kCommitted, *w});
    if (!store->append_feedback(fb)) _exit(5);
  }
}

// Child body: win `wins` optimistic updates of kPk, retrying on conflict.
[[noreturn]] void racing_writer(const std::string& path, int report_fd, const std::string& host,
                                int wins) {
  Options o;
  o.retention = 100'000;
  o.busy_timeout = std::chrono::milliseconds(60'000);
  auto store = ProfileStore::open(path, o);
  if (!store) {
    std::fprintf(stderr, "%s: open: %s\n", host.c_str(), store.error().describe().c_str());
    _exit(2);
  }
  WriteInfo wi;
  wi.host = host;
  std::int64_t conflicts = 0;
  int won = 0;
  while (won < wins) {
    auto cur = store->current(kPk);
    if (!cur) _exit(3);
    std::int64_t v = *cur ? (*cur)->version : 0;
    std::uint64_t n = *cur ? (*cur)->doc.functions.at("fn0").counts[0] : 0;
    // Give the other writer a chance to commit between our read and write.
    sched_yield();
    // Read-modify-write: the new document is derived from the one read, so
    // a lost update would show in the final count.
    auto w = store->write(kPk, v, sample_doc(n + 1), wi);
    if (w) {
      won++;
      send(report_fd, {kCommitted, *w});
    } else if (w.error().code() == Errc::conflict) {
      conflicts++;
    } else {
      _exit(4);
    }
  }
  send(report_fd, {kConflicts, conflicts});
  _exit(0);
}

} // namespace

TEST_CASE("crash safety: SIGKILL at random points never loses a committed version",
          "[profile_store][process][crash]") {
  TempDir dir;
  const std::string path = dir.file("crash.db");
  const std::uint64_t seed = 0x5eed0001;
  std::mt19937_64 rng(seed);
  INFO("seed " << seed);
  std::set<std::int64_t> reported;
  int kills_mid_run = 0;  // the child had committed at least one version
  int mid_run_rounds = 0; // rounds that waited for a committed version
  for (int round = 0; round < 50; ++round) {
    Pipe pipe;
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      pipe.close_read();
      crash_writer(path, pipe.write);
    }
    pipe.close_write();
    // A quarter of the kills land within the first milliseconds (during
    // open, WAL recovery or the first transaction). The rest wait for the
    // child's first committed version, so they hit a running writer however
    // loaded the machine is, then land at a random point of the write loop.
    bool early = rng() % 4 == 0;
    std::vector<Record> records;
    if (early) {
      std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 4));
    } else {
      mid_run_rounds++;
      pollfd pfd{pipe.read, POLLIN, 0};
      REQUIRE(::poll(&pfd, 1, 60'000) == 1);
      Record first{};
      REQUIRE(::read(pipe.read, &first, sizeof first) == static_cast<ssize_t>(sizeof first));
      records.push_back(first);
      std::this_thread::sleep_for(std::chrono::milliseconds(1 + rng() % 300));
    }
    ::kill(pid, SIGKILL);
    int status = wait_child(pid);
    // The child must have died from the kill, not from a failure of its own.
    REQUIRE(WIFSIGNALED(status));
    REQUIRE(WTERMSIG(status) == SIGKILL);
    for (const Record& r : read_all(pipe.read))
      records.push_back(r);
    if (!records.empty()) kills_mid_run++;
    for (const Record& r : records)
      reported.insert(r.value);

    INFO("round " << round << ", " << reported.size() << " versions reported so far");
    Options o;
    o.retention = 1'000'000;
    auto store = ProfileStore::open(path, o);
    REQUIRE(store);
    auto check = store->integrity_check();
    INFO((check ? std::string("ok") : check.error().describe()));
    REQUIRE(check);
    if (reported.empty()) continue;
    auto history = store->history(kPk);
    REQUIRE(history);
    std::set<std::int64_t> present;
    for (const StoredProfile& p : *history) {
      present.insert(p.version);
      // The body is the one written for this version.
      REQUIRE(p.doc.functions.at("fn0").counts[0] == static_cast<std::uint64_t>(p.version));
    }
    for (std::int64_t v : reported)
      REQUIRE(present.count(v) == 1);
    // Versions are contiguous and the current one is the newest.
    REQUIRE(*present.begin() == 1);
    REQUIRE(*present.rbegin() == static_cast<std::int64_t>(present.size()));
    auto cur = store->current(kPk);
    REQUIRE(cur);
    REQUIRE(cur->has_value());
    REQUIRE((*cur)->version == *present.rbegin());
  }
  WARN(reported.size() << " versions reported committed over 50 kills; " << kills_mid_run
                       << " kills interrupted a running writer");
  CHECK(mid_run_rounds > 25);
  CHECK(kills_mid_run >= mid_run_rounds);
  CHECK(reported.size() > 50);
}

TEST_CASE("two writer processes racing on one key lose no update",
          "[profile_store][process][race]") {
  STORE_DIR(dir);
  // Both children create the schema concurrently too (first-time migration race).
  const std::string path = dir.file("race.db");
  constexpr int kWinsEach = 500;
  Pipe pa, pb;
  pid_t a = ::fork();
  REQUIRE(a >= 0);
  if (a == 0) {
    pa.close_read();
    pb.close_read();
    racing_writer(path, pa.write, "writer-a", kWinsEach);
  }
  pid_t b = ::fork();
  REQUIRE(b >= 0);
  if (b == 0) {
    pa.close_read();
    pb.close_read();
    racing_writer(path, pb.write, "writer-b", kWinsEach);
  }
  pa.close_write();
  pb.close_write();
  // Each child's reports (500 x 16 bytes) fit in a pipe buffer, so reading
  // one after the other cannot deadlock.
  auto ra = read_all(pa.read);
  auto rb = read_all(pb.read);
  int sa = wait_child(a);
  int sb = wait_child(b);
  REQUIRE(WIFEXITED(sa));
  REQUIRE(WEXITSTATUS(sa) == 0);
  REQUIRE(WIFEXITED(sb));
  REQUIRE(WEXITSTATUS(sb) == 0);

  std::map<std::int64_t, std::string> writer_of;
  std::int64_t conflicts = 0;
  for (auto [records, host] : {std::pair{&ra, "writer-a"}, std::pair{&rb, "writer-b"}}) {
    int committed = 0;
    for (const Record& r : *records) {
      if (r.kind == kConflicts) {
        conflicts += r.value;
        continue;
      }
      committed++;
      // Each version was reported by exactly one writer.
      REQUIRE(writer_of.emplace(r.value, host).second);
    }
    CHECK(committed == kWinsEach);
  }
  WARN("conflicts reported to the writers and retried: " << conflicts);

  auto store = ProfileStore::open(path);
  REQUIRE(store);
  if (dir.kind() == StoreKind::sqlite) REQUIRE(store->integrity_check());
  auto cur = store->current(kPk);
  REQUIRE(cur);
  REQUIRE(cur->has_value());
  CHECK((*cur)->version == 2 * kWinsEach);
  // Every update was derived from the previous one: no lost update.
  CHECK((*cur)->doc.functions.at("fn0").counts[0] == 2u * kWinsEach);
  auto history = store->history(kPk);
  REQUIRE(history);
  REQUIRE(history->size() == 2u * kWinsEach);
  for (size_t i = 0; i < history->size(); ++i) {
    const StoredProfile& p = (*history)[i];
    REQUIRE(p.version == static_cast<std::int64_t>(i + 1));
    REQUIRE(p.doc.functions.at("fn0").counts[0] == i + 1);
    // The stored row is the one its reporter wrote, never overwritten by the other.
    REQUIRE(writer_of.at(p.version) == p.host);
  }
}

TEST_CASE("read-only open works while another process holds the write lock",
          "[profile_store][process]") {
  TempDir dir;
  const std::string path = dir.file("ro.db");
  {
    auto store = ProfileStore::open(path);
    REQUIRE(store);
    REQUIRE(store->write(kPk, 0, sample_doc(1), {}));
    REQUIRE(store->put_profile_key("ik", kPk));
  }
  Pipe locked, release;
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    locked.close_read();
    release.close_write();
    // Raw connection: take the write lock and change things without committing.
    auto db = sqlite::Connection::open(path, sqlite::Access::read_write);
    if (!db || !db->exec("BEGIN IMMEDIATE") || !db->exec("UPDATE profiles SET pinned = 1") ||
        !db->exec("UPDATE profile_keys SET pk = 'changed'"))
      _exit(2);
    send(locked.write, {kCommitted, 1});
    char c;
    while (::read(release.read, &c, 1) < 0 && errno == EINTR) {
    }
    if (!db->exec("COMMIT")) _exit(3);
    _exit(0);
  }
  locked.close_write();
  release.close_read();
  Record r{};
  REQUIRE(::read(locked.read, &r, sizeof r) == static_cast<ssize_t>(sizeof r));

  Options ro;
  ro.mode = OpenMode::read_only;
  ro.busy_timeout = std::chrono::milliseconds(200);
  auto reader = ProfileStore::open(path, ro);
  REQUIRE(reader);
  auto cur = reader->current(kPk);
  REQUIRE(cur);
  REQUIRE(cur->has_value());
  CHECK((*cur)->version == 1);
  CHECK_FALSE((*cur)->pinned); // the uncommitted change is invisible
  CHECK(**reader->lookup_profile_key("ik") == kPk);
  CHECK(reader->list()->size() == 1);
  CHECK(reader->history(kPk)->size() == 1);

  // A second writer waits for the busy timeout, then gets a clear error.
  Options rw;
  rw.busy_timeout = std::chrono::milliseconds(200);
  auto writer = ProfileStore::open(path, rw);
  REQUIRE(writer);
  auto w = writer->write(kPk, 1, sample_doc(2), {});
  REQUIRE_FALSE(w);
  CHECK(w.error().code() == Errc::timeout);
  CHECK(w.error().message().find(path) != std::string::npos);

  REQUIRE(::write(release.write, "x", 1) == 1);
  int status = wait_child(pid);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  // The next read sees the committed change.
  CHECK((*reader->current(kPk))->pinned);
  CHECK(**reader->lookup_profile_key("ik") == "changed");
}
