#include "fakes.h"
#include "fdo/cache/keys.h"
#include "fdo/daemon/program_registry.h"
#include "fdo/util/fd.h"
#include "support/temp_dir.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <thread>

using namespace fdo;
using namespace fdo::daemon;
using namespace fdo::daemon::testing;
using fdo::test_support::TempDir;

namespace {

constexpr std::uint64_t kMax = 1 << 20;
const std::string kIdentity = "test-compiler";

std::string ik_of(const cache::Program& p) {
  return cache::initial_key(p.scope, p.bytes, kIdentity);
}

struct Fixture {
  TempDir dir{"fdo-registry"};
  FakeAnalyzer analyzer;
  FakeIndex index;
  std::unique_ptr<ProgramRegistry> registry = make();

  std::unique_ptr<ProgramRegistry> make() {
    return std::make_unique<ProgramRegistry>(dir.file("programs"), analyzer, index, ik_of);
  }
  TenantScope scope(std::int64_t uid) { return TenantScope::of(uid, ProfileSharing::per_tenant); }
};

} // namespace

TEST_CASE("registry: register - find - idempotent re-register", "[service][registry]") {
  Fixture f;
  auto a = f.registry->add("define i64 @main() { ret i64 1 }", "one", 1000, f.scope(1000), kMax);
  REQUIRE(a);
  CHECK((*a)->name == "one");
  CHECK((*a)->owner == 1000);
  CHECK((*a)->program.scope == "uid:1000");
  CHECK((*a)->program.bytes == "define i64 @main() { ret i64 1 }");
  CHECK((*a)->ik == ik_of((*a)->program));
  REQUIRE((*a)->entries.size() == 1);
  CHECK(std::filesystem::exists(f.dir.file("programs/" + (*a)->ik + ".prog")));
  CHECK(f.index.rows.count((*a)->ik) == 1);

  auto again = f.registry->add("define i64 @main() { ret i64 1 }", "", 1000, f.scope(1000), kMax);
  REQUIRE(again);
  CHECK(again->get() == a->get()); // same record
  CHECK(f.analyzer.calls == 1);    // not analysed twice
  CHECK(f.index.touches == 1);

  auto found = f.registry->find((*a)->ik, 1000, ProfileSharing::per_tenant);
  REQUIRE(found);
  CHECK(found->get() == a->get());
}

TEST_CASE("registry: a restart reloads from the state dir and the index", "[service][registry]") {
  Fixture f;
  auto a = f.registry->add("program A", "a", 7, f.scope(7), kMax);
  REQUIRE(a);
  std::string ik = (*a)->ik, pk = (*a)->pk;

  auto restarted = f.make();
  CHECK(restarted->loaded() == 0);
  auto back = restarted->find(ik, 7, ProfileSharing::per_tenant);
  REQUIRE(back);
  CHECK((*back)->name == "a");
  CHECK((*back)->pk == pk); // scope read back from the file: same scoped profile key
  CHECK((*back)->program.scope == "uid:7");
  CHECK((*back)->program.bytes == "program A");
  CHECK(restarted->loaded() == 1);
}

TEST_CASE("registry: a missing .prog file is a clear not_found", "[service][registry]") {
  Fixture f;
  auto a = f.registry->add("program B", "b", 7, f.scope(7), kMax);
  REQUIRE(a);
  std::filesystem::remove(f.dir.file("programs/" + (*a)->ik + ".prog"));
  auto restarted = f.make();
  auto back = restarted->find((*a)->ik, 7, ProfileSharing::per_tenant);
  REQUIRE_FALSE(back);
  CHECK(back.error().code() == Errc::not_found);
  CHECK_THAT(back.error().message(), Catch::Contains("IR is missing from the state dir"));
  // An unknown id says "register it first".
  auto unknown = restarted->find(std::string(64, 'e'), 7, ProfileSharing::per_tenant);
  REQUIRE_FALSE(unknown);
  CHECK_THAT(unknown.error().message(), Catch::Contains("register it first"));
}

TEST_CASE("registry: tenants are isolated - another tenant's program is not found",
          "[service][registry]") {
  Fixture f;
  auto mine = f.registry->add("same IR", "x", 1000, f.scope(1000), kMax);
  auto theirs = f.registry->add("same IR", "x", 1001, f.scope(1001), kMax);
  REQUIRE(mine);
  REQUIRE(theirs);
  CHECK((*mine)->ik != (*theirs)->ik);
  CHECK((*mine)->pk != (*theirs)->pk);

  auto denied = f.registry->find((*mine)->ik, 1001, ProfileSharing::per_tenant);
  REQUIRE_FALSE(denied);
  CHECK(denied.error().code() == Errc::not_found);
  auto unknown = f.registry->find(std::string(64, 'e'), 1001, ProfileSharing::per_tenant);
  REQUIRE_FALSE(unknown);
  CHECK(denied.error().message().substr(0, 11) == unknown.error().message().substr(0, 11));
  CHECK(denied.error().message().find("1000") == std::string::npos);

  // Also after a restart, when the record comes from the index.
  auto restarted = f.make();
  auto still = restarted->find((*mine)->ik, 1001, ProfileSharing::per_tenant);
  REQUIRE_FALSE(still);
  CHECK(still.error().code() == Errc::not_found);
  CHECK(restarted->find((*mine)->ik, 1001, ProfileSharing::shared));
}

TEST_CASE("registry: bad input - empty - oversized - reserved prefix - unparsable",
          "[service][registry]") {
  Fixture f;
  auto empty = f.registry->add("", "", 1, f.scope(1), kMax);
  REQUIRE_FALSE(empty);
  CHECK(empty.error().code() == Errc::invalid_argument);
  auto big = f.registry->add(std::string(100, 'x'), "", 1, f.scope(1), 99);
  REQUIRE_FALSE(big);
  CHECK(big.error().code() == Errc::resource_exhausted);
  auto forged = f.registry->add(std::string("FDO-SCOPE\0uid:2\nIR", 18), "", 1, f.scope(1), kMax);
  REQUIRE_FALSE(forged);
  CHECK(forged.error().code() == Errc::invalid_argument);
  auto bad = f.registry->add("bad IR", "", 1, f.scope(1), kMax);
  REQUIRE_FALSE(bad);
  CHECK(bad.error().code() == Errc::parse);
  CHECK(f.registry->loaded() == 0);
  CHECK(f.index.rows.empty());
}

TEST_CASE("registry: a failed index write registers nothing", "[service][registry]") {
  Fixture f;
  f.index.fail_adds = true;
  auto r = f.registry->add("program C", "", 1, f.scope(1), kMax);
  REQUIRE_FALSE(r);
  CHECK(r.error().code() == Errc::io);
  CHECK(f.registry->loaded() == 0);
  f.index.fail_adds = false;
  CHECK(f.registry->add("program C", "", 1, f.scope(1), kMax));
}

TEST_CASE("registry: .prog file round trip keeps scope and bytes", "[service][registry]") {
  cache::Program scoped{"", "uid:9", std::string("bit\0code", 8)};
  auto back = ProgramRegistry::decode_file(ProgramRegistry::encode_file(scoped));
  REQUIRE(back);
  CHECK(back->scope == "uid:9");
  CHECK(back->bytes == scoped.bytes);
  cache::Program unscoped{"", "", "define void @f() { ret void }"};
  CHECK(ProgramRegistry::encode_file(unscoped) == unscoped.bytes);
  auto broken = ProgramRegistry::decode_file(std::string("FDO-SCOPE\0uid:9", 15));
  REQUIRE_FALSE(broken);
  CHECK(broken.error().code() == Errc::corrupt);
}

TEST_CASE("registry: concurrent registrations of one program give one record",
          "[service][registry]") {
  Fixture f;
  std::vector<ProgramRef> got(8);
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i)
    threads.emplace_back([&, i] {
      auto r = f.registry->add("shared bytes", "", 3, f.scope(3), kMax);
      if (r) got[i] = *r;
    });
  for (auto& t : threads)
    t.join();
  for (const auto& g : got) {
    REQUIRE(g);
    CHECK(g.get() == got[0].get());
  }
  CHECK(f.registry->loaded() == 1);
}
