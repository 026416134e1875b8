// Reads are not serialised behind writes: a read completes while a write of
// the same store waits for the database lock, and threads reading and
// writing one store at once always see consistent, committed data. Runs
// against both back ends (backends.h).
#include "backends.h"
#include "fdo/profile_store/profile_store.h"
#include "test_util.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <thread>

using namespace fdo;
using namespace fdo::profile_store;
using fdo::profile_store::test::RawConnection;
using fdo::profile_store::test::sample_doc;
using Clock = std::chrono::steady_clock;

namespace {

ProfileStore open_store(const std::string& path, Options options = {}) {
  auto s = ProfileStore::open(path, options);
  if (!s) FAIL(s.error().describe());
  return std::move(*s);
}

WriteInfo info(std::int64_t owner = 1000) {
  WriteInfo i;
  i.reason = "concurrency test";
  i.owner = owner;
  return i;
}

// Joins a thread when the test leaves its scope, also through a failed
// REQUIRE (a joinable std::thread would otherwise terminate the process),
// after `release` has let it finish.
class JoinOnExit {
public:
  JoinOnExit(std::thread& thread, std::function<void()> release)
      : thread_(thread), release_(std::move(release)) {}
  ~JoinOnExit() {
    release_();
    if (thread_.joinable()) thread_.join();
  }
  JoinOnExit(const JoinOnExit&) = delete;
  JoinOnExit& operator=(const JoinOnExit&) = delete;

private:
  std::thread& thread_;
  std::function<void()> release_;
};

const std::string kPk(64, 'a');
const std::string kIk(64, 'i');

// What thread B read while thread A's write was stuck.
struct Snapshot {
  std::optional<StoredProfile> current;
  std::optional<StoredProfile> version1;
  std::size_t history = 0;
  std::vector<ProfileSummary> list;
  std::optional<std::string> pk_of_ik;
  std::optional<std::string> vk;
  std::optional<FeedbackTotals> feedback;
  std::optional<ProgramInfo> program;
  std::vector<ProgramInfo> programs;
  std::optional<std::int64_t> owner;
  bool exported = false;
  std::string errors;
};

void note(std::string& errors, const char* what, const Error& e) {
  errors += std::string(what) + ": " + e.describe() + "\n";
}

Snapshot read_everything(const ProfileStore& store) {
  Snapshot s;
  if (auto r = store.current(kPk))
    s.current = *r;
  else
    note(s.errors, "current", r.error());
  if (auto r = store.get(kPk, 1))
    s.version1 = *r;
  else
    note(s.errors, "get", r.error());
  if (auto r = store.history(kPk))
    s.history = r->size();
  else
    note(s.errors, "history", r.error());
  if (auto r = store.list())
    s.list = *r;
  else
    note(s.errors, "list", r.error());
  if (auto r = store.lookup_profile_key(kIk))
    s.pk_of_ik = *r;
  else
    note(s.errors, "lookup_profile_key", r.error());
  if (auto r = store.lookup_virtual_key("ck"))
    s.vk = *r;
  else
    note(s.errors, "lookup_virtual_key", r.error());
  if (auto r = store.feedback(kPk, 1))
    s.feedback = *r;
  else
    note(s.errors, "feedback", r.error());
  if (auto r = store.program(kIk))
    s.program = *r;
  else
    note(s.errors, "program", r.error());
  if (auto r = store.programs())
    s.programs = *r;
  else
    note(s.errors, "programs", r.error());
  if (auto r = store.owner(kPk))
    s.owner = *r;
  else
    note(s.errors, "owner", r.error());
  std::vector<std::string> pks = {kPk};
  if (auto r = store.export_bundle(pks))
    s.exported = (*r)["profiles"].size() == 1;
  else
    note(s.errors, "export_bundle", r.error());
  return s;
}

// The committed state the test starts from, untouched by the uncommitted
// changes of the connection that holds the lock.
void check_committed(const Snapshot& s) {
  INFO(s.errors);
  CHECK(s.errors.empty());
  REQUIRE(s.current);
  CHECK(s.current->version == 1);
  CHECK(s.current->doc.functions.at("fn0").counts[0] == 1);
  CHECK_FALSE(s.current->pinned);
  REQUIRE(s.version1);
  CHECK(s.version1->digest == profile_digest(sample_doc(1)));
  CHECK(s.history == 1);
  REQUIRE(s.list.size() == 1);
  CHECK(s.list[0].version == 1);
  CHECK_FALSE(s.list[0].pinned);
  CHECK(s.pk_of_ik == kPk);
  CHECK(s.vk == "vk");
  REQUIRE(s.feedback);
  CHECK(s.feedback->stages == 2);
  CHECK(s.feedback->counters.at("cycles") == 500);
  REQUIRE(s.program);
  CHECK(s.program->name == "prog");
  CHECK(s.programs.size() == 1);
  CHECK(s.owner == 1000);
  CHECK(s.exported);
}

} // namespace

TEST_CASE("reads complete while a write waits for the database lock",
          "[profile_store][concurrency]") {
  STORE_DIR(dir);
  const std::string path = dir.file("p.db");
  Options o;
  // Far longer than the reads may take: a read that queued behind the stuck
  // write would only finish after it gives up.
  o.busy_timeout = std::chrono::seconds(30);
  auto store = open_store(path, o);
  REQUIRE(store.write(kPk, 0, sample_doc(1), info()));
  REQUIRE(store.put_profile_key(kIk, kPk));
  REQUIRE(store.put_virtual_key("ck", "vk", kIk));
  REQUIRE(store.register_program({kIk, "prog", 10, 1000, 0, 0}));
  std::vector<FeedbackRow> rows = {{kPk, 1, 2, 100, {{"cycles", 500}}, {}}};
  REQUIRE(store.append_feedback(rows));

  // Another connection holds the lock (SQLite: the database's write lock;
  // PostgreSQL: the rows' locks), with changes it has not committed.
  RawConnection raw(dir.kind(), path);
  raw.begin();
  raw.exec("UPDATE profiles SET pinned = true");
  raw.exec("UPDATE profile_keys SET pk = 'uncommitted'");
  raw.exec("UPDATE feedback SET stages = 999");
  raw.exec("UPDATE programs SET name = 'uncommitted'");

  // Thread A: a store write, stuck in busy_timeout while holding the store's
  // write side.
  std::atomic<bool> a_started{false};
  std::atomic<bool> a_done{false};
  std::optional<Expected<std::int64_t>> written;
  std::thread a([&] {
    a_started = true;
    written.emplace(store.write(kPk, 1, sample_doc(2), info()));
    a_done = true;
  });
  JoinOnExit join_a(a, [&] {
    if (raw.in_transaction()) (void)raw.rollback();
  });
  while (!a_started)
    std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  REQUIRE_FALSE(a_done.load());

  // Thread B: every kind of read, while A waits.
  Snapshot seen;
  auto t0 = Clock::now();
  std::thread b([&] { seen = read_everything(store); });
  b.join();
  auto took = Clock::now() - t0;
  CHECK(took < std::chrono::seconds(10));
  // A was waiting the whole time: B's reads did not queue behind it.
  CHECK_FALSE(a_done.load());
  check_committed(seen);

  // A read-only store (fdoctl) reads the same while the write is stuck.
  Options ro;
  ro.mode = OpenMode::read_only;
  auto reader = open_store(path, ro);
  check_committed(read_everything(reader));
  CHECK_FALSE(a_done.load());

  // The lock goes away: A's write goes through on top of the committed state.
  REQUIRE(raw.rollback());
  a.join();
  REQUIRE(written);
  REQUIRE(written->has_value());
  CHECK(**written == 2);
  auto cur = store.current(kPk);
  REQUIRE(cur);
  CHECK((*cur)->version == 2);
  // The other store sees it at once on SQLite; on PostgreSQL once the change
  // notification reaches its cache (docs/profile_store.md, "Bound").
  auto reader_version = [&] { return (*reader.current(kPk))->version; };
  for (auto until = Clock::now() + std::chrono::seconds(10);
       reader_version() != 2 && Clock::now() < until;)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK(reader_version() == 2);
}

TEST_CASE("readers and writers sharing one store see consistent committed data",
          "[profile_store][concurrency]") {
  STORE_DIR(dir);
  Options o;
  o.retention = 1000;
  o.read_connections = 3; // fewer than the readers: some wait for a connection
  auto store = open_store(dir.file("p.db"), o);
  const std::vector<std::string> keys = {std::string(64, '1'), std::string(64, '2'),
                                         std::string(64, '3')};
  constexpr int kWriters = 3;
  constexpr int kReaders = 4;
  constexpr int kWritesEach = 25;

  std::atomic<int> writers_left{kWriters};
  std::atomic<int> failures{0};
  std::mutex log_mu;
  std::string log;
  auto fail = [&](const std::string& what) {
    failures++;
    std::lock_guard lock(log_mu);
    log += what + "\n";
  };
  // Versions written and feedback stages appended per (key, version).
  std::mutex tally_mu;
  std::map<std::string, int> writes_per_key;
  std::map<std::pair<std::string, std::int64_t>, std::uint64_t> stages;

  // A feedback row whose parts agree with each other: a reader that sees
  // totals from two different batches sees them disagree.
  auto row = [](const std::string& pk, std::int64_t v) {
    return FeedbackRow{pk, v, 1, 10, {{"c", 3}}, {{"f", {1, 2}}}};
  };

  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      std::mt19937_64 rng(static_cast<std::uint64_t>(w) + 1);
      int done = 0;
      while (done < kWritesEach && failures == 0) {
        const std::string& pk = keys[rng() % keys.size()];
        auto cur = store.current(pk);
        if (!cur) return fail("writer current: " + cur.error().describe());
        std::int64_t v = *cur ? (*cur)->version : 0;
        // The document encodes its own version, so readers can check it.
        auto nv = store.write(pk, v, sample_doc(static_cast<std::uint64_t>(v + 1)), info());
        if (!nv) {
          if (nv.error().code() == Errc::conflict) continue;
          return fail("write: " + nv.error().describe());
        }
        if (*nv != v + 1) return fail("write returned version " + std::to_string(*nv));
        done++;
        std::int64_t older = 1 + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(*nv));
        std::vector<FeedbackRow> batch = {row(pk, *nv), row(pk, older), row(pk, older)};
        auto appended = store.append_feedback(batch);
        if (!appended) return fail("append_feedback: " + appended.error().describe());
        std::lock_guard lock(tally_mu);
        writes_per_key[pk]++;
        stages[{pk, *nv}] += 1;
        stages[{pk, older}] += 2;
      }
      writers_left--;
    });
  }
  for (int r = 0; r < kReaders; ++r) {
    threads.emplace_back([&, r] {
      std::mt19937_64 rng(static_cast<std::uint64_t>(r) + 100);
      std::map<std::string, std::int64_t> last_seen;
      while (writers_left > 0 && failures == 0) {
        const std::string& pk = keys[rng() % keys.size()];
        auto cur = store.current(pk);
        if (!cur) return fail("current: " + cur.error().describe());
        if (!*cur) continue;
        const StoredProfile& p = **cur;
        if (p.doc.functions.at("fn0").counts[0] != static_cast<std::uint64_t>(p.version))
          return fail("current of " + pk + " version " + std::to_string(p.version) +
                      " has another version's document");
        // Commits become visible in order: never an older version than before.
        if (p.version < last_seen[pk])
          return fail("current went back from " + std::to_string(last_seen[pk]) + " to " +
                      std::to_string(p.version));
        last_seen[pk] = p.version;
        auto hist = store.history(pk);
        if (!hist) return fail("history: " + hist.error().describe());
        if (static_cast<std::int64_t>(hist->size()) < p.version)
          return fail("history shorter than a version seen before");
        for (std::size_t i = 0; i < hist->size(); ++i)
          if ((*hist)[i].version != static_cast<std::int64_t>(i + 1) ||
              (*hist)[i].doc.functions.at("fn0").counts[0] != i + 1)
            return fail("history of " + pk + " is not versions 1..n with their own documents");
        std::int64_t v =
            1 + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(p.version));
        auto fb = store.feedback(pk, v);
        if (!fb) return fail("feedback: " + fb.error().describe());
        if (*fb) {
          const FeedbackTotals& t = **fb;
          bool agree =
              t.exec_ns == 10 * t.stages && t.counters.at("c") == 3 * t.stages &&
              t.function_counts.at("f") == std::vector<std::uint64_t>{t.stages, 2 * t.stages};
          if (!agree) return fail("feedback totals of one read come from different batches");
        }
        auto listed = store.list();
        if (!listed) return fail("list: " + listed.error().describe());
        for (const ProfileSummary& s : *listed)
          if (s.version != s.last_version) return fail("list row mixes two versions");
      }
    });
  }
  for (auto& t : threads)
    t.join();
  INFO(log);
  REQUIRE(failures == 0);

  for (const std::string& pk : keys) {
    auto h = store.history(pk);
    int writes = writes_per_key[pk];
    if (writes == 0) {
      CHECK_FALSE(h);
      continue;
    }
    REQUIRE(h);
    CHECK(h->size() == static_cast<std::size_t>(writes));
    CHECK((*store.current(pk))->version == writes);
  }
  for (const auto& [key, expected] : stages) {
    auto fb = store.feedback(key.first, key.second);
    REQUIRE(fb);
    REQUIRE(fb->has_value());
    CHECK((*fb)->stages == expected);
    CHECK((*fb)->exec_ns == 10 * expected);
  }
  if (dir.kind() == StoreKind::sqlite) CHECK(store.integrity_check());
}

TEST_CASE("retention changes at runtime while other threads write",
          "[profile_store][concurrency]") {
  STORE_DIR(dir);
  Options o;
  o.retention = 50;
  auto store = open_store(dir.file("p.db"), o);
  std::atomic<bool> stop{false};
  std::atomic<int> refused{0};
  std::thread changer([&] {
    for (int n = 0; !stop; ++n) {
      if (!store.set_retention(n % 2 == 0 ? 4 : 8)) refused++;
      std::this_thread::yield();
    }
  });
  {
    JoinOnExit join_changer(changer, [&] { stop = true; });
    for (int v = 0; v < 40; ++v)
      REQUIRE(store.write(kPk, v, sample_doc(static_cast<std::uint64_t>(v + 1)), info()));
  }
  CHECK(refused == 0);
  // Every write pruned with 4 or 8, whichever it read.
  auto h = store.history(kPk);
  REQUIRE(h);
  CHECK(h->size() >= 4);
  CHECK(h->size() <= 8);
  CHECK(h->back().version == 40);
  int in_force = store.options().retention;
  CHECK((in_force == 4 || in_force == 8));
}
