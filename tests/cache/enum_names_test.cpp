// Every cache enum has one spelling table: each value prints as its own name
// and, for TierUp, parses back.
#include "fdo/cache/disk_tier.h"
#include "fdo/cache/keys.h"
#include "fdo/cache/orchestrator.h"

#include <catch2/catch.hpp>
#include <set>

using namespace fdo;
using namespace fdo::cache;

namespace {

template <class E> void check_distinct(std::initializer_list<std::pair<E, std::string_view>> all) {
  std::set<std::string_view> seen;
  for (auto [value, name] : all) {
    INFO(name);
    CHECK(to_string(value) == name);
    CHECK(seen.insert(to_string(value)).second);
  }
}

} // namespace

TEST_CASE("cache enums print their documented names", "[cache][names]") {
  check_distinct<TierUp>({{TierUp::async, "async"}, {TierUp::sync, "sync"}});
  check_distinct<Outcome>({{Outcome::memory_hit, "memory_hit"},
                           {Outcome::disk_hit, "disk_hit"},
                           {Outcome::compiled, "compiled"},
                           {Outcome::joined, "joined"},
                           {Outcome::tier_up_pending, "tier_up_pending"},
                           {Outcome::background_compiled, "background_compiled"},
                           {Outcome::failed, "failed"}});
  check_distinct<Reason>({{Reason::new_program, "new_program"},
                          {Reason::compiler_identity_changed, "compiler_identity_changed"},
                          {Reason::virtual_first_stage, "virtual_first_stage"},
                          {Reason::virtual_key_mapping, "virtual_key_mapping"},
                          {Reason::cache_key, "cache_key"},
                          {Reason::profile_rewritten, "profile_rewritten"},
                          {Reason::evicted, "evicted"},
                          {Reason::corrupt_on_disk, "corrupt_on_disk"},
                          {Reason::not_cached, "not_cached"}});
  check_distinct<LoadStatus>(
      {{LoadStatus::hit, "hit"}, {LoadStatus::miss, "miss"}, {LoadStatus::corrupt, "corrupt"}});
  check_distinct<KeyKind>({{KeyKind::initial, "initial"},
                           {KeyKind::virtual_key, "virtual"},
                           {KeyKind::cache_key, "cache"},
                           {KeyKind::invalid, "invalid"}});
}

TEST_CASE("parse_tier_up reads what to_string writes and names the alternatives",
          "[cache][names]") {
  for (TierUp t : {TierUp::async, TierUp::sync})
    CHECK(parse_tier_up(to_string(t)).value() == t);
  auto bad = parse_tier_up("Async");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().code() == Errc::invalid_argument);
  CHECK(bad.error().message() == "unknown tier-up policy \"Async\" (expected async or sync)");
}
