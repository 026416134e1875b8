#include "fakes.h"
#include "fdo/cache/keys.h"
#include "fdo/cache/memory_tier.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <random>
#include <thread>

using namespace fdo;
using namespace fdo::cache;

namespace {

std::shared_ptr<const Entry> make_entry(const std::string& name, std::size_t object_bytes) {
  auto e = std::make_shared<Entry>();
  e->key = virtual_key(initial_key("", name, "id"));
  e->object = std::string(object_bytes, 'o');
  e->info.ck = cache_key(initial_key("", name, "id"), "none", CompileMode::instrumented);
  return e;
}

std::string key_of(const std::string& name) {
  return virtual_key(initial_key("", name, "id"));
}

std::unique_ptr<MemoryTier> tier_for(std::uint64_t budget) {
  auto t = MemoryTier::create(budget);
  REQUIRE(t);
  return std::move(*t);
}

// Budget for exactly `n` entries of `object_bytes` each.
std::uint64_t budget_for(int n, std::size_t object_bytes) {
  return n * make_entry("probe", object_bytes)->size_bytes();
}

} // namespace

TEST_CASE("memory tier: zero budget keeps an entry only while it is held", "[cache][memory]") {
  auto tier = tier_for(0);
  {
    EntryRef held = tier->insert(make_entry("a", 100));
    REQUIRE(held);
    EntryRef again = tier->lookup(key_of("a"));
    REQUIRE(again); // a second user of a held entry shares it
    CHECK(again.get() == held.get());
    CHECK(held->object.size() == 100);
  }
  CHECK_FALSE(tier->contains(key_of("a")));
  CHECK_FALSE(tier->lookup(key_of("a")));
  auto s = tier->stats();
  CHECK(s.entries == 0);
  CHECK(s.bytes == 0);
}

TEST_CASE("memory tier: lookup returns a counted reference that copies share", "[cache][memory]") {
  auto tier = tier_for(1 << 20);
  CHECK_FALSE(tier->lookup(key_of("a")));
  {
    EntryRef inserted = tier->insert(make_entry("a", 100));
    CHECK(tier->references(key_of("a")) == 1);
    EntryRef looked = tier->lookup(key_of("a"));
    REQUIRE(looked);
    CHECK(looked.get() == inserted.get());
    CHECK(tier->references(key_of("a")) == 2);
    EntryRef copy = looked;
    CHECK(tier->references(key_of("a")) == 2);
    CHECK(copy->object.size() == 100);
  }
  CHECK(tier->references(key_of("a")) == 0);
  CHECK(tier->contains(key_of("a"))); // unreferenced but within budget: stays cached
  auto s = tier->stats();
  CHECK(s.entries == 1);
  CHECK(s.hits == 1);
  CHECK(s.misses == 1);
}

TEST_CASE("memory tier: LRU eviction under the byte budget", "[cache][memory]") {
  auto tier = tier_for(budget_for(3, 1000));
  for (auto name : {"a", "b", "c"})
    (void)tier->insert(make_entry(name, 1000));
  CHECK(tier->stats().entries == 3);
  (void)tier->lookup(key_of("a")); // a becomes most recent; b is now the oldest
  (void)tier->insert(make_entry("d", 1000));
  CHECK(tier->contains(key_of("a")));
  CHECK_FALSE(tier->contains(key_of("b")));
  CHECK(tier->was_evicted(key_of("b")));
  CHECK(tier->contains(key_of("c")));
  CHECK(tier->contains(key_of("d")));
  auto s = tier->stats();
  CHECK(s.bytes <= s.budget_bytes);
  CHECK(s.evictions == 1);
  CHECK(s.deferred_frees == 0);
}

TEST_CASE("memory tier: a held entry survives eviction pressure and is freed after release",
          "[cache][memory]") {
  auto tier = tier_for(budget_for(2, 1000));
  EntryRef held = tier->insert(make_entry("held", 1000));
  for (int i = 0; i < 10; ++i)
    (void)tier->insert(make_entry(fdo::cache::testing::numbered("other", i), 1000));
  // Marked for eviction, not freed: the running stage still reads it.
  CHECK(tier->contains(key_of("held")));
  CHECK(tier->is_marked(key_of("held")));
  CHECK(held->object == std::string(1000, 'o'));
  auto s = tier->stats();
  CHECK(s.held_entries == 1);
  CHECK(s.held_bytes == held->size_bytes());
  CHECK(s.bytes <= s.budget_bytes);
  CHECK(s.deferred_frees == 1);
  held.reset();
  CHECK_FALSE(tier->contains(key_of("held")));
  s = tier->stats();
  CHECK(s.held_entries == 0);
  CHECK(s.held_bytes == 0);
  CHECK_FALSE(tier->lookup(key_of("held")));
}

TEST_CASE("memory tier: a lookup of a marked entry un-marks it", "[cache][memory]") {
  auto tier = tier_for(budget_for(2, 1000));
  EntryRef held = tier->insert(make_entry("a", 1000));
  (void)tier->insert(make_entry("b", 1000));
  (void)tier->insert(make_entry("c", 1000)); // a (oldest) is marked
  REQUIRE(tier->is_marked(key_of("a")));
  EntryRef again = tier->lookup(key_of("a"));
  REQUIRE(again);
  CHECK(again.get() == held.get());
  CHECK_FALSE(tier->is_marked(key_of("a")));
  CHECK(tier->stats().unmarked == 1);
  // a is most recent again; b was the oldest unmarked and made room.
  CHECK_FALSE(tier->contains(key_of("b")));
  held.reset();
  again.reset();
  CHECK(tier->contains(key_of("a"))); // un-marked: survives its release
}

TEST_CASE("memory tier: replacing a held key keeps the old entry alive for its holder",
          "[cache][memory]") {
  auto tier = tier_for(1 << 20);
  EntryRef old_ref = tier->insert(make_entry("a", 10));
  auto fresh = std::make_shared<Entry>(*make_entry("a", 20));
  EntryRef new_ref = tier->insert(fresh);
  CHECK(old_ref->object.size() == 10);
  CHECK(new_ref->object.size() == 20);
  CHECK(tier->lookup(key_of("a"))->object.size() == 20);
  CHECK(tier->stats().held_entries == 1);
  old_ref.reset();
  auto s = tier->stats();
  CHECK(s.held_entries == 0);
  CHECK(s.entries == 1);
}

TEST_CASE("memory tier: an entry larger than the budget lives only while held", "[cache][memory]") {
  auto tier = tier_for(500);
  EntryRef big = tier->insert(make_entry("big", 5000));
  CHECK(big->object.size() == 5000);
  CHECK(tier->is_marked(key_of("big")));
  big.reset();
  CHECK_FALSE(tier->contains(key_of("big")));
}

TEST_CASE("memory tier: handles may outlive the tier", "[cache][memory]") {
  EntryRef survivor;
  {
    auto tier = tier_for(1 << 20);
    survivor = tier->insert(make_entry("a", 64));
  }
  CHECK(survivor->object.size() == 64);
  survivor.reset();
}

TEST_CASE("memory tier: evict_prefix marks one program's entries", "[cache][memory]") {
  auto tier = tier_for(1 << 20);
  (void)tier->insert(make_entry("a", 10));
  EntryRef held = tier->insert(make_entry("b", 10));
  std::string ik_b = initial_key("", "b", "id");
  CHECK(tier->evict_prefix(ik_b) == 1);
  CHECK(tier->contains(key_of("a")));
  CHECK(tier->is_marked(key_of("b")));
  held.reset();
  CHECK_FALSE(tier->contains(key_of("b")));
}

TEST_CASE("memory tier: concurrent use keeps the accounting consistent", "[cache][memory]") {
  auto tier = tier_for(budget_for(8, 256));
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      std::vector<EntryRef> held;
      for (int i = 0; i < 3000; ++i) {
        std::string name = fdo::cache::testing::numbered("p", rng() % 32);
        EntryRef r = tier->lookup(key_of(name));
        if (!r) r = tier->insert(make_entry(name, 256));
        if (r->key != key_of(name)) bad++;
        if (rng() % 4 == 0) held.push_back(r);
        if (held.size() > 5) held.erase(held.begin());
      }
    });
  for (auto& th : threads)
    th.join();
  CHECK(bad == 0);
  auto s = tier->stats();
  CHECK(s.bytes <= s.budget_bytes);
  CHECK(s.held_entries == 0);
  CHECK(s.held_bytes == 0);
  CHECK(s.entries <= 8);
}
