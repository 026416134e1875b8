// The identity history alone: an LRU in front of one small file per program.
#include "fakes.h"
#include "fdo/cache/keys.h"
#include "fdo/util/fd.h"
#include "identity_history.h"

#include <catch2/catch.hpp>
#include <fstream>

using namespace fdo;
using namespace fdo::cache;
using namespace fdo::cache::detail;
using fdo::cache::testing::TempDir;
namespace fs = std::filesystem;

namespace {

std::string file_of(const TempDir& dir, const std::string& hash) {
  return dir.str() + "/" + hash.substr(0, 2) + "/" + hash;
}

} // namespace

TEST_CASE("identity history: a new instance over the same dir remembers",
          "[cache][identity_history]") {
  TempDir dir;
  std::string hash = program_hash("", "module a");
  std::string other = program_hash("uid:1", "module a");
  {
    IdentityHistory h(dir.str(), 16);
    CHECK_FALSE(h.last_identity(hash));
    h.remember(hash, "llvm-16", std::string(64, 'a'));
    CHECK(h.last_identity(hash) == "llvm-16");
  }
  REQUIRE(fs::exists(file_of(dir, hash)));
  IdentityHistory h(dir.str(), 16);
  CHECK(h.last_identity(hash) == "llvm-16");
  CHECK_FALSE(h.last_identity(other));
  h.remember(hash, "llvm-17", std::string(64, 'b'));
  CHECK(IdentityHistory(dir.str(), 16).last_identity(hash) == "llvm-17");
}

TEST_CASE("identity history: a damaged file reads as unknown", "[cache][identity_history]") {
  TempDir dir;
  std::string hash = program_hash("", "module a");
  {
    IdentityHistory h(dir.str(), 16);
    h.remember(hash, "llvm-16", std::string(64, 'a'));
  }
  std::string path = file_of(dir, hash);
  for (std::string damaged : {std::string(), std::string("{\"identity\":"), std::string("[1,2]"),
                              std::string("{\"identity\":16}"), std::string("{\"ik\":\"x\"}"),
                              std::string(4096, '\xff')}) {
    INFO(damaged.substr(0, 20));
    std::ofstream(path, std::ios::binary | std::ios::trunc) << damaged;
    IdentityHistory h(dir.str(), 16);
    CHECK_FALSE(h.last_identity(hash));
  }
  // A directory where the file should be: unknown, and remembering only logs.
  fs::remove(path);
  fs::create_directories(path);
  IdentityHistory h(dir.str(), 16);
  CHECK_FALSE(h.last_identity(hash));
  h.remember(hash, "llvm-17", std::string(64, 'b'));
  CHECK(h.last_identity(hash) == "llvm-17"); // still known in memory
  fs::remove_all(path);
  // A rewrite after damage is readable again.
  std::ofstream(path, std::ios::binary | std::ios::trunc) << "garbage";
  IdentityHistory fresh(dir.str(), 16);
  fresh.remember(hash, "llvm-18", std::string(64, 'c'));
  CHECK(IdentityHistory(dir.str(), 16).last_identity(hash) == "llvm-18");
}

TEST_CASE("identity history: writes only on a change - never outside its dir - memory only "
          "without one",
          "[cache][identity_history]") {
  TempDir dir;
  std::string hash = program_hash("", "module a");
  IdentityHistory h(dir.str(), 16);
  h.remember(hash, "llvm-16", std::string(64, 'a'));
  REQUIRE(fs::remove(file_of(dir, hash)));
  h.remember(hash, "llvm-16", std::string(64, 'a')); // unchanged: no rewrite
  CHECK_FALSE(fs::exists(file_of(dir, hash)));
  h.remember(hash, "llvm-17", std::string(64, 'a'));
  CHECK(fs::exists(file_of(dir, hash)));

  // Only a key-shaped hash names a file.
  h.remember("../escaped", "llvm-16", std::string(64, 'a'));
  fs::path parent = fs::path(dir.str()).parent_path();
  CHECK_FALSE(fs::exists(parent / "escaped"));
  CHECK_FALSE(fs::exists(parent.parent_path() / "escaped"));
  CHECK(h.last_identity("../escaped") == "llvm-16"); // in memory only

  IdentityHistory memory_only("", 2);
  memory_only.remember("h1", "id1", "ik1");
  memory_only.remember("h2", "id2", "ik2");
  CHECK(memory_only.last_identity("h1") == "id1");
  memory_only.remember("h3", "id3", "ik3"); // h2 is now the least recently used
  CHECK_FALSE(memory_only.last_identity("h2"));
  CHECK(memory_only.last_identity("h1") == "id1");
  CHECK(memory_only.last_identity("h3") == "id3");
}
