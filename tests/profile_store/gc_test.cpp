// plan_gc: which programs and profiles garbage collection would remove —
// unused and stale ones only, never a pinned profile or one a remaining
// program uses, only the given owner's when one is given. Runs against both
// back ends (backends.h).
#include "backends.h"
#include "fdo/profile_store/gc.h"
#include "fdo/util/time.h"
#include "test_util.h"

#include <catch2/catch.hpp>

using namespace fdo;
using namespace fdo::profile_store;
using fdo::profile_store::test::sample_doc;

namespace {

std::string key(char c) {
  return std::string(64, c);
}

constexpr std::int64_t kDay = 86'400'000;

std::vector<std::string> iks(const GcPlan& p) {
  std::vector<std::string> out;
  for (const auto& i : p.programs)
    out.push_back(i.ik);
  return out;
}
std::vector<std::string> pks(const GcPlan& p) {
  std::vector<std::string> out;
  for (const auto& i : p.profiles)
    out.push_back(i.pk);
  return out;
}

} // namespace

TEST_CASE("gc plan: stale programs and unused unpinned profiles, by owner", "[profile_store][gc]") {
  STORE_DIR(dir);
  auto store = ProfileStore::open(dir.file("profiles.db"));
  REQUIRE(store);
  WriteInfo w;
  w.owner = 1000;
  // p1 (old) -> profile A; p2 (recent) -> profile B; p3 (old, uid 2000).
  // Profile C: old, no program. Profile D: old, pinned. Profile E: recent.
  auto program = [&](char c, std::int64_t owner, char pk) {
    ProgramInfo p{key(c), std::string(1, c), 10, owner, 0, 0};
    p.pk = key(pk);
    REQUIRE(store->register_program(p));
  };
  program('1', 1000, 'a');
  program('2', 1000, 'b');
  program('3', 2000, 'f');
  for (char pk : {'a', 'b', 'c', 'd', 'e'})
    REQUIRE(store->write(key(pk), 0, sample_doc(1), w));
  REQUIRE(store->pin(key('d')));
  // What weeks of disuse leave behind.
  dir.exec_sql("profiles.db", "UPDATE programs SET last_used = 5 WHERE ik IN ('" + key('1') +
                                  "', '" + key('3') + "')");
  dir.exec_sql("profiles.db", "UPDATE profiles SET updated_at = 5 WHERE pk IN ('" + key('a') +
                                  "', '" + key('b') + "', '" + key('c') + "', '" + key('d') + "')");

  GcCriteria c;
  c.max_age = std::chrono::milliseconds(kDay);
  c.now_ms = unix_ms_now();
  c.owner = 1000;
  auto plan = plan_gc(*store, c);
  REQUIRE(plan);
  CHECK(iks(*plan) == std::vector<std::string>{key('1')});
  // a: its only program goes; b: old but p2 stays; c: no program; d: pinned; e: recent.
  CHECK(pks(*plan) == std::vector<std::string>{key('a'), key('c')});
  CHECK(plan->kept_programs == std::set<std::string>{key('2'), key('3')});
  CHECK(plan->cutoff_ms == c.now_ms - kDay);

  c.owner.reset();
  plan = plan_gc(*store, c);
  REQUIRE(plan);
  CHECK(iks(*plan) == std::vector<std::string>{key('1'), key('3')});
  CHECK(plan->kept_programs == std::set<std::string>{key('2')});

  // Planning reads only.
  auto still = store->programs();
  REQUIRE(still);
  CHECK(still->size() == 3);

  // A long enough age keeps everything; a negative one is refused.
  c.max_age = std::chrono::milliseconds(std::int64_t(365) * kDay * 100);
  plan = plan_gc(*store, c);
  REQUIRE(plan);
  CHECK(plan->programs.empty());
  CHECK(plan->profiles.empty());
  c.max_age = std::chrono::milliseconds(-1);
  auto bad = plan_gc(*store, c);
  REQUIRE_FALSE(bad);
  CHECK(bad.error().code() == Errc::invalid_argument);
}
