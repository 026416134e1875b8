// The state directory before the service opens it: a database that vanished
// or was truncated next to registered programs and cache entries is refused,
// and the directory is made private whatever the umask.
#include "fdo/daemon/state_dir.h"
#include "support/file_mode.h"
#include "support/temp_dir.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sys/stat.h>

using namespace fdo;
using namespace fdo::daemon;
using fdo::test_support::TempDir;
namespace fs = std::filesystem;

using fdo::test_support::mode_of;
using fdo::test_support::ScopedUmask;

namespace {

void write(const std::string& path, const std::string& bytes) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}

const std::string kIk(64, 'a');
const std::string kCacheEntry = "cache/objects/ab/" + std::string(64, 'a') + "-v.obj";

} // namespace

TEST_CASE("state dir: a fresh or empty state dir passes", "[service][state_dir]") {
  TempDir dir{"fdo-state"};
  CHECK(check_state_dir(dir.str()));
  CHECK(check_state_dir(dir.file("not-yet-created")));
  // What a first start leaves before anything is registered: empty directories.
  fs::create_directories(dir.file("programs"));
  fs::create_directories(dir.file("cache/objects/ab"));
  fs::create_directories(dir.file("cache/programs"));
  CHECK(check_state_dir(dir.str()));
  CHECK(prepare_state_dir(dir.str(), StoreLocation::state_dir));
}

TEST_CASE("state dir: a database beside programs and cache entries passes",
          "[service][state_dir]") {
  TempDir dir{"fdo-state"};
  write(dir.file("profiles.db"), std::string("SQLite format 3\0", 16));
  write(dir.file("programs/" + kIk + ".prog"), "IR");
  write(dir.file(kCacheEntry), "object");
  CHECK(check_state_dir(dir.str()));
  CHECK(prepare_state_dir(dir.str(), StoreLocation::state_dir));
}

TEST_CASE("state dir: a missing database beside registered programs is refused",
          "[service][state_dir]") {
  TempDir dir{"fdo-state"};
  write(dir.file("programs/" + kIk + ".prog"), "IR");
  write(dir.file("programs/" + std::string(64, 'b') + ".prog"), "IR");
  auto r = check_state_dir(dir.str());
  REQUIRE_FALSE(r);
  CHECK(r.error().code() == Errc::corrupt);
  CHECK_THAT(r.error().message(),
             Catch::Contains(dir.str()) && Catch::Contains("profiles.db is missing") &&
                 Catch::Contains("programs/ holds 2 registered program files") &&
                 Catch::Contains("Restore profiles.db") &&
                 Catch::Contains("move programs/ and cache/ out of the state dir"));
  CHECK_THAT(r.error().message(), !Catch::Contains("cache/ holds"));
  // Nothing was created or changed.
  CHECK_FALSE(fs::exists(dir.file("profiles.db")));
  auto prepared = prepare_state_dir(dir.str(), StoreLocation::state_dir);
  REQUIRE_FALSE(prepared);
  CHECK(prepared.error().message() == r.error().message());
  CHECK_FALSE(fs::exists(dir.file("profiles.db")));

  // A store kept elsewhere says nothing about this directory's programs.
  CHECK(prepare_state_dir(dir.str(), StoreLocation::elsewhere));

  // A left-over WAL is named: it must go too for a fresh start.
  write(dir.file("profiles.db-wal"), "wal");
  CHECK_THAT(check_state_dir(dir.str()).error().message(),
             Catch::Contains("profiles.db-wal is still there"));
}

TEST_CASE("state dir: an empty database beside cache entries is refused", "[service][state_dir]") {
  TempDir dir{"fdo-state"};
  write(dir.file("profiles.db"), "");
  write(dir.file(kCacheEntry), "object");
  auto r = check_state_dir(dir.str());
  REQUIRE_FALSE(r);
  CHECK(r.error().code() == Errc::corrupt);
  CHECK_THAT(r.error().message(), Catch::Contains("profiles.db is empty (0 bytes)") &&
                                      Catch::Contains("cache/ holds compiled entries") &&
                                      Catch::Contains("Restore profiles.db"));
  CHECK_THAT(r.error().message(), !Catch::Contains("programs/ holds"));
  CHECK(fs::file_size(dir.file("profiles.db")) == 0);

  // Both at once are both named.
  write(dir.file("programs/" + kIk + ".prog"), "IR");
  CHECK_THAT(check_state_dir(dir.str()).error().message(),
             Catch::Contains("programs/ holds 1 registered program file (.prog) and cache/ holds"));
}

TEST_CASE("state dir: created 0700 whatever the umask - a loose one is tightened",
          "[service][state_dir]") {
  TempDir dir{"fdo-state"};
  {
    ScopedUmask mask(022);
    const std::string nested = dir.file("var/lib/fdod");
    REQUIRE(prepare_state_dir(nested, StoreLocation::state_dir));
    CHECK(mode_of(nested) == 0700);
    CHECK(mode_of(dir.file("var/lib")) == 0700);
    CHECK(mode_of(dir.file("var")) == 0700);
  }
  {
    // A umask that would leave the owner unable to write is overridden too.
    ScopedUmask mask(0277);
    REQUIRE(create_private_dirs(dir.file("odd/umask")));
    CHECK(mode_of(dir.file("odd")) == 0700);
    CHECK(mode_of(dir.file("odd/umask")) == 0700);
  }
  const std::string loose = dir.file("loose");
  fs::create_directory(loose);
  REQUIRE(::chmod(loose.c_str(), 0755) == 0);
  write(loose + "/profiles.db", "not checked here");
  REQUIRE(::chmod((loose + "/profiles.db").c_str(), 0640) == 0);
  REQUIRE(prepare_state_dir(loose, StoreLocation::state_dir));
  CHECK(mode_of(loose) == 0700);
  // The directory is the fence; the operator's file modes stay.
  CHECK(mode_of(loose + "/profiles.db") == 0640);

  // An existing private directory is left as it is.
  REQUIRE(::chmod(loose.c_str(), 0500) == 0);
  REQUIRE(prepare_state_dir(loose, StoreLocation::elsewhere));
  CHECK(mode_of(loose) == 0500);
  REQUIRE(::chmod(loose.c_str(), 0700) == 0);

  write(dir.file("file"), "x");
  auto not_dir = prepare_state_dir(dir.file("file"), StoreLocation::state_dir);
  REQUIRE_FALSE(not_dir);
  CHECK_THAT(not_dir.error().message(), Catch::Contains("is not a directory"));
  CHECK_FALSE(prepare_state_dir("", StoreLocation::state_dir));
}
