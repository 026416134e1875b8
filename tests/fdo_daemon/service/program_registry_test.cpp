#include "fakes.h"
#include "fdo/cache/keys.h"
#include "fdo/daemon/program_registry.h"
#include "fdo/util/fd.h"
#include "support/file_mode.h"
#include "support/temp_dir.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <sys/stat.h>
#include <thread>

using namespace fdo;
using namespace fdo::daemon;
using namespace fdo::daemon::testing;
using fdo::test_support::TempDir;

using fdo::test_support::mode_of;
using fdo::test_support::ScopedUmask;

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
  // Each tenant's IR was parsed for that tenant (in a worker bound to it).
  CHECK(f.analyzer.scopes == std::vector<std::string>{"uid:1000", "uid:1001"});

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
  cache::Program scoped{"", "uid:9", std::string("bit\0code", 8), ""};
  auto back = ProgramRegistry::decode_file(ProgramRegistry::encode_file(scoped));
  REQUIRE(back);
  CHECK(back->scope == "uid:9");
  CHECK(back->bytes == scoped.bytes);
  cache::Program unscoped{"", "", "define void @f() { ret void }", ""};
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

namespace {

std::string prog_path(const Fixture& f, const ProgramRef& rec) {
  return f.dir.file("programs/" + rec->ik + ".prog");
}

} // namespace

TEST_CASE("registry: the row records the program hash and the scoped profile key",
          "[service][registry]") {
  Fixture f;
  auto a = f.registry->add("program H", "h", 7, f.scope(7), kMax);
  REQUIRE(a);
  const ps::ProgramInfo& row = f.index.rows.at((*a)->ik);
  CHECK(row.program_hash == cache::program_hash("uid:7", "program H"));
  CHECK(row.program_hash != cache::program_hash("", "program H"));
  CHECK(row.pk == (*a)->pk);
}

TEST_CASE("registry: a .prog file replaced by another tenant is refused after a restart",
          "[service][registry]") {
  Fixture f;
  auto victim = f.registry->add("victim IR", "v", 1000, f.scope(1000), kMax);
  auto attacker = f.registry->add("attacker IR", "x", 1001, f.scope(1001), kMax);
  REQUIRE(victim);
  REQUIRE(attacker);
  const std::string path = prog_path(f, *victim);
  const std::string ik = (*victim)->ik;

  SECTION("the other tenant's file as it is") {
    std::filesystem::copy_file(prog_path(f, *attacker), path,
                               std::filesystem::copy_options::overwrite_existing);
  }
  SECTION("other bytes under the victim's own scope") {
    REQUIRE(
        write_file_atomic(path, ProgramRegistry::encode_file({"", "uid:1000", "attacker IR", ""})));
  }
  SECTION("the victim's bytes without their scope") {
    REQUIRE(write_file_atomic(path, ProgramRegistry::encode_file({"", "", "victim IR", ""})));
  }
  SECTION("a broken scope header") {
    REQUIRE(write_file_atomic(path, std::string("FDO-SCOPE\0uid:1000", 18)));
  }

  auto restarted = f.make();
  int analysed = f.analyzer.calls;
  auto back = restarted->find(ik, 1000, ProfileSharing::per_tenant);
  REQUIRE_FALSE(back);
  CHECK(back.error().code() == Errc::corrupt);
  CHECK_THAT(back.error().message(), Catch::Contains(path) &&
                                         Catch::Contains("refusing to run it") &&
                                         Catch::Contains("register the program again"));
  CHECK(f.analyzer.calls == analysed); // never handed to a worker
  CHECK(restarted->loaded() == 0);
  // Another tenant still learns nothing: not_found, as for an unknown id.
  auto other = restarted->find(ik, 1001, ProfileSharing::per_tenant);
  REQUIRE_FALSE(other);
  CHECK(other.error().code() == Errc::not_found);

  // The owner registering the program again writes the file anew.
  REQUIRE(restarted->add("victim IR", "v", 1000, f.scope(1000), kMax));
  auto again = f.make()->find(ik, 1000, ProfileSharing::per_tenant);
  REQUIRE(again);
  CHECK((*again)->program.bytes == "victim IR");
}

TEST_CASE("registry: a row from before program hashes is verified against its id",
          "[service][registry]") {
  Fixture f;
  auto a = f.registry->add("old program", "old", 7, f.scope(7), kMax);
  REQUIRE(a);
  const std::string ik = (*a)->ik, pk = (*a)->pk;
  auto forget_hash = [&] {
    ps::ProgramInfo& row = f.index.rows.at(ik);
    row.program_hash.clear();
    row.pk.clear();
  };

  SECTION("an intact file is accepted and its hash and profile key recorded") {
    forget_hash();
    auto back = f.make()->find(ik, 7, ProfileSharing::per_tenant);
    REQUIRE(back);
    CHECK((*back)->pk == pk);
    const ps::ProgramInfo& row = f.index.rows.at(ik);
    CHECK(row.program_hash == cache::program_hash("uid:7", "old program"));
    CHECK(row.pk == pk);
    CHECK(row.owner == 7);
    CHECK(row.name == "old");
  }
  SECTION("a replaced file is refused and nothing is recorded") {
    forget_hash();
    REQUIRE(write_file_atomic(prog_path(f, *a),
                              ProgramRegistry::encode_file({"", "uid:7", "new program", ""})));
    auto back = f.make()->find(ik, 7, ProfileSharing::per_tenant);
    REQUIRE_FALSE(back);
    CHECK(back.error().code() == Errc::corrupt);
    CHECK_THAT(back.error().message(),
               Catch::Contains(prog_path(f, *a)) &&
                   Catch::Contains("registered before program hashes were recorded"));
    CHECK(f.index.rows.at(ik).program_hash.empty());
  }
  SECTION("a verified row is not written again on the next load") {
    int adds = f.index.adds;
    REQUIRE(f.make()->find(ik, 7, ProfileSharing::per_tenant));
    CHECK(f.index.adds == adds);
  }
}

TEST_CASE("registry: programs/ is 0700 and .prog files 0600 under umask 022",
          "[service][registry]") {
  ScopedUmask mask(022);
  Fixture f;
  auto a = f.registry->add("private IR", "p", 7, f.scope(7), kMax);
  REQUIRE(a);
  CHECK(mode_of(f.dir.file("programs")) == 0700);
  CHECK(mode_of(prog_path(f, *a)) == 0600);
}
