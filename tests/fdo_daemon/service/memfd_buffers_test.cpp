// Checking and reading the descriptors of execute's memfd buffers: a hostile
// client's unsealed, writable, foreign or oversized descriptors are refused
// with a message naming which and why.
#include "fdo/daemon/memfd_buffers.h"

#include <catch2/catch.hpp>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

using namespace fdo;
using namespace fdo::daemon;

namespace {

Fd memfd_with(std::string_view bytes, int seals) {
  Fd fd(::memfd_create("memfd-buffers-test", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  REQUIRE(fd);
  REQUIRE(::write(fd.get(), bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()));
  if (seals != 0) REQUIRE(::fcntl(fd.get(), F_ADD_SEALS, seals) == 0);
  return fd;
}

std::vector<Fd> one(Fd fd) {
  std::vector<Fd> v;
  v.push_back(std::move(fd));
  return v;
}

} // namespace

TEST_CASE("memfd buffers: sealed memfds are read whole and in order", "[service][memfd]") {
  std::vector<Fd> fds;
  fds.push_back(memfd_with("first", required_buffer_seals()));
  fds.push_back(memfd_with("", required_buffer_seals() | F_SEAL_SEAL));
  fds.push_back(memfd_with(std::string(100000, 'x'), required_buffer_seals()));
  auto got = read_memfd_buffers(fds, 1 << 20);
  REQUIRE(got);
  REQUIRE(got->size() == 3);
  CHECK((*got)[0] == "first");
  CHECK((*got)[1].empty());
  CHECK((*got)[2] == std::string(100000, 'x'));
}

TEST_CASE("memfd buffers: what a hostile client may send is refused", "[service][memfd]") {
  auto refused = [](std::vector<Fd> fds, std::size_t budget = 1 << 20) {
    auto got = read_memfd_buffers(fds, budget);
    REQUIRE_FALSE(got);
    return got.error();
  };
  SECTION("unsealed") {
    auto e = refused(one(memfd_with("abc", 0)));
    CHECK(e.code() == Errc::invalid_argument);
    CHECK_THAT(e.message(), Catch::Contains("descriptor 0") &&
                                Catch::Contains("F_SEAL_WRITE|F_SEAL_GROW|F_SEAL_SHRINK"));
  }
  SECTION("writable after sending") {
    auto e = refused(one(memfd_with("abc", F_SEAL_GROW | F_SEAL_SHRINK)));
    CHECK_THAT(e.message(), Catch::Contains("lacks the seals F_SEAL_WRITE:"));
  }
  SECTION("may still shrink") {
    auto e = refused(one(memfd_with("abc", F_SEAL_WRITE | F_SEAL_GROW)));
    CHECK_THAT(e.message(), Catch::Contains("lacks the seals F_SEAL_SHRINK:"));
  }
  SECTION("not a memfd") {
    int p[2];
    REQUIRE(::pipe2(p, O_CLOEXEC) == 0);
    Fd r(p[0]), w(p[1]);
    std::vector<Fd> fds;
    fds.push_back(memfd_with("ok", required_buffer_seals()));
    fds.push_back(std::move(r));
    auto e = refused(std::move(fds));
    CHECK_THAT(e.message(), Catch::Contains("descriptor 1") && Catch::Contains("is not a memfd"));
  }
  SECTION("over the budget, all of them together") {
    std::vector<Fd> fds;
    fds.push_back(memfd_with(std::string(600, 'a'), required_buffer_seals()));
    fds.push_back(memfd_with(std::string(600, 'b'), required_buffer_seals()));
    auto e = refused(std::move(fds), 1000);
    CHECK(e.code() == Errc::resource_exhausted);
    CHECK_THAT(e.message(), Catch::Contains("descriptor 1") && Catch::Contains("exceed 1000"));
  }
}
