// Files that are not (healthy) profile stores: a clear error naming the path,
// no crash, and the file is never modified.
#include "fdo/profile_store/profile_store.h"
#include "fdo/profile_store/sqlite.h"
#include "test_util.h"

#include <catch2/catch.hpp>
#include <filesystem>

using namespace fdo;
using namespace fdo::profile_store;
using fdo::profile_store::test::read_bytes;
using fdo::profile_store::test::sample_doc;
using fdo::profile_store::test::TempDir;
using fdo::profile_store::test::write_bytes;

namespace {

// Opens in both modes; both must fail naming the path, leaving the bytes
// and the directory (no -wal/-shm) as they were.
void expect_refused(const TempDir& dir, const std::string& path, Errc code) {
  std::string before = read_bytes(path);
  auto entries_before = std::distance(std::filesystem::directory_iterator(dir.path()),
                                      std::filesystem::directory_iterator());
  for (OpenMode mode : {OpenMode::read_write, OpenMode::read_only}) {
    Options o;
    o.mode = mode;
    auto r = ProfileStore::open(path, o);
    REQUIRE_FALSE(r);
    INFO(r.error().describe());
    CHECK(r.error().code() == code);
    CHECK(r.error().message().find(path) != std::string::npos);
    CHECK(read_bytes(path) == before);
  }
  auto entries_after = std::distance(std::filesystem::directory_iterator(dir.path()),
                                     std::filesystem::directory_iterator());
  CHECK(entries_after == entries_before);
}

std::string make_store(const TempDir& dir, const std::string& name) {
  std::string path = dir.file(name);
  auto store = ProfileStore::open(path);
  REQUIRE(store);
  for (int i = 0; i < 40; ++i)
    REQUIRE(store->write(std::string(64, 'a'), i, sample_doc(i, 20), {}));
  REQUIRE(store->put_profile_key("ik", std::string(64, 'a')));
  return path; // closing the last connection checkpoints the WAL into the file
}

// Ruins the last b-tree page (table or index) of the database file: the
// header and schema still read fine, only a walk of the trees finds it.
void damage_last_btree_page(const std::string& path) {
  std::string bytes = read_bytes(path);
  REQUIRE(bytes.size() >= 100);
  std::size_t page_size =
      (static_cast<unsigned char>(bytes[16]) << 8) | static_cast<unsigned char>(bytes[17]);
  if (page_size == 1) page_size = 65536;
  std::size_t page = 0;
  for (std::size_t p = bytes.size() / page_size; p >= 2 && page == 0; --p) {
    unsigned char type = static_cast<unsigned char>(bytes[(p - 1) * page_size]);
    if (type == 0x02 || type == 0x05 || type == 0x0a || type == 0x0d) page = p;
  }
  REQUIRE(page >= 2);
  for (std::size_t i = (page - 1) * page_size; i < page * page_size; ++i)
    bytes[i] = static_cast<char>(0xA5 ^ (i * 7));
  write_bytes(path, bytes);
}

} // namespace

TEST_CASE("random bytes at the database path: clear error - file untouched",
          "[profile_store][corrupt]") {
  TempDir dir;
  std::string path = dir.file("garbage.db");
  std::mt19937_64 rng(7);
  std::string bytes(8192, '\0');
  for (char& c : bytes)
    c = static_cast<char>(rng());
  write_bytes(path, bytes);
  expect_refused(dir, path, Errc::corrupt);
  auto r = ProfileStore::open(path);
  CHECK(r.error().message().find("not an SQLite database") != std::string::npos);
}

TEST_CASE("a short text file at the database path is refused", "[profile_store][corrupt]") {
  TempDir dir;
  std::string path = dir.file("notes.txt");
  write_bytes(path, "profiles go here\n");
  expect_refused(dir, path, Errc::corrupt);
}

TEST_CASE("a store whose schema page is damaged is refused - file untouched",
          "[profile_store][corrupt]") {
  TempDir dir;
  std::string path = make_store(dir, "damaged.db");
  std::string bytes = read_bytes(path);
  REQUIRE(bytes.size() > 8192);
  // Keep the 100-byte header (so it still looks like SQLite); ruin the rest
  // of page 1, which holds sqlite_schema.
  for (size_t i = 100; i < 4096; ++i)
    bytes[i] = static_cast<char>(0xA5 ^ i);
  write_bytes(path, bytes);
  expect_refused(dir, path, Errc::corrupt);
}

TEST_CASE("damaged data pages give corrupt errors - never a crash", "[profile_store][corrupt]") {
  TempDir dir;
  std::string path = make_store(dir, "pages.db");
  std::string bytes = read_bytes(path);
  // Ruin every page after the first two (table roots survive, the b-tree
  // content does not).
  for (size_t i = 2 * 4096; i < bytes.size(); ++i)
    bytes[i] = static_cast<char>(i * 31);
  write_bytes(path, bytes);
  auto store = ProfileStore::open(path);
  if (!store) {
    CHECK(store.error().code() == Errc::corrupt);
    CHECK(store.error().message().find(path) != std::string::npos);
    return;
  }
  auto check = store->integrity_check();
  REQUIRE_FALSE(check);
  CHECK(check.error().code() == Errc::corrupt);
  CHECK(check.error().message().find(path) != std::string::npos);
  // Reads fail cleanly (or find nothing); none crashes.
  auto h = store->history(std::string(64, 'a'));
  if (!h) CHECK((h.error().code() == Errc::corrupt || h.error().code() == Errc::not_found));
  (void)store->list();
  (void)store->lookup_profile_key("ik");
}

TEST_CASE("another application's SQLite database is refused - not adopted",
          "[profile_store][corrupt]") {
  TempDir dir;
  std::string path = dir.file("other.db");
  {
    auto db = sqlite::Connection::open(path, sqlite::Access::read_write_create);
    REQUIRE(db);
    REQUIRE(db->exec("CREATE TABLE photos (id INTEGER PRIMARY KEY, name TEXT)"));
  }
  expect_refused(dir, path, Errc::invalid_argument);
  auto r = ProfileStore::open(path);
  CHECK(r.error().message().find("another application") != std::string::npos);
}

TEST_CASE("a directory at the database path is refused", "[profile_store][corrupt]") {
  TempDir dir;
  std::string path = dir.file("adir");
  std::filesystem::create_directory(path);
  auto r = ProfileStore::open(path);
  REQUIRE_FALSE(r);
  CHECK(r.error().message().find(path) != std::string::npos);
}

TEST_CASE("an empty file becomes a new store - read-only refuses it", "[profile_store][corrupt]") {
  TempDir dir;
  std::string path = dir.file("empty.db");
  write_bytes(path, "");
  Options ro;
  ro.mode = OpenMode::read_only;
  auto r = ProfileStore::open(path, ro);
  REQUIRE_FALSE(r);
  CHECK(r.error().message().find(path) != std::string::npos);
  auto rw = ProfileStore::open(path);
  REQUIRE(rw);
  CHECK(rw->integrity_check());
}

TEST_CASE("a body changed behind the store's back is detected - even after earlier reads",
          "[profile_store][corrupt]") {
  TempDir dir;
  std::string path = dir.file("tamper.db");
  auto store = ProfileStore::open(path);
  REQUIRE(store);
  const std::string pk(64, 'a');
  REQUIRE(store->write(pk, 0, sample_doc(1), {}));
  REQUIRE(store->current(pk));
  REQUIRE((*store->current(pk))->doc.functions.at("fn0").counts[0] == 1);
  {
    // Another process edits the stored JSON (valid JSON, wrong digest).
    auto db = sqlite::Connection::open(path, sqlite::Access::read_write);
    REQUIRE(db);
    REQUIRE(db->exec("UPDATE profile_versions SET body = replace(body, '[1,0,100]', "
                     "'[2,0,100]')"));
    REQUIRE(db->changes() == 1);
  }
  auto cur = store->current(pk);
  REQUIRE_FALSE(cur);
  CHECK(cur.error().code() == Errc::corrupt);
  CHECK(cur.error().message().find("digest") != std::string::npos);
  {
    auto db = sqlite::Connection::open(path, sqlite::Access::read_write);
    REQUIRE(db);
    REQUIRE(db->exec("UPDATE profile_versions SET body = 'not json'"));
  }
  auto h = store->history(pk);
  REQUIRE_FALSE(h);
  CHECK(h.error().code() == Errc::corrupt);
  CHECK(h.error().message().find("does not parse") != std::string::npos);
}

TEST_CASE("a store with a damaged page is refused at open by quick_check - file untouched",
          "[profile_store][corrupt]") {
  TempDir dir;
  std::string path = make_store(dir, "btree.db");
  damage_last_btree_page(path);
  expect_refused(dir, path, Errc::corrupt);
  for (OpenMode mode : {OpenMode::read_write, OpenMode::read_only}) {
    Options o;
    o.mode = mode;
    auto r = ProfileStore::open(path, o);
    REQUIRE_FALSE(r);
    CHECK(r.error().message().find("quick_check") != std::string::npos);
  }
}

TEST_CASE("a damaged store with a WAL left beside it is refused - neither file changes",
          "[profile_store][corrupt]") {
  TempDir dir;
  std::string path = make_store(dir, "wal.db");
  damage_last_btree_page(path);
  // A -wal file means "someone may have it open": the check runs on the
  // ordinary (locking) connection, which must not checkpoint on close.
  write_bytes(path + "-wal", "");
  std::string before = read_bytes(path);
  for (OpenMode mode : {OpenMode::read_write, OpenMode::read_only}) {
    Options o;
    o.mode = mode;
    auto r = ProfileStore::open(path, o);
    REQUIRE_FALSE(r);
    INFO(r.error().describe());
    CHECK(r.error().code() == Errc::corrupt);
    CHECK(r.error().message().find(path) != std::string::npos);
    CHECK(r.error().message().find("quick_check") != std::string::npos);
    CHECK(read_bytes(path) == before);
    CHECK(std::filesystem::exists(path + "-wal"));
  }
}
