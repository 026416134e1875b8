// StoreFallback (store_fallback.h) over a fake store that fails on demand:
// what is served while the store is down, the spool's order, idempotent
// replay, the cap, a restart with a spool, and conflicts on replay.
#include "fakes.h"
#include "fdo/daemon/store_fallback.h"
#include "fdo/profile_store/sqlite.h"
#include "support/temp_dir.h"

#include <catch2/catch.hpp>
#include <future>
#include <thread>

using namespace fdo;
using namespace fdo::daemon;
using namespace fdo::daemon::testing;
using fdo::test_support::TempDir;
namespace ps = fdo::profile_store;

namespace {

// All three interfaces over FakeFeedbackStore / FakeIndex and two maps.
// `down` makes every call fail with Errc::unavailable; `lose_replies` applies
// the next N writes and then fails them with unavailable (a connection lost
// after the commit: the caller cannot tell).
class FlakyStore final : public cache::KeyStore, public FeedbackStore, public ProgramIndex {
public:
  std::atomic<bool> down{false};
  std::atomic<int> lose_replies{0};
  FakeFeedbackStore fb;
  FakeIndex index;
  std::mutex mu;
  std::map<std::string, std::string> pks, vks;
  std::atomic<int> calls{0};

  Error unavailable() const {
    return make_error(Errc::unavailable, "cannot reach postgresql://fdo@db:5432/fdo");
  }
  bool fail() {
    ++calls;
    return down.load();
  }
  template <class T> Expected<T> after_write(Expected<T> r) {
    if (r && lose_replies > 0) {
      --lose_replies;
      return unavailable();
    }
    return r;
  }
  Status after_write(Status st) {
    if (st && lose_replies > 0) {
      --lose_replies;
      return unavailable();
    }
    return st;
  }

  Expected<std::optional<std::string>> lookup_profile_key(const std::string& ik) override {
    if (fail()) return unavailable();
    std::lock_guard lk(mu);
    if (auto it = pks.find(ik); it != pks.end()) return std::optional<std::string>(it->second);
    return std::optional<std::string>();
  }
  Status put_profile_key(const std::string& ik, const std::string& pk) override {
    if (fail()) return unavailable();
    std::lock_guard lk(mu);
    pks[ik] = pk;
    return ok();
  }
  Expected<std::optional<std::string>> lookup_virtual_key(const std::string& ck) override {
    if (fail()) return unavailable();
    std::lock_guard lk(mu);
    if (auto it = vks.find(ck); it != vks.end()) return std::optional<std::string>(it->second);
    return std::optional<std::string>();
  }
  Status put_virtual_key(const std::string& ck, const std::string& vk) override {
    if (fail()) return unavailable();
    std::lock_guard lk(mu);
    vks[ck] = vk;
    return ok();
  }
  Expected<cache::ProfileRef> current_profile(const std::string& pk) override {
    if (fail()) return unavailable();
    return cache::no_profile(pk); // the decorator reads profiles through current()
  }

  Expected<ps::SharedProfile> current(std::string_view pk) override {
    if (fail()) return unavailable();
    return fb.current(pk);
  }
  Expected<std::optional<ps::StoredProfile>> version(std::string_view pk,
                                                     std::int64_t version) override {
    if (fail()) return unavailable();
    return fb.version(pk, version);
  }
  Expected<std::optional<ps::FeedbackTotals>> feedback(std::string_view pk,
                                                       std::int64_t version) override {
    if (fail()) return unavailable();
    return fb.feedback(pk, version);
  }
  Expected<std::int64_t> write(std::string_view pk, std::int64_t expected, const ProfileDoc& doc,
                               const ps::WriteInfo& info) override {
    if (fail()) return unavailable();
    return after_write(fb.write(pk, expected, doc, info));
  }
  Status append_feedback(std::span<const ps::FeedbackRow> rows,
                         std::string_view batch_id) override {
    if (fail()) return unavailable();
    return after_write(fb.append_feedback(rows, batch_id));
  }

  Status add(const ps::ProgramInfo& info) override {
    if (fail()) return unavailable();
    return index.add(info);
  }
  Expected<std::optional<ps::ProgramInfo>> find(std::string_view ik) override {
    if (fail()) return unavailable();
    return index.find(ik);
  }
  Status touch(std::string_view ik) override {
    if (fail()) return unavailable();
    return index.touch(ik);
  }
  Expected<std::int64_t> count_owned(std::int64_t owner) override {
    if (fail()) return unavailable();
    return index.count_owned(owner);
  }
};

ProfileDoc doc_with(std::uint64_t count) {
  ProfileDoc d;
  FunctionProfile f;
  f.cfg_hash = 7;
  f.counts = {count, 1};
  d.functions["main"] = f;
  return d;
}

ps::WriteInfo info_from(const std::string& host) {
  ps::WriteInfo i;
  i.reason = "test";
  i.owner = 1000;
  i.host = host;
  return i;
}

ps::FeedbackRow row(const std::string& pk, std::int64_t version, std::uint64_t count) {
  ps::FeedbackRow r;
  r.pk = pk;
  r.version = version;
  r.stages = 1;
  r.exec_ns = 100;
  r.host = "host-a";
  r.function_counts["main"] = {count, 1};
  return r;
}

StoreFallbackOptions options(const TempDir& dir, std::uint64_t cap = 1u << 20) {
  StoreFallbackOptions o;
  o.kind = "postgresql";
  o.location = "postgresql://fdo:***@db:5432/fdo";
  o.spool_path = (dir.path() / "spool.db").string();
  o.spool_max_bytes = cap;
  o.replayer = StoreFallbackOptions::Replayer::manual;
  return o;
}

std::unique_ptr<StoreFallback> make(FlakyStore& s, StoreFallbackOptions o) {
  auto f = StoreFallback::create(s, s, s, std::move(o));
  REQUIRE(f.has_value());
  return std::move(*f);
}

const std::string kPk(64, 'a');

} // namespace

TEST_CASE("store fallback: passes through while the store answers", "[fleet][fallback]") {
  TempDir dir;
  FlakyStore s;
  auto f = make(s, options(dir));
  REQUIRE(f->health().state == StoreState::connecting);
  REQUIRE(f->keys().put_profile_key("ik1", kPk));
  REQUIRE(f->keys().lookup_profile_key("ik1").value() == kPk);
  REQUIRE(f->feedback().write(kPk, 0, doc_with(5), info_from("a")).value() == 1);
  REQUIRE(f->feedback().current(kPk).value()->version == 1);
  REQUIRE(f->health().state == StoreState::up);
  REQUIRE(f->health().spool.entries() == 0);
  REQUIRE(s.fb.keys[kPk].versions.size() == 1);
}

TEST_CASE("store fallback: down, serves last known values and spools writes in order",
          "[fleet][fallback]") {
  TempDir dir;
  FlakyStore s;
  auto f = make(s, options(dir));
  REQUIRE(f->keys().put_profile_key("ik1", kPk));
  REQUIRE(f->feedback().write(kPk, 0, doc_with(5), info_from("a")).value() == 1);
  REQUIRE(f->feedback().current(kPk).value()->version == 1);
  REQUIRE(f->programs().add(ps::ProgramInfo{"ik1", "prog", 10, 1000, 0, 0, "", kPk}));

  s.down = true;
  // Reads: the last good values.
  REQUIRE(f->keys().lookup_profile_key("ik1").value() == kPk);
  REQUIRE(f->health().state == StoreState::down);
  REQUIRE(f->health().last_error.find("cannot reach") != std::string::npos);
  REQUIRE(f->keys().current_profile(kPk).value().version == 1);
  REQUIRE(f->programs().find("ik1").value()->name == "prog");
  REQUIRE(f->keys().lookup_profile_key("unknown").value() == std::nullopt);
  // Down: no store I/O at all for reads or writes.
  const int calls = s.calls;
  REQUIRE(f->keys().lookup_profile_key("ik1").value() == kPk);

  // Writes are acknowledged from the spool: rows of v1, the rewrite to v2
  // (provisional, served at once), rows of v2, a new mapping.
  std::vector<ps::FeedbackRow> v1 = {row(kPk, 1, 10), row(kPk, 1, 20)};
  REQUIRE(f->feedback().append_feedback(v1, {}));
  REQUIRE(f->feedback().write(kPk, 1, doc_with(30), info_from("a")).value() == 2);
  REQUIRE(f->feedback().current(kPk).value()->version == 2);
  REQUIRE(f->keys().current_profile(kPk).value().digest == profile_digest(doc_with(30)));
  std::vector<ps::FeedbackRow> v2 = {row(kPk, 2, 7)};
  REQUIRE(f->feedback().append_feedback(v2, {}));
  REQUIRE(f->keys().put_profile_key("ik2", kPk));
  REQUIRE(f->keys().lookup_profile_key("ik2").value() == kPk);
  REQUIRE(f->programs().touch("ik1"));
  REQUIRE(s.calls == calls);
  StoreHealth h = f->health();
  REQUIRE(h.spool.feedback_batches == 2);
  REQUIRE(h.spool.profile_writes == 1);
  REQUIRE(h.spool.other == 1);
  REQUIRE(s.fb.keys[kPk].versions.size() == 1);
  REQUIRE(s.fb.appended.empty());

  // Still down: replay fails, nothing lost.
  REQUIRE_FALSE(f->replay_now());
  REQUIRE(f->health().spool.entries() == 4);

  s.down = false;
  REQUIRE(f->replay_now());
  h = f->health();
  REQUIRE(h.state == StoreState::up);
  REQUIRE(h.spool.entries() == 0);
  REQUIRE(h.replayed_batches == 2);
  REQUIRE(h.replayed_writes == 1);
  REQUIRE(h.replayed_other == 1);
  // In order: v1's rows, then v2 written over v1, then v2's rows.
  REQUIRE(s.fb.keys[kPk].versions.size() == 2);
  REQUIRE(s.fb.keys[kPk].versions.back().digest == profile_digest(doc_with(30)));
  REQUIRE(s.fb.appended.size() == 3);
  REQUIRE(s.fb.appended[0].host == "host-a"); // the host survives the spool
  REQUIRE(s.fb.totals[{kPk, 1}].stages == 2);
  REQUIRE(s.fb.totals[{kPk, 1}].function_counts["main"][0] == 30);
  REQUIRE(s.fb.totals[{kPk, 2}].stages == 1);
  REQUIRE(s.pks["ik2"] == kPk);
  // Up again: writes go straight to the store.
  REQUIRE(f->feedback().write(kPk, 2, doc_with(40), info_from("a")).value() == 3);
  REQUIRE(s.fb.keys[kPk].versions.size() == 3);
}

TEST_CASE("store fallback: reads are answered while a spool append waits for the disk",
          "[fleet][fallback]") {
  TempDir dir;
  FlakyStore s;
  auto f = make(s, options(dir));
  REQUIRE(f->keys().put_profile_key("ik1", kPk));
  REQUIRE(f->feedback().write(kPk, 0, doc_with(5), info_from("a")).value() == 1);
  s.down = true;
  REQUIRE(f->keys().lookup_profile_key("ik1").value() == kPk); // now down
  // Another connection holds the spool file's write lock: an append waits.
  auto other =
      ps::sqlite::Connection::open(options(dir).spool_path, ps::sqlite::Access::read_write);
  REQUIRE(other);
  REQUIRE(other->exec("BEGIN IMMEDIATE"));
  std::vector<ps::FeedbackRow> rows = {row(kPk, 1, 10)};
  auto append =
      std::async(std::launch::async, [&] { return f->feedback().append_feedback(rows, {}); });
  CHECK(append.wait_for(std::chrono::milliseconds(300)) == std::future_status::timeout);
  // Meanwhile reads come from memory at once (with the state lock held
  // across the append they would wait for it).
  auto reads = std::async(std::launch::async, [&] {
    return f->keys().lookup_profile_key("ik1").value() == kPk &&
           f->feedback().current(kPk).value()->version == 1 &&
           f->health().state == StoreState::down;
  });
  const bool answered = reads.wait_for(std::chrono::seconds(5)) == std::future_status::ready;
  CHECK(append.wait_for(std::chrono::milliseconds(0)) == std::future_status::timeout);
  REQUIRE(other->exec("ROLLBACK"));
  REQUIRE(answered);
  CHECK(reads.get());
  REQUIRE(append.get());
  CHECK(f->health().spool.feedback_batches == 1);
  // Replayed in order once the store is back.
  s.down = false;
  REQUIRE(f->replay_now());
  CHECK(s.fb.totals[{kPk, 1}].stages == 1);
}

TEST_CASE("store fallback: a reply lost after the commit never duplicates on replay",
          "[fleet][fallback]") {
  TempDir dir;
  FlakyStore s;
  auto f = make(s, options(dir));
  REQUIRE(f->feedback().write(kPk, 0, doc_with(1), info_from("a")).value() == 1);
  // The store applies the batch, then the connection drops before the reply.
  s.lose_replies = 1;
  std::vector<ps::FeedbackRow> rows = {row(kPk, 1, 10)};
  REQUIRE(f->feedback().append_feedback(rows, {}));
  REQUIRE(f->health().state == StoreState::down);
  REQUIRE(f->health().spool.feedback_batches == 1);
  // Same for a profile write: committed, reply lost.
  s.down = false;
  REQUIRE(s.fb.totals[{kPk, 1}].stages == 1);
  REQUIRE(f->replay_now()); // the batch id was applied already: nothing added
  REQUIRE(s.fb.totals[{kPk, 1}].stages == 1);
  REQUIRE(s.fb.appended.size() == 1);

  s.lose_replies = 1;
  REQUIRE(f->feedback().write(kPk, 1, doc_with(2), info_from("a")).value() == 2);
  REQUIRE(f->health().spool.profile_writes == 1);
  std::vector<ps::FeedbackRow> v2 = {row(kPk, 2, 5)};
  REQUIRE(f->feedback().append_feedback(v2, {}));
  REQUIRE(f->replay_now());
  StoreHealth h = f->health();
  // Recognised as this host's own write (same version, digest and host), not a conflict.
  REQUIRE(h.dropped_conflicts == 0);
  REQUIRE(h.replayed_writes == 1);
  REQUIRE(s.fb.keys[kPk].versions.size() == 2);
  REQUIRE(s.fb.totals[{kPk, 2}].stages == 1);
}

TEST_CASE("store fallback: a program registered while down reaches the store on replay",
          "[fleet][fallback]") {
  TempDir dir;
  FlakyStore s;
  auto f = make(s, options(dir));
  s.down = true; // from the start: fdod started while the store was down
  REQUIRE(f->programs().add(ps::ProgramInfo{"ik9", "late", 10, 1000, 0, 0, "hash9", kPk}));
  REQUIRE(f->keys().put_profile_key("ik9", kPk));
  REQUIRE(f->programs().find("ik9").value()->name == "late");
  REQUIRE(f->health().spool.other == 2);
  REQUIRE(s.index.rows.empty());

  s.down = false;
  REQUIRE(f->replay_now());
  StoreHealth h = f->health();
  REQUIRE(h.state == StoreState::up);
  REQUIRE(h.spool.entries() == 0);
  REQUIRE(h.replayed_other == 2);
  REQUIRE(h.dropped_refused == 0);
  REQUIRE(s.index.rows.at("ik9").name == "late");
  REQUIRE(s.index.rows.at("ik9").program_hash == "hash9");
  REQUIRE(s.pks.at("ik9") == kPk);
}

TEST_CASE("store fallback: a write overtaken by another writer is dropped with its rows",
          "[fleet][fallback]") {
  TempDir dir;
  FlakyStore s;
  auto f = make(s, options(dir));
  REQUIRE(f->feedback().write(kPk, 0, doc_with(1), info_from("a")).value() == 1);
  s.down = true;
  std::vector<ps::FeedbackRow> evidence = {row(kPk, 1, 10)};
  REQUIRE(f->feedback().append_feedback(evidence, {}));
  REQUIRE(f->feedback().write(kPk, 1, doc_with(2), info_from("a")).value() == 2);
  std::vector<ps::FeedbackRow> on_ours = {row(kPk, 2, 3)};
  REQUIRE(f->feedback().append_feedback(on_ours, {}));
  REQUIRE(f->feedback().write(kPk, 2, doc_with(3), info_from("a")).value() == 3);

  // Meanwhile host b rewrites v1 -> v2 in the shared store.
  s.down = false;
  REQUIRE(s.fb.write(kPk, 1, doc_with(99), info_from("b")).value() == 2);

  REQUIRE(f->replay_now());
  StoreHealth h = f->health();
  REQUIRE(h.spool.entries() == 0);
  REQUIRE(h.dropped_conflicts == 2); // ours v2, and v3 built on it
  REQUIRE(h.dropped_rows == 1);      // the row of our v2 (never to exist)
  REQUIRE(s.fb.keys[kPk].versions.size() == 2);
  REQUIRE(s.fb.keys[kPk].versions.back().host == "b");
  // The evidence arrived: the next rewrite on any host counts it.
  REQUIRE(s.fb.totals[{kPk, 1}].stages == 1);
  REQUIRE(s.fb.totals.count({kPk, 2}) == 0);
  // And the current profile is the fleet's again, also from memory.
  REQUIRE(f->feedback().current(kPk).value()->host == "b");
  s.down = true;
  REQUIRE(f->feedback().current(kPk).value()->host == "b");
}

TEST_CASE("store fallback: the spool cap drops the oldest profile writes first, counted",
          "[fleet][fallback]") {
  TempDir dir;
  FlakyStore s;
  // Room for a few entries: a profile write body is a few hundred bytes.
  auto f = make(s, options(dir, 1400));
  s.down = true;
  std::vector<ps::FeedbackRow> rows = {row(kPk, 1, 10)};
  REQUIRE(f->feedback().append_feedback(rows, {}));
  const std::string other(64, 'b');
  REQUIRE(f->feedback().write(kPk, 0, doc_with(1), info_from("a")).value() == 1);
  REQUIRE(f->feedback().write(other, 0, doc_with(2), info_from("a")).value() == 1);
  std::vector<ps::FeedbackRow> later = {row(kPk, 1, 4)};
  for (int i = 0; i < 4; ++i)
    REQUIRE(f->feedback().append_feedback(later, {}));
  StoreHealth h = f->health();
  REQUIRE(h.spool.bytes <= 1400);
  REQUIRE(h.dropped_cap_writes >= 1);
  REQUIRE(h.dropped_cap_feedback == 0);
  REQUIRE(h.spool.feedback_batches == 5);
  // The dropped write of kPk (the oldest) is no longer served.
  REQUIRE(f->feedback().current(kPk).value() == nullptr);

  s.down = false;
  REQUIRE(f->replay_now());
  // kPk's v1 was dropped: its rows are dropped (counted), never misattributed.
  REQUIRE(s.fb.keys.count(kPk) == 0);
  REQUIRE(f->health().dropped_rows == 5);
  REQUIRE(s.fb.totals.count({kPk, 1}) == 0);

  // An entry larger than the whole spool is refused, nothing dropped.
  s.down = true;
  ProfileDoc huge;
  for (int i = 0; i < 200; ++i)
    huge.functions[std::to_string(i) + "f"] = doc_with(1).functions["main"];
  auto refused = f->feedback().write(kPk, 0, huge, info_from("a"));
  REQUIRE_FALSE(refused.has_value());
  REQUIRE(refused.error().code() == Errc::resource_exhausted);
}

TEST_CASE("store fallback: a restart with a non-empty spool replays it", "[fleet][fallback]") {
  TempDir dir;
  FlakyStore s;
  {
    auto f = make(s, options(dir));
    REQUIRE(f->feedback().write(kPk, 0, doc_with(1), info_from("a")).value() == 1);
    s.down = true;
    std::vector<ps::FeedbackRow> rows = {row(kPk, 1, 10)};
    REQUIRE(f->feedback().append_feedback(rows, {}));
    REQUIRE(f->feedback().write(kPk, 1, doc_with(2), info_from("a")).value() == 2);
    REQUIRE(f->keys().put_virtual_key("ck", "vk"));
  } // fdod stops with the store still down
  s.down = false;
  auto f = make(s, options(dir));
  // Everything waits behind the spool; the spooled profile is served meanwhile.
  StoreHealth h = f->health();
  REQUIRE(h.state == StoreState::down);
  REQUIRE(h.spool.entries() == 3);
  REQUIRE(f->feedback().current(kPk).value()->version == 2);
  REQUIRE(f->replay_now());
  REQUIRE(f->health().state == StoreState::up);
  REQUIRE(s.fb.keys[kPk].versions.size() == 2);
  REQUIRE(s.fb.totals[{kPk, 1}].stages == 1);
  REQUIRE(s.vks["ck"] == "vk");
  // What was replayed is remembered: served if the store goes away again.
  s.down = true;
  REQUIRE(f->feedback().current(kPk).value()->version == 2);
}

TEST_CASE("store fallback: the replayer thread brings the store back with backoff",
          "[fleet][fallback]") {
  TempDir dir;
  FlakyStore s;
  StoreFallbackOptions o = options(dir);
  o.replayer = StoreFallbackOptions::Replayer::thread;
  o.backoff_min = std::chrono::milliseconds(10);
  o.backoff_max = std::chrono::milliseconds(40);
  auto f = make(s, o);
  s.down = true;
  std::vector<ps::FeedbackRow> rows = {row(kPk, 1, 10)};
  REQUIRE(f->feedback().append_feedback(rows, {}));
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  const std::uint64_t attempts = f->health().replay_attempts;
  REQUIRE(attempts >= 2);
  REQUIRE(attempts <= 10); // backing off, not spinning
  s.down = false;
  for (int i = 0; i < 200 && f->health().state != StoreState::up; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  REQUIRE(f->health().state == StoreState::up);
  REQUIRE(s.fb.appended.size() == 1);
}

TEST_CASE("store spool: refuses a file that is not a spool", "[fleet][fallback]") {
  TempDir dir;
  const std::string path = (dir.path() / "spool.db").string();
  {
    FILE* f = std::fopen(path.c_str(), "w");
    std::fputs("not a database, just text that is long enough to be a header..............\n"
               "................................................................................",
               f);
    std::fclose(f);
  }
  auto spool = StoreSpool::open(path, 1u << 20);
  REQUIRE_FALSE(spool.has_value());
  REQUIRE(spool.error().message().find(path) != std::string::npos);
}

TEST_CASE("store fallback: a retained version while down is the remembered current one or "
          "unavailable",
          "[fleet][fallback]") {
  TempDir dir;
  FlakyStore s;
  auto f = make(s, options(dir));
  REQUIRE(f->feedback().write(kPk, 0, doc_with(5), info_from("a")).value() == 1);
  REQUIRE(f->feedback().write(kPk, 1, doc_with(6), info_from("a")).value() == 2);
  REQUIRE(f->feedback().current(kPk).value()->version == 2);
  REQUIRE(f->feedback().version(kPk, 1).value()->version == 1); // straight from the store

  s.down = true;
  auto cur = f->feedback().version(kPk, 2);
  REQUIRE(cur.has_value());
  REQUIRE(cur->has_value());
  CHECK((*cur)->version == 2);
  // Not remembered: the outage, not "pruned", so the guard does not fall back silently.
  auto old = f->feedback().version(kPk, 1);
  REQUIRE_FALSE(old.has_value());
  CHECK(old.error().code() == fdo::Errc::unavailable);
  CHECK(f->health().state == StoreState::down);
}
