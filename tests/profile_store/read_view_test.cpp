// The in-process read view (ReadView::in_process, src/read_view.h): repeated
// reads reach neither the file nor a copy, and after every kind of change the
// view reads exactly what the file holds (checked against a store opened
// read-only on the same file, which has no view).
#include "fdo/profile_store/backup.h"
#include "fdo/profile_store/profile_store.h"
#include "test_util.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <random>
#include <thread>

using namespace fdo;
using namespace fdo::profile_store;
using fdo::profile_store::test::sample_doc;
using fdo::profile_store::test::TempDir;

namespace {

ProfileStore open_store(const std::string& path, ReadView view, OpenMode mode) {
  Options o;
  o.read_view = view;
  o.mode = mode;
  o.synchronous = Synchronous::normal;
  auto s = ProfileStore::open(path, o);
  if (!s) FAIL(s.error().describe());
  return std::move(*s);
}

WriteInfo info(WriteSource source = WriteSource::operator_) {
  WriteInfo i;
  i.source = source;
  i.reason = "read view test";
  i.owner = 7;
  return i;
}

std::string key(char c) {
  return std::string(64, c);
}

// Every field of a stored version, the document by its digest and its body.
std::string describe(const StoredProfile& p) {
  return p.pk + " v" + std::to_string(p.version) + " " + p.digest + (p.pinned ? " pinned" : "") +
         " owner " + std::to_string(p.owner) + " author " + std::to_string(p.author) + " " +
         std::string(to_string(p.source)) + " at " + std::to_string(p.created_at) + " reason '" +
         p.reason + "' host '" + p.host + "' stage " + std::to_string(p.stage) + " program '" +
         p.program + "' doc " + profile_digest(p.doc) + " body " + p.body;
}

// What a reader can see of one key through `s`: the current version whole.
std::string seen(const ProfileStore& s, const std::string& pk) {
  auto cur = s.current_shared(pk);
  if (!cur) return "error: " + cur.error().describe();
  if (!*cur) return "none";
  return describe(**cur);
}

std::string seen_mapping(const Expected<std::optional<std::string>>& m) {
  if (!m) return "error: " + m.error().describe();
  return *m ? **m : "none";
}

} // namespace

TEST_CASE("read view: a repeated read reaches neither the file nor a copy", "[read_view]") {
  TempDir dir;
  const std::string path = dir.file("v.db");
  auto store = open_store(path, ReadView::in_process, OpenMode::read_write);
  const std::string pk = key('a'), ik = key('1'), ck = key('c');
  REQUIRE(store.write(pk, 0, sample_doc(5), info()));
  REQUIRE(store.put_profile_key(ik, pk));
  REQUIRE(store.put_virtual_key(ck, "vk:" + ik, ik));

  auto first = store.current_shared(pk);
  REQUIRE(first);
  REQUIRE(*first);
  REQUIRE(store.lookup_profile_key(ik));
  REQUIRE(store.lookup_virtual_key(ck));
  const auto reads = store.database_reads();
  REQUIRE(reads.has_value());
  for (int i = 0; i < 100; ++i) {
    auto again = store.current_shared(pk);
    REQUIRE(again);
    CHECK(again->get() == first->get()); // the same immutable document, not a copy
    CHECK(seen_mapping(store.lookup_profile_key(ik)) == pk);
    CHECK(seen_mapping(store.lookup_virtual_key(ck)) == "vk:" + ik);
  }
  CHECK(store.database_reads() == reads);
  // A key with no profile and an unknown IK are remembered as such too.
  CHECK(seen(store, key('z')) == "none");
  CHECK(seen_mapping(store.lookup_profile_key(key('9'))) == "none");
  const auto after_misses = store.database_reads();
  CHECK(seen(store, key('z')) == "none");
  CHECK(seen_mapping(store.lookup_profile_key(key('9'))) == "none");
  CHECK(store.database_reads() == after_misses);

  // Without the view (the default), every read is a read of the file.
  auto plain = open_store(path, ReadView::none, OpenMode::read_write);
  const auto before = *plain.database_reads();
  for (int i = 0; i < 3; ++i)
    REQUIRE(plain.current_shared(pk));
  CHECK(*plain.database_reads() == before + 3);
}

TEST_CASE("read view: a write leaves the version it stored, the next read fetches nothing",
          "[read_view]") {
  TempDir dir;
  const std::string path = dir.file("v.db");
  auto store = open_store(path, ReadView::in_process, OpenMode::read_write);
  auto file = open_store(path, ReadView::none, OpenMode::read_only);
  const std::string pk = key('a');
  WriteInfo i = info(WriteSource::feedback);
  i.host = "host-1";
  i.stage = 12;
  i.program = key('p');
  for (std::int64_t v = 0; v < 3; ++v) {
    i.owner = 7 + v; // the author changes; the profile's owner stays the first writer
    SharedProfile stored;
    i.stored_out = v == 1 ? &stored : nullptr; // asked for, or only kept by the view
    REQUIRE(store.write(pk, v, sample_doc(static_cast<std::uint64_t>(v) + 3), i));
    if (v == 1) {
      REQUIRE(stored);
      CHECK(stored->version == 2);
    }
    const auto reads = store.database_reads();
    auto cur = store.current_shared(pk);
    REQUIRE(cur);
    REQUIRE(*cur);
    CHECK(store.database_reads() == reads); // kept by the write, not read back
    if (v == 1) CHECK(cur->get() == stored.get());
    // Exactly what a read of the file returns, field by field.
    CHECK(seen(store, pk) == seen(file, pk));
    CHECK((*cur)->owner == 7);
    CHECK((*cur)->author == 7 + v);
  }
  // A pin changes the profiles row: forgotten, read again, and then kept.
  REQUIRE(store.pin(pk));
  CHECK(seen(store, pk) == seen(file, pk));
  // A refused write leaves nothing and changes nothing.
  SharedProfile stored;
  i.stored_out = &stored;
  CHECK_FALSE(store.write(pk, 1, sample_doc(9), i)); // stale expected version
  CHECK_FALSE(stored);
  CHECK(seen(store, pk) == seen(file, pk));
  // Writes of a batch leave theirs only once the batch commits.
  std::vector<WriteRequest> reqs;
  WriteInfo bi = info();
  SharedProfile first, second;
  bi.stored_out = &first;
  reqs.push_back({key('b'), 0, sample_doc(20), bi});
  bi.stored_out = &second;
  reqs.push_back({key('c'), 5, sample_doc(21), bi}); // refused: the whole batch is
  CHECK_FALSE(store.write_batch(reqs));
  CHECK_FALSE(first);
  CHECK_FALSE(second);
  reqs[1].expected_version = 0;
  REQUIRE(store.write_batch(reqs));
  REQUIRE(first);
  REQUIRE(second);
  for (const auto& [k, p] : {std::pair{key('b'), first}, std::pair{key('c'), second}}) {
    auto f = file.current_shared(k);
    REQUIRE(f);
    REQUIRE(*f);
    CHECK(describe(*p) == describe(**f));
  }
}

TEST_CASE("read view: writers racing other changes leave what the file holds", "[read_view]") {
  TempDir dir;
  const std::string path = dir.file("v.db");
  auto store = open_store(path, ReadView::in_process, OpenMode::read_write);
  auto file = open_store(path, ReadView::none, OpenMode::read_only);
  const std::vector<std::string> pks = {key('a'), key('b')};
  std::vector<std::thread> writers;
  std::atomic<int> failures{0};
  for (std::size_t w = 0; w < pks.size(); ++w)
    writers.emplace_back([&, w] {
      for (std::int64_t v = 0; v < 40; ++v) {
        if (!store.write(pks[w], v, sample_doc(static_cast<std::uint64_t>(v * 2 + w)), info()))
          ++failures;
        (void)store.current_shared(pks[1 - w]); // reads between the other's writes
      }
    });
  // Pins and unpins of both keys meanwhile (changes overlapping the writes).
  for (int n = 0; n < 40; ++n) {
    (void)store.pin(pks[n % 2]);
    (void)store.unpin(pks[n % 2]);
  }
  for (auto& t : writers)
    t.join();
  CHECK(failures == 0);
  for (const std::string& pk : pks) {
    CHECK(seen(store, pk) == seen(file, pk));
    auto cur = store.current_shared(pk);
    REQUIRE(cur);
    REQUIRE(*cur);
    CHECK((*cur)->version == 40);
  }
}

TEST_CASE("read view: after every kind of change it reads what the file holds", "[read_view]") {
  TempDir dir;
  const std::string path = dir.file("v.db");
  auto store = open_store(path, ReadView::in_process, OpenMode::read_write);
  auto file = open_store(path, ReadView::none, OpenMode::read_only);
  const std::vector<std::string> pks = {key('a'), key('b'), key('d')};
  const std::vector<std::string> iks = {key('1'), key('2'), key('3')};
  const std::vector<std::string> cks = {key('4'), key('5'), key('6')};
  REQUIRE(backup_database(path, dir.file("empty.db")));

  std::mt19937_64 rng(GENERATE(1u, 2u, 3u, 4u, 5u, 6u, 7u, 8u));
  std::uint64_t counter = 10;
  for (int step = 0; step < 300; ++step) {
    const std::string& pk = pks[rng() % pks.size()];
    const std::string& ik = iks[rng() % iks.size()];
    const std::string& ck = cks[rng() % cks.size()];
    std::string op;
    switch (rng() % 13) {
    case 0:
    case 1: {
      op = "write";
      auto cur = store.summary(pk);
      REQUIRE(cur);
      // Now and then a stale expected version: a refused write changes nothing.
      const std::int64_t expected = (*cur ? (*cur)->version : 0) - (rng() % 5 == 0 ? 1 : 0);
      (void)store.write(pk, std::max<std::int64_t>(expected, 0), sample_doc(++counter),
                        info(rng() % 2 ? WriteSource::feedback : WriteSource::operator_));
      break;
    }
    case 2: {
      op = "write_batch";
      std::vector<WriteRequest> reqs;
      for (const std::string& k : {pks[0], pks[1]}) {
        auto cur = store.summary(k);
        REQUIRE(cur);
        reqs.push_back({k, *cur ? (*cur)->version : 0, sample_doc(++counter), info()});
      }
      (void)store.write_batch(reqs);
      break;
    }
    case 3:
      op = "pin";
      (void)store.pin(pk);
      break;
    case 4:
      op = "unpin";
      (void)store.unpin(pk);
      break;
    case 5:
      op = "reset";
      (void)store.reset(pk);
      break;
    case 6:
      op = "remove";
      (void)store.remove(pk);
      break;
    case 7:
      op = "put_profile_key";
      (void)store.put_profile_key(ik, pk);
      break;
    case 8:
      op = rng() % 2 ? "remove_profile_key" : "remove_mappings";
      if (op == "remove_profile_key")
        (void)store.remove_profile_key(ik);
      else
        (void)store.remove_mappings(ik);
      break;
    case 9:
      op = "put_virtual_key";
      (void)store.put_virtual_key(ck, "vk:" + ik, ik);
      break;
    case 10:
      op = "remove_virtual_key";
      (void)store.remove_virtual_key(ck);
      break;
    case 11: {
      op = "import";
      // A bundle from another store, with a profile for pk that differs: overwrites.
      auto side = open_store(dir.file("side.db"), ReadView::none, OpenMode::read_write);
      auto cur = side.summary(pk);
      REQUIRE(cur);
      REQUIRE(side.write(pk, *cur ? (*cur)->version : 0, sample_doc(++counter), info()));
      auto bundle = side.export_all(ExportHistory::current_only);
      REQUIRE(bundle);
      (void)store.import_bundle(*bundle, 7, ImportConflict::overwrite, std::nullopt,
                                ImportNewKeys::any);
      break;
    }
    case 12:
      op = "restore";
      if (rng() % 3 == 0) {
        REQUIRE(store.restore_from(dir.file("empty.db")));
      } else {
        std::filesystem::remove(dir.file("snap.db"));
        REQUIRE(backup_database(path, dir.file("snap.db")));
        (void)store.write(pk, 0, sample_doc(++counter), info()); // usually refused
        REQUIRE(store.restore_from(dir.file("snap.db")));
      }
      break;
    }
    INFO("step " << step << ": " << op);
    for (const std::string& k : pks)
      REQUIRE(seen(store, k) == seen(file, k));
    for (const std::string& k : iks)
      REQUIRE(seen_mapping(store.lookup_profile_key(k)) ==
              seen_mapping(file.lookup_profile_key(k)));
    for (const std::string& k : cks)
      REQUIRE(seen_mapping(store.lookup_virtual_key(k)) ==
              seen_mapping(file.lookup_virtual_key(k)));
  }
}

TEST_CASE("read view: readers racing writers never keep an old version", "[read_view]") {
  TempDir dir;
  const std::string path = dir.file("v.db");
  auto store = open_store(path, ReadView::in_process, OpenMode::read_write);
  const std::string pk = key('a');
  REQUIRE(store.write(pk, 0, sample_doc(1), info()));
  std::atomic<bool> stop{false};
  std::vector<std::thread> readers;
  std::atomic<int> errors{0};
  for (int r = 0; r < 3; ++r)
    readers.emplace_back([&] {
      std::int64_t last = 0;
      while (!stop.load()) {
        auto cur = store.current_shared(pk);
        if (!cur || !*cur || (*cur)->version < last) ++errors;
        if (cur && *cur) last = (*cur)->version;
      }
    });
  for (std::int64_t v = 1; v < 60; ++v)
    REQUIRE(store.write(pk, v, sample_doc(static_cast<std::uint64_t>(v) + 1), info()));
  stop = true;
  for (auto& t : readers)
    t.join();
  CHECK(errors == 0);
  auto cur = store.current_shared(pk);
  REQUIRE(cur);
  REQUIRE(*cur);
  CHECK((*cur)->version == 60);
}

TEST_CASE("read view: only a read-write SQLite store keeps one", "[read_view]") {
  TempDir dir;
  const std::string path = dir.file("v.db");
  const std::string pk = key('a');
  {
    auto w = open_store(path, ReadView::none, OpenMode::read_write);
    REQUIRE(w.write(pk, 0, sample_doc(1), info()));
  }
  // A read-only opener may share the file with a writer: it reads the file.
  auto ro = open_store(path, ReadView::in_process, OpenMode::read_only);
  const auto before = *ro.database_reads();
  REQUIRE(ro.current_shared(pk));
  REQUIRE(ro.current_shared(pk));
  CHECK(*ro.database_reads() == before + 2);
}
