#include "fdo/util/fd.h"
#include "support/temp_dir.h"

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <sys/stat.h>
#include <unistd.h>

using namespace fdo;
namespace fs = std::filesystem;

namespace {
struct TempDir : fdo::test_support::TempDir {
  TempDir() : fdo::test_support::TempDir("fdo-util-test") {}
};

bool fd_is_open(int fd) {
  return ::fcntl(fd, F_GETFD) != -1;
}
} // namespace

TEST_CASE("Fd closes on destruction and transfers on move", "[util][fd]") {
  TempDir dir;
  int raw = -1;
  {
    auto fd = Fd::open(dir.file("a"), O_WRONLY | O_CREAT);
    REQUIRE(fd);
    raw = fd->get();
    CHECK(fd_is_open(raw));
    CHECK((::fcntl(raw, F_GETFD) & FD_CLOEXEC) != 0);
    Fd moved = std::move(*fd);
    CHECK_FALSE(fd->valid());
    CHECK(moved.get() == raw);
  }
  CHECK_FALSE(fd_is_open(raw));
}

TEST_CASE("Fd::open reports the path and errno", "[util][fd]") {
  auto fd = Fd::open("/nonexistent/dir/file", O_RDONLY);
  REQUIRE_FALSE(fd);
  CHECK(fd.error().code() == Errc::not_found);
  CHECK(fd.error().message().find("/nonexistent/dir/file") != std::string::npos);
}

TEST_CASE("Mapping maps a file and unmaps on destruction", "[util][mapping]") {
  TempDir dir;
  std::string path = dir.file("m");
  REQUIRE(write_file_atomic(path, "hello mapping"));
  auto fd = Fd::open(path, O_RDONLY);
  REQUIRE(fd);
  auto map = Mapping::map_file(*fd, 13, Protection::read_only);
  REQUIRE(map);
  CHECK(std::string(reinterpret_cast<const char*>(map->data()), map->size()) == "hello mapping");
  Mapping other = std::move(*map);
  CHECK_FALSE(map->valid());
  CHECK(other.valid());
  CHECK_FALSE(Mapping::map_file(*fd, 0, Protection::read_only));

  auto anon = Mapping::anonymous(4096, Protection::read_write);
  REQUIRE(anon);
  anon->bytes()[100] = 42;
  CHECK(anon->bytes()[100] == 42);
}

TEST_CASE("write_file_atomic replaces whole files and leaves no temp files", "[util][fd]") {
  TempDir dir;
  std::string path = dir.file("obj");
  REQUIRE(write_file_atomic(path, "first"));
  REQUIRE(write_file_atomic(path, "second version"));
  auto content = read_file(path);
  REQUIRE(content);
  CHECK(*content == "second version");
  int files = 0;
  for (auto& e : fs::directory_iterator(dir.path())) {
    (void)e;
    ++files;
  }
  CHECK(files == 1);
  auto too_big = read_file(path, 3);
  REQUIRE_FALSE(too_big);
  CHECK(too_big.error().code() == Errc::resource_exhausted);
  auto missing = write_file_atomic((dir.path() / "no" / "such" / "dir").string(), "x");
  CHECK_FALSE(missing);
}

#include "fdo/util/time.h"

TEST_CASE("rfc3339_ms formats UTC with milliseconds", "[util][time]") {
  CHECK(fdo::rfc3339_ms(0) == "1970-01-01T00:00:00.000Z");
  CHECK(fdo::rfc3339_ms(1795318372122) == "2026-11-22T03:32:52.122Z");
  CHECK(fdo::rfc3339_ms(-1) == "1969-12-31T23:59:59.999Z");
  CHECK(fdo::unix_ms_now() > 1700000000000);
}

TEST_CASE("create_private_dirs makes 0700 directories whatever the umask", "[util][fd]") {
  TempDir dir;
  const std::string root = dir.path().string();
  const std::string deep = root + "/a/b/c";
  const mode_t old = ::umask(0277); // would leave mkdir's result unwritable
  Status made = create_private_dirs(deep);
  ::umask(old);
  REQUIRE(made);
  for (const std::string& d : {root + "/a", root + "/a/b", deep}) {
    struct stat st {};
    REQUIRE(::stat(d.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0700);
  }
  // An existing directory keeps its mode; a file in the way is an error.
  REQUIRE(::chmod(deep.c_str(), 0750) == 0);
  REQUIRE(create_private_dirs(deep));
  struct stat st {};
  REQUIRE(::stat(deep.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0750);
  REQUIRE(write_file_atomic(root + "/file", "x"));
  auto blocked = create_private_dirs(root + "/file/sub");
  REQUIRE_FALSE(blocked);
  CHECK(blocked.error().code() == Errc::io);
}
