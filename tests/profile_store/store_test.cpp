// Unit tests of the profile API: versioned writes, optimistic concurrency,
// pin/unpin, reset, remove, retention, listing, read-only mode, threads.
#include "backends.h"
#include "fdo/profile_store/json_view.h"
#include "fdo/profile_store/profile_store.h"
#include "fdo/profile_store/sqlite.h"
#include "test_util.h"

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <thread>

using namespace fdo;
using namespace fdo::profile_store;
using fdo::profile_store::test::sample_doc;
using fdo::profile_store::test::TempDir;

namespace {

WriteInfo info(WriteSource source = WriteSource::feedback, std::int64_t owner = 1000) {
  WriteInfo i;
  i.source = source;
  i.reason = "test " + std::string(to_string(source));
  i.owner = owner;
  i.host = "host-1";
  i.stage = 7;
  i.program = std::string(64, 'c');
  return i;
}

ProfileStore open_store(const std::string& path, Options options = {}) {
  auto s = ProfileStore::open(path, options);
  if (!s) FAIL(s.error().describe());
  return std::move(*s);
}

const std::string kPk = std::string(64, 'a');
const std::string kPk2 = std::string(64, 'b');

} // namespace

TEST_CASE("write creates version 1 and current returns it with stamped provenance",
          "[profile_store]") {
  STORE_DIR(dir);
  auto store = open_store(dir.file("p.db"));
  auto none = store.current(kPk);
  REQUIRE(none);
  CHECK_FALSE(none->has_value());

  std::int64_t before = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
  auto v = store.write(kPk, 0, sample_doc(5), info());
  REQUIRE(v);
  CHECK(*v == 1);

  auto cur = store.current(kPk);
  REQUIRE(cur);
  REQUIRE(cur->has_value());
  const StoredProfile& p = **cur;
  CHECK(p.pk == kPk);
  CHECK(p.version == 1);
  CHECK(p.digest == profile_digest(sample_doc(5)));
  CHECK(p.doc.functions == sample_doc(5).functions);
  CHECK(p.doc.knobs == sample_doc(5).knobs);
  CHECK(p.doc.hardware == sample_doc(5).hardware);
  CHECK(p.body == canonical_json(to_json(p.doc)));
  CHECK(p.owner == 1000);
  CHECK(p.author == 1000);
  CHECK(p.source == WriteSource::feedback);
  CHECK(p.reason == "test feedback");
  CHECK(p.host == "host-1");
  CHECK(p.stage == 7);
  CHECK(p.program == std::string(64, 'c'));
  CHECK_FALSE(p.pinned);
  CHECK(p.created_at >= before);
  CHECK(p.created_at < before + 60'000);
  // The body's provenance says the same as the columns.
  CHECK(p.doc.provenance.reason == "test feedback");
  CHECK(p.doc.provenance.host == "host-1");
  CHECK(p.doc.provenance.stage == 7);
  CHECK(p.doc.provenance.created_at.size() == 24);
  CHECK(p.doc.provenance.created_at.back() == 'Z');
}

TEST_CASE("optimistic concurrency: stale expected version is a conflict - nothing written",
          "[profile_store]") {
  STORE_DIR(dir);
  auto store = open_store(dir.file("p.db"));
  REQUIRE(store.write(kPk, 0, sample_doc(1), info()));
  REQUIRE(*store.write(kPk, 1, sample_doc(2), info()) == 2);

  auto stale = store.write(kPk, 1, sample_doc(99), info());
  REQUIRE_FALSE(stale);
  CHECK(stale.error().code() == Errc::conflict);
  CHECK(stale.error().message().find("version 2") != std::string::npos);
  auto again_zero = store.write(kPk, 0, sample_doc(99), info());
  REQUIRE_FALSE(again_zero);
  CHECK(again_zero.error().code() == Errc::conflict);

  auto missing = store.write(kPk2, 3, sample_doc(1), info());
  REQUIRE_FALSE(missing);
  CHECK(missing.error().code() == Errc::conflict);
  CHECK_FALSE(store.current(kPk2)->has_value());

  auto negative = store.write(kPk, -1, sample_doc(1), info());
  REQUIRE_FALSE(negative);
  CHECK(negative.error().code() == Errc::invalid_argument);

  auto cur = store.current(kPk);
  REQUIRE(cur);
  CHECK((*cur)->version == 2);
  CHECK((*cur)->doc.functions.at("fn0").counts[0] == 2);
  CHECK(store.history(kPk)->size() == 2);
}

TEST_CASE("get and history return every version oldest first", "[profile_store]") {
  STORE_DIR(dir);
  auto store = open_store(dir.file("p.db"));
  for (int i = 0; i < 5; ++i)
    REQUIRE(store.write(kPk, i, sample_doc(100 + i), info()));
  auto h = store.history(kPk);
  REQUIRE(h);
  REQUIRE(h->size() == 5);
  for (int i = 0; i < 5; ++i) {
    CHECK((*h)[i].version == i + 1);
    CHECK((*h)[i].doc.functions.at("fn0").counts[0] == static_cast<std::uint64_t>(100 + i));
  }
  auto g = store.get(kPk, 3);
  REQUIRE(g);
  REQUIRE(g->has_value());
  CHECK((*g)->doc.functions.at("fn0").counts[0] == 102);
  CHECK_FALSE(store.get(kPk, 6)->has_value());
  CHECK_FALSE(store.get(kPk2, 1)->has_value());
  auto unknown = store.history(kPk2);
  REQUIRE_FALSE(unknown);
  CHECK(unknown.error().code() == Errc::not_found);
}

TEST_CASE("invalid documents and keys are rejected and nothing is written", "[profile_store]") {
  STORE_DIR(dir);
  auto store = open_store(dir.file("p.db"));
  ProfileDoc bad = sample_doc(1);
  bad.knobs.opt_level = 9;
  auto r = store.write(kPk, 0, bad, info());
  REQUIRE_FALSE(r);
  CHECK(r.error().code() == Errc::invalid_argument);
  CHECK(r.error().message().find("knobs.opt_level") != std::string::npos);

  ProfileDoc bad_utf8 = sample_doc(1);
  bad_utf8.functions["\xff\xfe"] = {};
  auto u = store.write(kPk, 0, bad_utf8, info());
  REQUIRE_FALSE(u);
  CHECK(u.error().code() == Errc::invalid_argument);

  auto empty_key = store.write("", 0, sample_doc(1), info());
  REQUIRE_FALSE(empty_key);
  CHECK(empty_key.error().code() == Errc::invalid_argument);
  CHECK_FALSE(store.current(kPk)->has_value());
  CHECK(store.list()->empty());
}

TEST_CASE("pin blocks feedback writes - operator and import writes are allowed",
          "[profile_store]") {
  STORE_DIR(dir);
  auto store = open_store(dir.file("p.db"));
  REQUIRE(store.write(kPk, 0, sample_doc(1), info()));
  REQUIRE(store.pin(kPk));
  CHECK((*store.current(kPk))->pinned);

  auto fb = store.write(kPk, 1, sample_doc(2), info(WriteSource::feedback));
  REQUIRE_FALSE(fb);
  CHECK(fb.error().code() == Errc::pinned);
  // Pinned wins over a stale version: retrying could never help.
  auto fb_stale = store.write(kPk, 0, sample_doc(2), info(WriteSource::feedback));
  REQUIRE_FALSE(fb_stale);
  CHECK(fb_stale.error().code() == Errc::pinned);
  CHECK((*store.current(kPk))->version == 1);

  auto op = store.write(kPk, 1, sample_doc(3), info(WriteSource::operator_));
  REQUIRE(op);
  CHECK(*op == 2);
  auto imp = store.write(kPk, 2, sample_doc(4), info(WriteSource::import));
  REQUIRE(imp);
  CHECK(*imp == 3);
  CHECK((*store.current(kPk))->pinned);
  CHECK((*store.current(kPk))->source == WriteSource::import);

  REQUIRE(store.unpin(kPk));
  CHECK_FALSE((*store.current(kPk))->pinned);
  REQUIRE(store.write(kPk, 3, sample_doc(5), info(WriteSource::feedback)));

  auto unknown = store.pin(kPk2);
  REQUIRE_FALSE(unknown);
  CHECK(unknown.error().code() == Errc::not_found);
}

TEST_CASE("reset goes back to no profile - keeps history and never reuses a version",
          "[profile_store]") {
  STORE_DIR(dir);
  auto store = open_store(dir.file("p.db"));
  REQUIRE(store.write(kPk, 0, sample_doc(1), info()));
  REQUIRE(store.write(kPk, 1, sample_doc(2), info()));
  REQUIRE(store.reset(kPk));

  CHECK_FALSE(store.current(kPk)->has_value());
  CHECK(store.history(kPk)->size() == 2);
  CHECK(store.get(kPk, 2)->has_value());
  auto summary = store.list();
  REQUIRE(summary);
  REQUIRE(summary->size() == 1);
  CHECK((*summary)[0].version == 0);
  CHECK((*summary)[0].last_version == 2);
  CHECK((*summary)[0].digest == no_profile_digest());

  auto stale = store.write(kPk, 2, sample_doc(3), info());
  REQUIRE_FALSE(stale);
  CHECK(stale.error().code() == Errc::conflict);
  auto v = store.write(kPk, 0, sample_doc(3), info());
  REQUIRE(v);
  CHECK(*v == 3);
  CHECK((*store.current(kPk))->doc.functions.at("fn0").counts[0] == 3);
  CHECK(store.history(kPk)->size() == 3);

  auto unknown = store.reset(kPk2);
  REQUIRE_FALSE(unknown);
  CHECK(unknown.error().code() == Errc::not_found);
}

TEST_CASE("remove deletes the profile - its history - feedback and mappings", "[profile_store]") {
  STORE_DIR(dir);
  auto store = open_store(dir.file("p.db"));
  const std::string ik1(64, '1'), ik2(64, '2'), ik_other(64, '3');
  REQUIRE(store.write(kPk, 0, sample_doc(1), info()));
  REQUIRE(store.write(kPk, 1, sample_doc(2), info()));
  REQUIRE(store.write(kPk2, 0, sample_doc(9), info()));
  REQUIRE(store.put_profile_key(ik1, kPk));
  REQUIRE(store.put_profile_key(ik2, kPk));
  REQUIRE(store.put_profile_key(ik_other, kPk2));
  REQUIRE(store.put_virtual_key("ck1", "vk1", ik1));
  REQUIRE(store.put_virtual_key("ck2", "vk2", ik2));
  REQUIRE(store.put_virtual_key("ck3", "vk3", ik_other));
  std::vector<FeedbackRow> rows = {
      {kPk, 1, 1, 10, {}, {}}, {kPk, 2, 1, 10, {}, {}}, {kPk2, 1, 1, 10, {}, {}}};
  REQUIRE(store.append_feedback(rows));

  auto r = store.remove(kPk);
  REQUIRE(r);
  CHECK(r->versions == 2);
  CHECK(r->profile_keys == 2);
  CHECK(r->virtual_keys == 2);
  CHECK(r->feedback_rows == 2);

  CHECK_FALSE(store.current(kPk)->has_value());
  CHECK(store.history(kPk).error().code() == Errc::not_found);
  CHECK_FALSE(store.lookup_profile_key(ik1)->has_value());
  CHECK_FALSE(store.lookup_virtual_key("ck2")->has_value());
  CHECK_FALSE(store.feedback(kPk, 1)->has_value());
  // The other profile is untouched.
  CHECK(**store.lookup_profile_key(ik_other) == kPk2);
  CHECK(**store.lookup_virtual_key("ck3") == "vk3");
  CHECK(store.feedback(kPk2, 1)->has_value());
  if (store.kind() == StoreKind::sqlite) CHECK(store.integrity_check());

  auto again = store.remove(kPk);
  REQUIRE_FALSE(again);
  CHECK(again.error().code() == Errc::not_found);
  // A removed key starts over.
  CHECK(*store.write(kPk, 0, sample_doc(1), info()) == 1);
}

TEST_CASE("remove of a key that only has mappings drops the mappings", "[profile_store]") {
  STORE_DIR(dir);
  auto store = open_store(dir.file("p.db"));
  REQUIRE(store.put_profile_key(std::string(64, '1'), kPk));
  auto r = store.remove(kPk);
  REQUIRE(r);
  CHECK(r->profile_keys == 1);
  CHECK(r->versions == 0);
  CHECK_FALSE(store.lookup_profile_key(std::string(64, '1'))->has_value());
}

TEST_CASE("retention keeps the newest N versions and prunes their feedback", "[profile_store]") {
  STORE_DIR(dir);
  Options o;
  o.retention = 3;
  auto store = open_store(dir.file("p.db"), o);
  for (int i = 0; i < 7; ++i) {
    REQUIRE(store.write(kPk, i, sample_doc(i + 1), info()));
    std::vector<FeedbackRow> fb = {{kPk, i + 1, 1, 5, {}, {}}};
    REQUIRE(store.append_feedback(fb));
  }
  auto h = store.history(kPk);
  REQUIRE(h);
  REQUIRE(h->size() == 3);
  CHECK((*h)[0].version == 5);
  CHECK((*h)[2].version == 7);
  CHECK_FALSE(store.get(kPk, 4)->has_value());
  CHECK_FALSE(store.feedback(kPk, 4)->has_value());
  CHECK(store.feedback(kPk, 5)->has_value());

  // Feedback that arrives for a pruned version is reported, not stored.
  std::vector<FeedbackRow> late = {{kPk, 2, 1, 1, {}, {}}, {kPk, 7, 1, 1, {}, {}}};
  auto res = store.append_feedback(late);
  REQUIRE(res);
  CHECK(res->applied == 1);
  REQUIRE(res->skipped.size() == 1);
  CHECK(res->skipped[0] == std::make_pair(kPk, std::int64_t{2}));
  CHECK((*store.feedback(kPk, 7))->stages == 2);

  // Retention below 1 is refused.
  Options zero;
  zero.retention = 0;
  auto bad = ProfileStore::open(dir.file("q.db"), zero);
  REQUIRE_FALSE(bad);
  CHECK(bad.error().code() == Errc::invalid_argument);
}

TEST_CASE("set_retention applies from the next write and refuses less than 1", "[profile_store]") {
  STORE_DIR(dir);
  auto store = open_store(dir.file("p.db"));
  CHECK(store.options().retention == 50);
  for (int i = 0; i < 6; ++i)
    REQUIRE(store.write(kPk, i, sample_doc(i + 1), info()));
  REQUIRE(store.set_retention(2));
  CHECK(store.options().retention == 2);
  CHECK(store.history(kPk)->size() == 6); // nothing pruned until the key is written
  REQUIRE(store.write(kPk, 6, sample_doc(7), info()));
  auto h = store.history(kPk);
  REQUIRE(h);
  REQUIRE(h->size() == 2);
  CHECK(h->front().version == 6);

  for (int bad : {0, -1}) {
    auto s = store.set_retention(bad);
    REQUIRE_FALSE(s);
    CHECK(s.error().code() == Errc::invalid_argument);
  }
  CHECK(store.options().retention == 2);
  REQUIRE(store.set_retention(10));
  REQUIRE(store.write(kPk, 7, sample_doc(8), info()));
  CHECK(store.history(kPk)->size() == 3);
}

TEST_CASE("read_connections must be at least 1", "[profile_store]") {
  STORE_DIR(dir);
  Options o;
  o.read_connections = 0;
  auto bad = ProfileStore::open(dir.file("p.db"), o);
  REQUIRE_FALSE(bad);
  CHECK(bad.error().code() == Errc::invalid_argument);
  o.read_connections = 1;
  auto one = ProfileStore::open(dir.file("p.db"), o);
  REQUIRE(one);
  REQUIRE(one->write(kPk, 0, sample_doc(1), info()));
  // One connection, lent and returned by every read.
  for (int i = 0; i < 3; ++i)
    CHECK((*one->current(kPk))->version == 1);
}

TEST_CASE("list summarises profiles and filters by owner", "[profile_store]") {
  STORE_DIR(dir);
  auto store = open_store(dir.file("p.db"));
  REQUIRE(store.write(kPk, 0, sample_doc(1, 3), info(WriteSource::feedback, 1000)));
  REQUIRE(store.write(kPk2, 0, sample_doc(1, 5), info(WriteSource::feedback, 2000)));
  // A later write by someone else does not change the owner.
  REQUIRE(store.write(kPk2, 1, sample_doc(2, 4), info(WriteSource::operator_, 0)));
  REQUIRE(store.pin(kPk2));

  auto all = store.list();
  REQUIRE(all);
  REQUIRE(all->size() == 2);
  const ProfileSummary& a = (*all)[0];
  const ProfileSummary& b = (*all)[1];
  CHECK(a.pk == kPk);
  CHECK(a.version == 1);
  CHECK(a.owner == 1000);
  CHECK(a.functions == 3);
  CHECK(a.digest == profile_digest(sample_doc(1, 3)));
  CHECK_FALSE(a.pinned);
  CHECK(b.pk == kPk2);
  CHECK(b.version == 2);
  CHECK(b.owner == 2000);
  CHECK(b.functions == 4);
  CHECK(b.pinned);
  CHECK(b.updated_at > 0);
  CHECK((*store.current(kPk2))->author == 0);

  auto mine = store.list(2000);
  REQUIRE(mine);
  REQUIRE(mine->size() == 1);
  CHECK((*mine)[0].pk == kPk2);
  CHECK(store.list(4242)->empty());
}

TEST_CASE("summary is the list row of one key", "[profile_store]") {
  STORE_DIR(dir);
  auto store = open_store(dir.file("p.db"));
  auto none = store.summary(kPk);
  REQUIRE(none);
  CHECK_FALSE(none->has_value());
  REQUIRE(store.write(kPk, 0, sample_doc(1, 3), info(WriteSource::feedback, 1000)));
  REQUIRE(store.write(kPk2, 0, sample_doc(2), info(WriteSource::feedback, 2000)));
  REQUIRE(store.pin(kPk));
  auto one = store.summary(kPk);
  REQUIRE(one);
  REQUIRE(one->has_value());
  const ProfileSummary& s = **one;
  auto all = store.list();
  REQUIRE(all);
  const ProfileSummary& listed = all->front();
  CHECK(s.pk == kPk);
  CHECK(s.version == 1);
  CHECK(s.pinned);
  CHECK(s.owner == 1000);
  CHECK(s.functions == 3);
  CHECK(s.digest == listed.digest);
  CHECK(s.updated_at == listed.updated_at);
  REQUIRE(store.reset(kPk));
  CHECK((*store.summary(kPk))->version == 0);
  CHECK((*store.summary(kPk))->digest == no_profile_digest());
  CHECK(store.summary("").error().code() == Errc::invalid_argument);
}

TEST_CASE("write_batch is all or nothing", "[profile_store]") {
  STORE_DIR(dir);
  auto store = open_store(dir.file("p.db"));
  REQUIRE(store.write(kPk2, 0, sample_doc(1), info()));
  std::vector<WriteRequest> ok_batch = {{kPk, 0, sample_doc(1), info()},
                                        {kPk, 1, sample_doc(2), info()},
                                        {kPk2, 1, sample_doc(3), info()}};
  auto v = store.write_batch(ok_batch);
  REQUIRE(v);
  CHECK(*v == std::vector<std::int64_t>{1, 2, 2});

  std::vector<WriteRequest> bad_batch = {{kPk, 2, sample_doc(10), info()},
                                         {kPk2, 1, sample_doc(11), info()}}; // stale
  auto bad = store.write_batch(bad_batch);
  REQUIRE_FALSE(bad);
  CHECK(bad.error().code() == Errc::conflict);
  CHECK(bad.error().message().find("batch write 2 of 2") != std::string::npos);
  CHECK((*store.current(kPk))->version == 2);
  CHECK(store.history(kPk)->size() == 2);
}

TEST_CASE("a read-only store reads and refuses every write", "[profile_store]") {
  STORE_DIR(dir);
  std::string path = dir.file("p.db");
  {
    auto store = open_store(path);
    REQUIRE(store.write(kPk, 0, sample_doc(1), info()));
    REQUIRE(store.put_profile_key("ik", kPk));
  }
  Options ro;
  ro.mode = OpenMode::read_only;
  auto store = open_store(path, ro);
  CHECK((*store.current(kPk))->version == 1);
  CHECK(**store.lookup_profile_key("ik") == kPk);
  CHECK(store.list()->size() == 1);
  auto expect_denied = [](const auto& r) {
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::permission_denied);
  };
  expect_denied(store.write(kPk, 1, sample_doc(2), info()));
  expect_denied(store.pin(kPk));
  expect_denied(store.reset(kPk));
  expect_denied(store.remove(kPk));
  expect_denied(store.put_profile_key("ik2", kPk));
  expect_denied(store.put_virtual_key("ck", "vk", "ik"));
  expect_denied(store.register_program({"ik", "n", 1, 1, 0, 0}));
  std::vector<FeedbackRow> rows = {{kPk, 1, 1, 1, {}, {}}};
  expect_denied(store.append_feedback(rows));
  CHECK((*store.current(kPk))->version == 1);

  // Read-only never creates a store: no file (SQLite), no schema in an
  // empty database (PostgreSQL), so a second look finds nothing either.
  for (int look = 0; look < 2; ++look) {
    auto missing = ProfileStore::open(dir.file("missing.db"), ro);
    REQUIRE_FALSE(missing);
    CHECK(missing.error().code() == Errc::not_found);
  }
  if (dir.kind() == StoreKind::sqlite) CHECK_FALSE(std::filesystem::exists(dir.file("missing.db")));
}

TEST_CASE("a store shared by threads serialises calls and loses no update", "[profile_store]") {
  STORE_DIR(dir);
  Options o;
  o.retention = 1000;
  auto store = open_store(dir.file("p.db"), o);
  constexpr int kThreads = 4;
  constexpr int kWritesEach = 40;
  std::atomic<int> conflicts{0};
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      int done = 0;
      while (done < kWritesEach) {
        auto cur = store.current(kPk);
        if (!cur) {
          failures++;
          return;
        }
        std::int64_t v = *cur ? (*cur)->version : 0;
        std::uint64_t count = *cur ? (*cur)->doc.functions.at("fn0").counts[0] : 0;
        auto w = store.write(kPk, v, sample_doc(count + 1), info());
        if (w) {
          done++;
        } else if (w.error().code() == Errc::conflict) {
          conflicts++;
        } else {
          failures++;
          return;
        }
        // Readers and other writers interleave with the writes.
        (void)store.list();
        (void)store.lookup_profile_key("ik" + std::to_string(t));
      }
    });
  }
  for (auto& th : threads)
    th.join();
  CHECK(failures == 0);
  auto cur = store.current(kPk);
  REQUIRE(cur);
  CHECK((*cur)->version == kThreads * kWritesEach);
  CHECK((*cur)->doc.functions.at("fn0").counts[0] ==
        static_cast<std::uint64_t>(kThreads * kWritesEach));
  CHECK(store.history(kPk)->size() == static_cast<size_t>(kThreads * kWritesEach));
  INFO("conflicts: " << conflicts.load());
}

TEST_CASE("write sources round-trip through their names", "[profile_store]") {
  for (WriteSource s : {WriteSource::feedback, WriteSource::operator_, WriteSource::import})
    CHECK(*parse_write_source(to_string(s)) == s);
  CHECK(to_string(WriteSource::operator_) == "operator");
  CHECK(parse_write_source("robot").error().code() == Errc::invalid_argument);
  CHECK(parse_write_source("robot").error().message().find("feedback, operator or import") !=
        std::string::npos);
}

TEST_CASE("import and export enums have one spelling each", "[profile_store]") {
  for (ImportAction a : {ImportAction::created, ImportAction::updated, ImportAction::unchanged,
                         ImportAction::skipped})
    CHECK(kImportActionNames.parse(to_string(a)) == a);
  CHECK(to_string(ImportAction::unchanged) == "unchanged");
  for (ImportConflict c : {ImportConflict::skip, ImportConflict::overwrite, ImportConflict::fail})
    CHECK(kImportConflictNames.parse(to_string(c)) == c);
  CHECK(kImportConflictNames.alternatives() == "skip, overwrite or fail");
  CHECK(to_string(ExportHistory::current_only) == "current_only");
  CHECK(kExportHistoryNames.parse("full") == ExportHistory::full);
  CHECK_FALSE(kExportHistoryNames.parse("some").has_value());
}

TEST_CASE("JSON views of summaries and versions carry the stored facts", "[profile_store]") {
  STORE_DIR(dir);
  auto store = open_store(dir.file("p.db"));
  REQUIRE(store.write(kPk, 0, sample_doc(3), info(WriteSource::operator_, 42)));
  REQUIRE(store.pin(kPk));
  auto list = store.list();
  REQUIRE(list);
  REQUIRE(list->size() == 1);
  nlohmann::json s = fdo::profile_store::summary_to_json(list->front());
  CHECK(s["profile_key"] == kPk);
  CHECK(s["version"] == 1);
  CHECK(s["pinned"] == true);
  CHECK(s["owner"] == 42);
  CHECK(s["functions"] == 2);
  CHECK(s["digest"] == profile_digest(sample_doc(3)));
  CHECK(s["updated_at"].get<std::string>().back() == 'Z');
  auto cur = store.current(kPk);
  REQUIRE(cur);
  REQUIRE(cur->has_value());
  nlohmann::json v = fdo::profile_store::version_to_json(**cur);
  CHECK(v["version"] == 1);
  CHECK(v["source"] == "operator");
  CHECK(v["reason"] == "test operator");
  CHECK(v["stage"] == 7);
  CHECK(v["host"] == "host-1");
  CHECK(v["created_at"].get<std::string>().size() == 24);
}

TEST_CASE("text bound in place is stored whole - the statement keeps no reference to it",
          "[profile_store][sqlite]") {
  TempDir dir;
  auto db = sqlite::Connection::open(dir.file("in_place.db"), sqlite::Access::read_write_create);
  REQUIRE(db);
  REQUIRE(db->exec("CREATE TABLE t (k INTEGER PRIMARY KEY, body TEXT NOT NULL)"));
  std::string sent;
  for (int i = 0; sent.size() < (400u << 10); ++i)
    sent += "{\"f" + std::to_string(i) + "\":[" + std::to_string(i * 7919) + "]}";
  const std::string expected = sent;
  {
    auto ins = db->cached("INSERT INTO t (k, body) VALUES (?1, ?2)");
    REQUIRE(ins);
    (*ins)->bind(1, std::int64_t{1}).bind_in_place(2, sent);
    REQUIRE((*ins)->run());
  }
  // The cached statement was reset and its bindings cleared: overwriting and
  // freeing the bytes changes nothing stored, and the statement runs again
  // with new values.
  std::fill(sent.begin(), sent.end(), 'x');
  sent.clear();
  sent.shrink_to_fit();
  {
    auto ins = db->cached("INSERT INTO t (k, body) VALUES (?1, ?2)");
    REQUIRE(ins);
    const std::string second = "second";
    (*ins)->bind(1, std::int64_t{2}).bind_in_place(2, second);
    REQUIRE((*ins)->run());
  }
  auto sel = db->prepare("SELECT body, typeof(body) FROM t ORDER BY k");
  REQUIRE(sel);
  REQUIRE(*sel->step());
  CHECK(sel->column_text(0) == expected);
  CHECK(sel->column_text(1) == "text");
  REQUIRE(*sel->step());
  CHECK(sel->column_text(0) == "second");
}
