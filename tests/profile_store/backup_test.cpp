// backup_database / restore_database (SQLite's online backup API): the copy
// has every version of every profile with its owner, author, reason and pin
// state; it is taken while the store is open and written; restoring it
// brings all of it back.
#include "fdo/profile_store/backup.h"
#include "fdo/profile_store/profile_store.h"
#include "fdo/profile_store/testing.h"
#include "fdo/util/fd.h"
#include "test_util.h"

#include <catch2/catch.hpp>
#include <sys/stat.h>

using namespace fdo;
using namespace fdo::profile_store;
using fdo::profile_store::test::sample_doc;
using fdo::profile_store::test::TempDir;

namespace {

const std::string kA = std::string(64, 'a');
const std::string kB = std::string(64, 'b');

// (version, author, reason, pinned, owner) of every version of `pk`.
std::vector<std::tuple<std::int64_t, std::int64_t, std::string, bool, std::int64_t>>
history_of(const ProfileStore& s, const std::string& pk) {
  auto h = s.history(pk);
  REQUIRE(h);
  std::vector<std::tuple<std::int64_t, std::int64_t, std::string, bool, std::int64_t>> out;
  for (const auto& v : *h)
    out.emplace_back(v.version, v.author, v.reason, v.pinned, v.owner);
  return out;
}

void fill(ProfileStore& s) {
  WriteInfo w;
  w.owner = 1000;
  w.reason = "feedback: first";
  REQUIRE(s.write(kA, 0, sample_doc(10), w));
  w.reason = "feedback: drift";
  REQUIRE(s.write(kA, 1, sample_doc(20), w));
  w.owner = 1000;
  w.source = WriteSource::import;
  w.reason = "imported";
  REQUIRE(s.write(kA, 2, sample_doc(30), w));
  REQUIRE(s.pin(kA));
  w = WriteInfo{};
  w.owner = 1001;
  w.reason = "feedback: other tenant";
  REQUIRE(s.write(kB, 0, sample_doc(40), w));
  REQUIRE(s.register_program({std::string(64, 'c'), "interp", 10, 1000, 0, 0}));
}

} // namespace

TEST_CASE("backup: a copy of an open store keeps every version, owner and pin", "[backup]") {
  TempDir dir;
  std::string db = dir.file("profiles.db"), copy = dir.file("backup.db");
  auto store = ProfileStore::open(db);
  REQUIRE(store);
  fill(*store);

  auto b = backup_database(db, copy); // the store is open (WAL) while copying
  REQUIRE(b);
  CHECK(b->pages > 0);
  CHECK(b->bytes > 0);
  struct stat st {};
  REQUIRE(::stat(copy.c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0600);
  CHECK(::stat((copy + "-wal").c_str(), &st) != 0); // self-contained

  auto again = backup_database(db, copy);
  REQUIRE_FALSE(again);
  CHECK(again.error().code() == Errc::already_exists);

  auto from_copy = ProfileStore::open(copy);
  REQUIRE(from_copy);
  CHECK(history_of(*from_copy, kA) == history_of(*store, kA));
  CHECK(history_of(*from_copy, kB) == history_of(*store, kB));
  CHECK(history_of(*from_copy, kA).size() == 3);
  auto prog = from_copy->program(std::string(64, 'c'));
  REQUIRE(prog);
  REQUIRE(prog->has_value());
  CHECK((*prog)->name == "interp");
}

TEST_CASE("backup: restore brings the whole history back over a newer store", "[backup]") {
  TempDir dir;
  std::string db = dir.file("profiles.db"), copy = dir.file("backup.db");
  std::vector<std::tuple<std::int64_t, std::int64_t, std::string, bool, std::int64_t>> before;
  {
    auto store = ProfileStore::open(db);
    REQUIRE(store);
    fill(*store);
    before = history_of(*store, kA);
    REQUIRE(backup_database(db, copy));
    // Changes after the backup: a delete and a reset.
    REQUIRE(store->remove(kB));
    REQUIRE(store->reset(kA));
  }
  auto r = restore_database(copy, db);
  REQUIRE(r);
  auto store = ProfileStore::open(db);
  REQUIRE(store);
  CHECK(history_of(*store, kA) == before);
  auto current = store->current(kA);
  REQUIRE(current);
  REQUIRE(current->has_value());
  CHECK((*current)->version == 3);
  CHECK(history_of(*store, kB).size() == 1);

  // Restoring into a fresh state dir works too.
  std::string fresh = dir.file("fresh.db");
  REQUIRE(restore_database(copy, fresh));
  auto other = ProfileStore::open(fresh);
  REQUIRE(other);
  CHECK(history_of(*other, kA) == before);
}

TEST_CASE("backup: restore refuses a file that is not an fdo store", "[backup]") {
  TempDir dir;
  std::string db = dir.file("profiles.db");
  {
    auto store = ProfileStore::open(db);
    REQUIRE(store);
    fill(*store);
  }
  std::string junk = dir.file("junk.db");
  REQUIRE(write_file_atomic(junk, std::string(4096, 'x'), Durability::none));
  auto r = restore_database(junk, db);
  REQUIRE_FALSE(r);
  auto store = ProfileStore::open(db); // untouched
  REQUIRE(store);
  CHECK(history_of(*store, kA).size() == 3);
  auto missing = backup_database(dir.file("none.db"), dir.file("x.db"));
  REQUIRE_FALSE(missing);
  CHECK_THAT(missing.error().message(), Catch::Contains("none.db"));
}

TEST_CASE("backup: restore_from replaces an open store in use with the copy", "[backup]") {
  TempDir dir;
  std::string db = dir.file("profiles.db"), copy = dir.file("backup.db");
  auto store = ProfileStore::open(db);
  REQUIRE(store);
  fill(*store);
  auto expected_a = history_of(*store, kA);
  REQUIRE(backup_database(db, copy));

  // Life goes on after the backup: a new version, a new key, a removal.
  WriteInfo w;
  w.owner = 1000;
  w.source = WriteSource::operator_; // kA is pinned
  REQUIRE(store->write(kA, 3, sample_doc(50), w));
  REQUIRE(store->write(std::string(64, 'd'), 0, sample_doc(60), w));
  REQUIRE(store->remove(kB));
  // A second handle on the file (another reader, as fdoctl --offline is).
  auto reader = ProfileStore::open(db, Options{OpenMode::read_only});
  REQUIRE(reader);

  // Bad copies change nothing.
  fdo::profile_store::test::write_bytes(dir.file("junk.db"), "not a database at all, just text");
  CHECK_FALSE(store->restore_from(dir.file("junk.db")));
  REQUIRE(fdo::profile_store::testing::create_database_at_version(dir.file("old.db"), 1));
  auto old = store->restore_from(dir.file("old.db"));
  REQUIRE_FALSE(old);
  CHECK_THAT(old.error().message(), Catch::Contains("with fdod stopped"));
  CHECK(history_of(*store, kA).size() == 4);

  auto r = store->restore_from(copy);
  INFO((r ? std::string() : r.error().describe()));
  REQUIRE(r);
  CHECK(r->pages > 0);
  // Both handles see the backup's state, history intact; the store writes on.
  CHECK(history_of(*store, kA) == expected_a);
  CHECK(history_of(*reader, kA) == expected_a);
  CHECK(history_of(*store, kB).size() == 1);
  auto d = store->current(std::string(64, 'd'));
  REQUIRE(d);
  CHECK_FALSE(d->has_value());
  REQUIRE(store->unpin(kA));
  auto next = store->write(kA, 3, sample_doc(70), w);
  REQUIRE(next);
  CHECK(*next == 4);
  CHECK(store->integrity_check());
}
