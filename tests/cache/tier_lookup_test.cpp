// Tier lookup alone: which stored entries count for a stage, memory before
// disk, corrupt files, earlier outputs for a tier-up, and storing into both.
#include "fakes.h"
#include "fdo/cache/keys.h"
#include "tier_lookup.h"

#include <catch2/catch.hpp>
#include <fstream>
#include <thread>

using namespace fdo;
using namespace fdo::cache;
using namespace fdo::cache::detail;
using fdo::cache::testing::TempDir;

namespace {

const std::string kIdentity = "llvm-16;fdo-0.1;test";

// A stage's target for program `name` at profile `digest`.
struct Want {
  std::string ik, ck, identity = kIdentity;
  std::vector<std::string> candidates;
  Wanted view() const { return {ik, ck, identity, candidates}; }
};

Want want(const std::string& name, const std::string& digest) {
  Want w;
  w.ik = initial_key("", name, kIdentity);
  w.ck = cache_key(w.ik, digest, CompileMode::optimized);
  w.candidates = {virtual_key(w.ik), w.ck};
  return w;
}

std::shared_ptr<Entry> entry(const std::string& key, const std::string& ck,
                             const std::string& identity = kIdentity) {
  auto e = std::make_shared<Entry>();
  e->key = key;
  e->info.ck = ck;
  e->info.compiler_identity = identity;
  e->info.profile_digest = std::string(no_profile_digest());
  e->info.mode = CompileMode::optimized;
  e->object = "object for " + key;
  return e;
}

std::unique_ptr<TierLookup> tiers(const TempDir* dir) {
  auto memory = MemoryTier::create(64 << 20);
  REQUIRE(memory);
  std::unique_ptr<DiskTier> disk;
  if (dir) {
    DiskTierConfig c;
    c.root = dir->str();
    c.durability = Durability::none;
    auto d = DiskTier::open(c);
    REQUIRE(d);
    disk = std::move(*d);
  }
  return std::make_unique<TierLookup>(std::move(*memory), std::move(disk));
}

} // namespace

TEST_CASE("tier lookup: only an entry for the wanted CK and identity counts",
          "[cache][tier_lookup]") {
  auto t = tiers(nullptr);
  Want w = want("a", std::string(64, '1'));
  CHECK_FALSE(t->find_existing(w.view()).entry);
  // Under the VK but compiled for an older profile: a stale mapping, a miss.
  t->store(entry(w.candidates[0], cache_key(w.ik, std::string(64, '0'), CompileMode::optimized)),
           t->eviction_mark());
  CHECK_FALSE(t->find_existing(w.view()).entry);
  // Under CK but by another compiler: a miss.
  t->store(entry(w.ck, w.ck, "llvm-17"), t->eviction_mark());
  CHECK_FALSE(t->find_existing(w.view()).entry);
  t->store(entry(w.ck, w.ck), t->eviction_mark());
  Found f = t->find_existing(w.view());
  REQUIRE(f.entry);
  CHECK(f.source == Outcome::memory_hit);
  CHECK(f.key == w.ck);
  CHECK_FALSE(f.corrupt);
  CHECK(t->disk() == nullptr);
}

TEST_CASE("tier lookup: disk behind memory - one load - corrupt files reported",
          "[cache][tier_lookup][disk]") {
  TempDir dir;
  Want w = want("a", std::string(64, '1'));
  std::string vk = w.candidates[0];
  {
    auto t = tiers(&dir);
    t->store(entry(vk, w.ck), t->eviction_mark());
    REQUIRE(t->disk()->contains(vk));
  }
  auto t = tiers(&dir); // a restart: memory is empty
  Found f = t->find_existing(w.view());
  REQUIRE(f.entry);
  CHECK(f.source == Outcome::disk_hit);
  CHECK(f.key == vk);
  Found again = t->find_existing(w.view());
  CHECK(again.source == Outcome::memory_hit); // the load filled memory
  CHECK(t->disk()->stats().hits == 1);

  std::string path = t->disk()->path_for(vk);
  f = {};
  again = {};
  auto fresh = tiers(&dir);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << "not an entry";
  Found broken = fresh->find_existing(w.view());
  CHECK_FALSE(broken.entry);
  REQUIRE(broken.corrupt);
  CHECK(broken.corrupt->key == vk);
  CHECK_FALSE(broken.corrupt->problem.empty());
  CHECK_FALSE(fresh->disk()->contains(vk));
}

TEST_CASE("tier lookup: an earlier output for a tier-up - last served first then disk",
          "[cache][tier_lookup][disk]") {
  TempDir dir;
  Want old = want("a", std::string(64, '0'));
  Want now = want("a", std::string(64, '1'));
  {
    auto t = tiers(&dir);
    CHECK_FALSE(t->find_previous(now.view(), ""));
    t->store(entry(old.ck, old.ck), t->eviction_mark());
    // The wanted CK itself never counts as "earlier".
    t->store(entry(now.ck, now.ck), t->eviction_mark());
    EntryRef prev = t->find_previous(now.view(), old.ck);
    REQUIRE(prev);
    CHECK(prev->key == old.ck);
    // Another identity's output is not served either.
    Want other_compiler = now;
    other_compiler.identity = "llvm-17";
    CHECK_FALSE(t->find_previous(other_compiler.view(), old.ck));
  }
  auto t = tiers(&dir); // a restart: no history, the disk's newest file of this IK serves
  EntryRef prev = t->find_previous(now.view(), "");
  REQUIRE(prev);
  CHECK(prev->key == old.ck);
  Want other_program = want("b", std::string(64, '1'));
  CHECK_FALSE(t->find_previous(other_program.view(), ""));
}

TEST_CASE("tier lookup: eviction is remembered per tier", "[cache][tier_lookup][disk]") {
  TempDir dir;
  auto t = tiers(&dir);
  Want w = want("a", std::string(64, '1'));
  t->store(entry(w.ck, w.ck), t->eviction_mark());
  CHECK(t->evicted_from(w.ck) == EvictedFrom::neither);
  CHECK(t->evict_prefix(w.ik) == 2); // one entry in each tier
  CHECK(t->evicted_from(w.ck) == EvictedFrom::both);
  CHECK_FALSE(t->find_existing(w.view()).entry);
}

TEST_CASE("tier lookup: once an eviction returns, a store racing it has left nothing behind",
          "[cache][tier_lookup][disk]") {
  // A compile of a program being deleted stores its output while the delete
  // sweeps the tiers: whichever comes first, nothing of the program is in
  // the disk tier once evict_prefix has returned (it waits for the stores
  // that began before it; a store that begins after it writes nothing), nor
  // in memory once the compiler's handle is released.
  TempDir dir;
  auto memory = MemoryTier::create(64 << 20);
  REQUIRE(memory);
  DiskTierConfig c;
  c.root = dir.str();
  c.durability = Durability::fsync; // the file appears, then the directory's fsync: a window
  auto disk = DiskTier::open(c);
  REQUIRE(disk);
  auto t = std::make_unique<TierLookup>(std::move(*memory), std::move(*disk));
  for (int round = 0; round < 40; ++round) {
    Want w = want("racing" + std::to_string(round), std::string(64, '1'));
    auto e = entry(w.ck, w.ck);
    e->object.assign(std::size_t{4} << 20, 'o'); // a disk write that takes a while
    const std::uint64_t mark = t->eviction_mark();
    std::thread compile([&] { (void)t->store(e, mark); });
    std::this_thread::sleep_for(std::chrono::microseconds(200 * (round % 20)));
    t->evict_prefix(w.ik);
    CHECK_FALSE(t->disk()->contains(w.ck));
    compile.join(); // the compiler's handle released: memory frees it too
    CHECK_FALSE(t->disk()->contains(w.ck));
    CHECK_FALSE(t->find_existing(w.view()).entry);
  }
}

TEST_CASE("tier lookup: an output stored after its program's eviction is dropped again",
          "[cache][tier_lookup][disk]") {
  TempDir dir;
  auto t = tiers(&dir);
  Want a = want("a", std::string(64, '1')), b = want("b", std::string(64, '1'));
  const std::uint64_t before = t->eviction_mark();
  CHECK(t->evict_prefix(a.ik) == 0); // a is deleted while its compile runs
  CHECK(t->eviction_mark() == before + 1);

  // Its compile began before the eviction: stored, then dropped from both
  // tiers; the handle still serves whoever compiled it.
  EntryRef late = t->store(entry(a.ck, a.ck), before);
  REQUIRE(late);
  CHECK(late->key == a.ck);
  late = {}; // the compiling stage is done with it
  CHECK_FALSE(t->find_existing(a.view()).entry);
  CHECK_FALSE(t->disk()->contains(a.ck));
  CHECK(t->dropped_after_evict() == 1);
  // Another program's compile of the same age is not touched.
  t->store(entry(b.ck, b.ck), before);
  CHECK(t->find_existing(b.view()).entry);
  CHECK(t->disk()->contains(b.ck));
  // A compile that began after the eviction stores as usual.
  t->store(entry(a.ck, a.ck), t->eviction_mark());
  CHECK(t->find_existing(a.view()).entry);
  CHECK(t->dropped_after_evict() == 1);

  // When the evictions since a compile began outrun what is remembered, its
  // output is dropped to be safe (a later miss, never an orphan).
  const std::uint64_t old = t->eviction_mark();
  for (int i = 0; i < 4100; ++i) {
    std::string gone = "f";
    gone += std::to_string(i);
    t->evict_prefix(gone);
  }
  Want c = want("c", std::string(64, '1'));
  t->store(entry(c.ck, c.ck), old);
  CHECK_FALSE(t->find_existing(c.view()).entry);
  CHECK(t->dropped_after_evict() == 2);
}
