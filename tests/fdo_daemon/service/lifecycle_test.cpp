// Data lifecycle through the Service (over fake workers, a real store):
// the per-uid program limit and gc (dry run, real run, tenancy, pinned and
// recent kept, orphaned cache objects, audit records).
#include "fdo/profile_store/backup.h"
#include "fdo/profile_store/sqlite.h"
#include "service_harness.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <set>

using namespace fdo;
using namespace fdo::daemon;
using namespace fdo::daemon::testing;
using nlohmann::json;

TEST_CASE("service: a uid's registered programs are capped by max_programs_per_uid",
          "[service][limits]") {
  Config c = Harness::base_config();
  c.max_programs_per_uid = 2;
  Harness h(c);
  auto a = h.call("program.register", {{"ir", "program a"}});
  REQUIRE(h.call("program.register", {{"ir", "program b"}}));
  REQUIRE(a);
  auto third = h.call("program.register", {{"ir", "program c"}});
  REQUIRE_FALSE(third);
  CHECK_THAT(third.error().message(), Catch::Contains("max_programs_per_uid = 2"));
  CHECK_THAT(third.error().message(), Catch::Contains("has 2 programs registered"));
  // Inline IR on execute registers too, and is refused the same way.
  CHECK_FALSE(h.call("execute", {{"ir", "program c"}, {"entry", "main"}}));
  // Nothing was lost: both programs are listed and still run; the same bytes
  // again are no new program; another uid has its own allowance.
  auto mine = h.call("program.list", json::object());
  REQUIRE(mine);
  CHECK((*mine)["programs"].size() == 2);
  REQUIRE(h.call("execute", {{"program", (*a)["program"]}, {"entry", "main"}}));
  REQUIRE(h.call("program.register", {{"ir", "program a"}}));
  REQUIRE(h.call("program.register", {{"ir", "program c"}}, 1001));
  // Deleting one makes room.
  REQUIRE(h.call("program.delete", {{"program", (*a)["program"]}}));
  REQUIRE(h.call("program.register", {{"ir", "program c"}}));
}

namespace {

// Backdates rows the way weeks of disuse would leave them.
void age_rows(Harness& h, const std::string& table, const std::string& column,
              const std::string& key_column, const std::vector<std::string>& keys) {
  auto db = profile_store::sqlite::Connection::open((h.dir.path() / "profiles.db").string(),
                                                    profile_store::sqlite::Access::read_write);
  REQUIRE(db);
  db->set_busy_timeout(std::chrono::seconds(5));
  for (const std::string& k : keys)
    REQUIRE(db->exec("UPDATE " + table + " SET " + column + " = 1000 WHERE " + key_column + " = '" +
                     k + "'"));
}

std::set<std::string> cached_files_of(Harness& h, const std::string& ik) {
  std::set<std::string> out;
  auto root = h.dir.path() / "cache" / "objects";
  if (!std::filesystem::exists(root)) return out;
  for (const auto& f : std::filesystem::recursive_directory_iterator(root))
    if (f.path().filename().string().starts_with(ik)) out.insert(f.path().filename().string());
  return out;
}

std::set<std::string> ids(const json& list, const char* field) {
  std::set<std::string> out;
  for (const json& i : list)
    out.insert(i.is_string() ? i.get<std::string>() : i[field].get<std::string>());
  return out;
}

} // namespace

TEST_CASE("service: gc removes unused programs, stale unpinned profiles and orphaned objects",
          "[service][gc]") {
  Harness h;
  const uid_t me = 4242, other = 4243, root = 0;
  auto reg = [&](const char* ir, uid_t uid) {
    auto r = h.call("program.register", {{"ir", ir}}, uid);
    REQUIRE(r);
    return *r;
  };
  json a = reg("program a", me), b = reg("program b", me), c = reg("program c", me),
       d = reg("program d", other), e = reg("program e", me), f = reg("program f", me);
  std::string ia = a["program"], ib = b["program"], ic = c["program"], id = d["program"],
              ie = e["program"], i_f = f["program"], pa = a["profile_key"], pc = c["profile_key"];
  for (const json* p : {&a, &b, &c, &e, &f})
    for (int i = 0; i < 2; ++i)
      REQUIRE(h.call("execute", {{"program", (*p)["program"]}, {"entry", "main"}}, me));
  REQUIRE(h.call("profile.pin", {{"profile_key", pc}}, me));
  REQUIRE_FALSE(cached_files_of(h, ie).empty());
  REQUIRE(h.call("program.delete", {{"program", ie}}, me));
  CHECK(cached_files_of(h, ie).empty()); // a deleted program's objects go with it
  // Objects whose program row is gone without the daemon (a crash between the
  // two, an older fdod's delete): orphans, which only gc finds.
  REQUIRE_FALSE(cached_files_of(h, i_f).empty());
  {
    auto db = profile_store::sqlite::Connection::open((h.dir.path() / "profiles.db").string(),
                                                      profile_store::sqlite::Access::read_write);
    REQUIRE(db);
    db->set_busy_timeout(std::chrono::seconds(5));
    REQUIRE(db->exec("DELETE FROM programs WHERE ik = '" + i_f + "'"));
  }
  age_rows(h, "programs", "last_used", "ik", {ia, ic, id});
  age_rows(h, "profiles", "updated_at", "pk", {pa, pc});

  // A tenant's dry run: its own unused programs and stale unpinned profiles
  // not used by a remaining program; no cache objects; nothing removed.
  auto dry = h.call("gc", {{"dry_run", true}, {"max_age_s", 3600}}, me);
  REQUIRE(dry);
  CHECK((*dry)["scope"] == "own");
  CHECK(ids((*dry)["programs"], "program") == std::set<std::string>{ia, ic});
  CHECK(ids((*dry)["profiles"], "profile_key") == std::set<std::string>{pa});
  CHECK((*dry)["cache_objects"].empty());
  CHECK((*dry)["cache_objects_checked"] == false);
  auto listed = h.call("program.list", json::object(), me);
  REQUIRE(listed);
  CHECK((*listed)["programs"].size() == 3);
  // The default age (gc_max_age_days = 30) keeps everything used in the last month.
  auto by_default = h.call("gc", {{"dry_run", true}}, me);
  REQUIRE(by_default);
  CHECK(ids((*by_default)["programs"], "program") == std::set<std::string>{ia, ic});
  CHECK((*by_default)["max_age_s"] == 30 * 86400);

  // An operator's dry run also sees other tenants and the orphans: every
  // object of a program that is gone or would go, none of one that stays.
  auto all = h.call("gc", {{"dry_run", true}, {"max_age_s", 3600}}, root);
  REQUIRE(all);
  CHECK((*all)["scope"] == "all");
  CHECK(ids((*all)["programs"], "program") == std::set<std::string>{ia, ic, id});
  std::set<std::string> orphans = ids((*all)["cache_objects"], "");
  std::set<std::string> orphan_programs;
  for (const std::string& k : orphans)
    orphan_programs.insert(k.substr(0, 64));
  CHECK(orphan_programs.contains(i_f));
  CHECK_FALSE(orphan_programs.contains(ie)); // nothing of it is left
  CHECK_FALSE(orphan_programs.contains(ib));
  CHECK_FALSE(h.audit->records.back().action == "gc"); // dry runs leave no record

  // The real run removes exactly what the dry run listed.
  auto run = h.call("gc", {{"max_age_s", 3600}}, me);
  REQUIRE(run);
  CHECK(ids((*run)["programs"], "program") == std::set<std::string>{ia, ic});
  CHECK(ids((*run)["profiles"], "profile_key") == std::set<std::string>{pa});
  CHECK((*run)["errors"].empty());
  listed = h.call("program.list", json::object(), me);
  REQUIRE(listed);
  CHECK(ids((*listed)["programs"], "program") == std::set<std::string>{ib});
  CHECK_FALSE(h.call("profile.history", {{"profile_key", pa}}, me));
  auto pinned = h.call("profile.get", {{"profile_key", pc}}, me);
  REQUIRE(pinned); // pinned: kept although its program went
  CHECK_FALSE(h.call("execute", {{"program", ia}, {"entry", "main"}}, me));
  REQUIRE(h.call("execute", {{"program", ib}, {"entry", "main"}}, me));
  std::vector<std::string> trail;
  for (const auto& r : h.audit->records)
    if (r.action == "gc") trail.push_back(r.outcome + " " + r.program + r.profile_key);
  CHECK(trail.size() == 3);
  for (const std::string& t : trail)
    CHECK(t.starts_with("ok "));

  // The operator's run takes the other tenant's program and every orphan.
  auto swept = h.call("gc", {{"max_age_s", 3600}}, root);
  REQUIRE(swept);
  CHECK(ids((*swept)["programs"], "program") == std::set<std::string>{id});
  CHECK_FALSE((*swept)["cache_objects"].empty());
  CHECK(cached_files_of(h, i_f).empty());
  CHECK(cached_files_of(h, ia).empty());
  CHECK_FALSE(cached_files_of(h, ib).empty());
  auto again = h.call("gc", {{"dry_run", true}, {"max_age_s", 3600}}, root);
  REQUIRE(again);
  CHECK((*again)["programs"].empty());
  CHECK((*again)["profiles"].empty());
  CHECK((*again)["cache_objects"].empty());

  // Bad input is refused and removes nothing.
  CHECK_FALSE(h.call("gc", {{"max_age_s", -1}}, root));
  CHECK_FALSE(h.call("gc", {{"dry_run", "yes"}}, root));
}

TEST_CASE("service: store.restore puts a backup in place of the live store", "[service][restore]") {
  Harness h;
  const std::string db = (h.dir.path() / "profiles.db").string(),
                    copy = (h.dir.path() / "backup.db").string();
  auto a = h.call("program.register", {{"ir", "program a"}});
  REQUIRE(a);
  const std::string ia = (*a)["program"], pa = (*a)["profile_key"];
  for (int i = 0; i < 2; ++i)
    REQUIRE(h.call("execute", {{"program", ia}, {"entry", "main"}})); // pa v1
  REQUIRE(profile_store::backup_database(db, copy));

  // After the backup: pa is pinned and a second program is registered.
  REQUIRE(h.call("profile.pin", {{"profile_key", pa}}));
  auto b = h.call("program.register", {{"ir", "program b"}});
  REQUIRE(b);
  REQUIRE(h.call("execute", {{"program", (*b)["program"]}, {"entry", "main"}}));

  // Operators only; a relative path or a bad file changes nothing.
  CHECK_FALSE(h.call("store.restore", {{"file", copy}}, 1000));
  CHECK_FALSE(h.call("store.restore", {{"file", "backup.db"}}, 0));
  CHECK_FALSE(h.call("store.restore", {{"file", (h.dir.path() / "missing.db").string()}}, 0));
  auto pinned = h.call("profile.get", {{"profile_key", pa}});
  REQUIRE(pinned);
  CHECK((*pinned)["pinned"] == true);

  auto r = h.call("store.restore", {{"file", copy}}, 0);
  REQUIRE(r);
  CHECK((*r)["pages"].get<std::int64_t>() > 0);
  // The backup's state: pa at v1, unpinned; program b unknown (its row is
  // gone, and the daemon forgot what it had loaded); program a runs on.
  auto after = h.call("profile.get", {{"profile_key", pa}});
  REQUIRE(after);
  CHECK((*after)["pinned"] == false);
  CHECK((*after)["version"] == 1);
  CHECK_FALSE(h.call("execute", {{"program", (*b)["program"]}, {"entry", "main"}}));
  auto again = h.call("execute", {{"program", ia}, {"entry", "main"}});
  REQUIRE(again);
  auto listed = h.call("program.list", json::object());
  REQUIRE(listed);
  CHECK((*listed)["programs"].size() == 1);

  std::vector<std::string> trail;
  for (const auto& rec : h.audit->records)
    if (rec.action == "store.restore")
      trail.push_back(std::to_string(rec.tenant) + " " + rec.outcome);
  REQUIRE(trail.size() == 4);
  CHECK(trail[0] == "1000 permission_denied");
  CHECK(trail[1] == "0 invalid_argument");
  CHECK((trail[2].starts_with("0 ") && trail[2] != "0 ok")); // the missing file
  CHECK(trail[3] == "0 ok");
}
