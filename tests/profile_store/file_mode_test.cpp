// The database holds tenants' data: a store creates its file, and SQLite its
// -wal and -shm files, readable and writable by the owner only, whatever the
// process umask.
#include "fdo/profile_store/profile_store.h"
#include "support/file_mode.h"
#include "test_util.h"

#include <catch2/catch.hpp>
#include <sys/stat.h>

using namespace fdo;
using namespace fdo::profile_store;
using fdo::profile_store::test::sample_doc;
using fdo::profile_store::test::TempDir;

using fdo::test_support::mode_of;
using fdo::test_support::ScopedUmask;

namespace {

void check_private(const std::string& path) {
  // While the store is open, all three files exist.
  for (const std::string& file : {path, path + "-wal", path + "-shm"}) {
    INFO(file);
    CHECK(mode_of(file) == 0600);
  }
}

} // namespace

TEST_CASE("a new store and its -wal and -shm files are 0600 under umask 022",
          "[profile_store][files]") {
  TempDir dir;
  ScopedUmask mask(022);
  const std::string path = dir.file("p.db");
  auto store = ProfileStore::open(path);
  REQUIRE(store);
  REQUIRE(store->write(std::string(64, 'a'), 0, sample_doc(1), {}));
  REQUIRE(store->current(std::string(64, 'a')));
  check_private(path);

  // A read-only store opened beside it changes no mode.
  Options ro;
  ro.mode = OpenMode::read_only;
  auto reader = ProfileStore::open(path, ro);
  REQUIRE(reader);
  REQUIRE(reader->list());
  check_private(path);
}

TEST_CASE("a umask that would leave the owner without write access changes nothing",
          "[profile_store][files]") {
  TempDir dir; // made first: under this umask it could not be written
  ScopedUmask mask(0277);
  const std::string path = dir.file("p.db");
  auto store = ProfileStore::open(path);
  REQUIRE(store);
  REQUIRE(store->write(std::string(64, 'a'), 0, sample_doc(1), {}));
  check_private(path);
}

TEST_CASE("an existing database keeps the mode its creator gave it", "[profile_store][files]") {
  TempDir dir;
  const std::string path = dir.file("p.db");
  {
    auto store = ProfileStore::open(path);
    REQUIRE(store);
  }
  // An operator's deliberate choice (e.g. group read for a monitoring user).
  REQUIRE(::chmod(path.c_str(), 0640) == 0);
  auto store = ProfileStore::open(path);
  REQUIRE(store);
  REQUIRE(store->write(std::string(64, 'a'), 0, sample_doc(1), {}));
  CHECK(mode_of(path) == 0640);
  CHECK(mode_of(path + "-wal") == 0640);
}
