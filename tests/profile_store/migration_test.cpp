// Schema migrations: a database created at every older schema version, with
// data in it, opens with the current code, keeps its data and ends with
// exactly the schema a fresh database has.
#include "fdo/profile_store/profile_store.h"
#include "fdo/profile_store/sqlite.h"
#include "fdo/profile_store/testing.h"
#include "test_util.h"

#include <catch2/catch.hpp>

using namespace fdo;
using namespace fdo::profile_store;
using fdo::profile_store::test::read_bytes;
using fdo::profile_store::test::sample_doc;
using fdo::profile_store::test::TempDir;

namespace {

const std::string kPk(64, 'a');
const std::string kIk(64, '1');

sqlite::Connection raw(const std::string& path) {
  auto c = sqlite::Connection::open(path, sqlite::Access::read_write);
  if (!c) FAIL(c.error().describe());
  return std::move(*c);
}

void exec(sqlite::Connection& db, const std::string& sql) {
  auto s = db.exec(sql);
  if (!s) FAIL(s.error().describe());
}

std::string schema_dump(const std::string& path) {
  auto db = raw(path);
  auto st = db.prepare("SELECT type, name, tbl_name, sql FROM sqlite_schema ORDER BY name");
  REQUIRE(st);
  std::string out;
  while (*st->step())
    out += st->column_text(0) + " " + st->column_text(1) + " " + st->column_text(2) + ": " +
           st->column_text(3) + "\n";
  return out;
}

// Data as a build that knew only `version` migrations would have written it.
void insert_data_at(const std::string& path, int version) {
  auto db = raw(path);
  exec(db, "PRAGMA foreign_keys = ON");
  if (version >= 1) {
    for (int v = 1; v <= 2; ++v) {
      ProfileDoc doc = sample_doc(static_cast<std::uint64_t>(v));
      doc.provenance.reason = "old";
      std::string body = canonical_json(to_json(doc));
      auto st = db.prepare(
          "INSERT INTO profile_versions (pk, version, digest, body, functions, source, reason, "
          "author, host, stage, program, created_at) VALUES (?1, ?2, ?3, ?4, 2, 'feedback', "
          "'old', 1000, 'old-host', 4, ?5, 1700000000000)");
      REQUIRE(st);
      if (v == 1)
        exec(db, "INSERT INTO profiles (pk, owner, current_version, last_version, pinned, "
                 "updated_at) VALUES ('" +
                     kPk + "', 1000, 1, 1, 1, 1700000000000)");
      st->bind(1, kPk).bind(2, v).bind(3, profile_digest(doc)).bind(4, body).bind(5, kIk);
      REQUIRE(st->run());
    }
    exec(db, "UPDATE profiles SET current_version = 2, last_version = 2");
    exec(db, "INSERT INTO profile_keys (ik, pk, updated_at) VALUES ('" + kIk + "', '" + kPk +
                 "', 1700000000001)");
    exec(db, "INSERT INTO virtual_keys (ck, vk, updated_at) VALUES ('ck-old', 'vk-old', "
             "1700000000002)");
  }
  if (version >= 2)
    exec(db, "INSERT INTO programs (ik, name, size, owner, first_seen, last_used) VALUES ('" + kIk +
                 "', 'old-program.ll', 4096, 1000, 1700000000001, 1700000000001)");
  // A v5 build's register_program records the program's profile key.
  if (version >= 5) exec(db, "UPDATE programs SET pk = '" + kPk + "' WHERE ik = '" + kIk + "'");
  if (version >= 3 && version < 6) {
    exec(db, "INSERT INTO feedback (pk, version, stages, exec_ns, updated_at) VALUES ('" + kPk +
                 "', 2, 5, 5000, 1700000000003)");
    exec(db, "INSERT INTO feedback_counters (pk, version, name, value) VALUES ('" + kPk +
                 "', 2, 'cycles', 123)");
    exec(db, "INSERT INTO feedback_function_counts (pk, version, function, counts) VALUES ('" +
                 kPk + "', 2, 'main', x'0300000000000000')");
  }
  if (version >= 6) { // the same evidence, kept per host since v6 (host '': not known)
    exec(db, "INSERT INTO feedback (pk, version, host, stages, exec_ns, updated_at) VALUES ('" +
                 kPk + "', 2, '', 5, 5000, 1700000000003)");
    exec(db, "INSERT INTO feedback_counters (pk, version, host, name, value) VALUES ('" + kPk +
                 "', 2, '', 'cycles', 123)");
    exec(db, "INSERT INTO feedback_function_counts (pk, version, host, function, counts) "
             "VALUES ('" +
                 kPk + "', 2, '', 'main', x'0300000000000000')");
    // Applied just now: batch ids are kept for a while, not for ever.
    exec(db, "INSERT INTO feedback_batches (batch_id, applied_at) VALUES ('old-batch', "
             "CAST(strftime('%s', 'now') AS INTEGER) * 1000)");
  }
}

} // namespace

TEST_CASE("migrations upgrade a database from every older schema version",
          "[profile_store][migration]") {
  const int latest = testing::latest_schema_version();
  REQUIRE(latest >= 3);
  TempDir dir;
  const std::string fresh = dir.file("fresh.db");
  REQUIRE(testing::create_database_at_version(fresh, latest));
  const std::string fresh_schema = schema_dump(fresh);

  for (int version = 0; version < latest; ++version) {
    DYNAMIC_SECTION("from schema version " << version) {
      std::string path = dir.file("v" + std::to_string(version) + ".db");
      REQUIRE(testing::create_database_at_version(path, version));
      insert_data_at(path, version);
      {
        auto db = raw(path);
        CHECK(*db.query_int("PRAGMA user_version") == version);
      }

      // An old database is not for read-only use until upgraded, and the
      // refusal leaves it alone.
      Options ro;
      ro.mode = OpenMode::read_only;
      std::string before = read_bytes(path);
      auto refused = ProfileStore::open(path, ro);
      REQUIRE_FALSE(refused);
      CHECK(refused.error().message().find(path) != std::string::npos);
      CHECK(read_bytes(path) == before);

      auto store = ProfileStore::open(path);
      REQUIRE(store);
      CHECK(*store->schema_version() == latest);
      CHECK(store->integrity_check());
      CHECK(schema_dump(path) == fresh_schema);

      if (version >= 1) {
        auto cur = store->current(kPk);
        REQUIRE(cur);
        REQUIRE(cur->has_value());
        CHECK((*cur)->version == 2);
        CHECK((*cur)->pinned);
        CHECK((*cur)->host == "old-host");
        CHECK((*cur)->doc.functions.at("fn0").counts[0] == 2);
        CHECK(store->history(kPk)->size() == 2);
        CHECK(**store->lookup_profile_key(kIk) == kPk);
        CHECK(**store->lookup_virtual_key("ck-old") == "vk-old");
        // v2 backfilled the registry from the profile key mapping.
        auto prog = store->program(kIk);
        REQUIRE(prog);
        REQUIRE(prog->has_value());
        CHECK((*prog)->owner == 1000);
        CHECK((*prog)->first_seen == 1700000000001);
        if (version >= 2) {
          CHECK((*prog)->name == "old-program.ll");
          CHECK((*prog)->size == 4096);
        } else {
          CHECK((*prog)->name.empty());
        }
        // v5: the profile key comes from the profile key mapping; the program
        // hash needs the bytes, so it stays unknown.
        CHECK((*prog)->pk == kPk);
        CHECK((*prog)->program_hash.empty());
        CHECK(*store->owns_program_with_profile_key(1000, kPk));
        // New writes continue the old numbering, through every new table.
        WriteInfo wi;
        wi.source = WriteSource::operator_;
        REQUIRE(*store->write(kPk, 2, sample_doc(3), wi) == 3);
        std::vector<FeedbackRow> rows = {{kPk, 2, 1, 1, {{"cycles", 1}}, {{"main", {1}}}}};
        REQUIRE(store->append_feedback(rows));
        auto fb = store->feedback(kPk, 2);
        REQUIRE(fb);
        REQUIRE(fb->has_value());
        if (version >= 3) {
          CHECK((*fb)->stages == 6);
          // v6: rows from before hosts were recorded belong to host "".
          CHECK((*fb)->host_stages == std::map<std::string, std::uint64_t>{{"", 6}});
          CHECK((*fb)->counters.at("cycles") == 124);
          CHECK((*fb)->function_counts.at("main") == std::vector<std::uint64_t>{4});
        } else {
          CHECK((*fb)->stages == 1);
        }
        // v6: a batch applied before the upgrade is still known.
        if (version >= 6) {
          auto again = store->append_feedback(rows, "old-batch");
          REQUIRE(again);
          CHECK(again->duplicate);
        }
        // v7: the versions' rows, children and all, moved to a rowid table.
        auto two = store->get(kPk, 2);
        REQUIRE(two);
        REQUIRE(two->has_value());
        CHECK((*two)->reason == "old");
        CHECK((*two)->doc.functions.at("fn0").counts[0] == 2);
        // v4: mappings made before it have no program and survive remove_mappings.
        REQUIRE(store->put_virtual_key("ck-new", "vk-new", kIk));
        auto removed = store->remove_mappings(kIk);
        REQUIRE(removed);
        CHECK(removed->virtual_keys == 1);
        CHECK(**store->lookup_virtual_key("ck-old") == "vk-old");
      } else {
        CHECK(store->list()->empty());
      }
      CHECK(store->integrity_check());
    }
  }
}

TEST_CASE("every migration has a description and re-running migrations is a no-op",
          "[profile_store][migration]") {
  for (int v = 1; v <= testing::latest_schema_version(); ++v)
    CHECK_FALSE(testing::migration_description(v).empty());
  TempDir dir;
  std::string path = dir.file("m.db");
  REQUIRE(testing::create_database_at_version(path, testing::latest_schema_version()));
  std::string schema = schema_dump(path);
  // Opening twice (as two processes starting together would) applies nothing twice.
  REQUIRE(testing::create_database_at_version(path, testing::latest_schema_version()));
  REQUIRE(ProfileStore::open(path));
  CHECK(schema_dump(path) == schema);
}

TEST_CASE("v7: profile versions are a rowid table whose body is the last column",
          "[profile_store][migration]") {
  TempDir dir;
  const std::string path = dir.file("v7.db");
  REQUIRE(testing::create_database_at_version(path, testing::latest_schema_version()));
  auto db = raw(path);
  auto sql = db.query_text("SELECT sql FROM sqlite_schema WHERE name = 'profile_versions'");
  REQUIRE(sql);
  CHECK_THAT(*sql, !Catch::Contains("WITHOUT ROWID"));
  auto last = db.query_text("SELECT name FROM pragma_table_info('profile_versions') "
                            "ORDER BY cid DESC LIMIT 1");
  REQUIRE(last);
  CHECK(*last == "body");
}

TEST_CASE("v7: a child row without its parent stops the rebuild - nothing changes",
          "[profile_store][migration]") {
  TempDir dir;
  const std::string path = dir.file("orphan.db");
  REQUIRE(testing::create_database_at_version(path, 6));
  insert_data_at(path, 6);
  {
    // Only a hand-edited file has one: fdo writes with foreign keys on.
    auto db = raw(path);
    exec(db, "INSERT INTO feedback (pk, version, host, stages, exec_ns, updated_at) VALUES ('" +
                 kPk + "', 9, '', 1, 1, 1700000000009)");
  }
  auto r = ProfileStore::open(path);
  REQUIRE_FALSE(r);
  CHECK(r.error().code() == Errc::corrupt);
  CHECK_THAT(r.error().message(), Catch::Contains("schema version 7") &&
                                      Catch::Contains("'feedback' without its parent"));
  auto db = raw(path);
  CHECK(*db.query_int("PRAGMA user_version") == 6);
  CHECK(*db.query_int("SELECT count(*) FROM profile_versions") == 2);
  auto sql = db.query_text("SELECT sql FROM sqlite_schema WHERE name = 'profile_versions'");
  REQUIRE(sql);
  CHECK_THAT(*sql, Catch::Contains("WITHOUT ROWID"));
  CHECK(*db.query_int("SELECT count(*) FROM sqlite_schema WHERE name = 'profile_versions_v7'") ==
        0);
  // Foreign keys were on again for what follows on that connection: the
  // refusal happened before the store took the file.
}

TEST_CASE("a database with a newer schema version is refused and not touched",
          "[profile_store][migration]") {
  TempDir dir;
  std::string path = dir.file("new.db");
  {
    auto store = ProfileStore::open(path);
    REQUIRE(store);
    REQUIRE(store->write(kPk, 0, sample_doc(1), {}));
  }
  {
    auto db = raw(path);
    exec(db, "PRAGMA user_version = " + std::to_string(testing::latest_schema_version() + 1));
  }
  std::string before = read_bytes(path);
  for (OpenMode mode : {OpenMode::read_write, OpenMode::read_only}) {
    Options o;
    o.mode = mode;
    auto r = ProfileStore::open(path, o);
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::unsupported);
    CHECK(r.error().message().find(path) != std::string::npos);
    CHECK(r.error().message().find("newer") != std::string::npos);
    CHECK(read_bytes(path) == before);
  }
}

TEST_CASE("v4 to v5: programs registered by the v4 code path keep working and learn their hash",
          "[profile_store][migration]") {
  REQUIRE(testing::latest_schema_version() >= 5);
  TempDir dir;
  const std::string path = dir.file("v4.db");
  REQUIRE(testing::create_database_at_version(path, 4));
  const std::string compiled(64, '2'), never_compiled(64, '3'), other_pk(64, 'c');
  {
    // What v4's register_program and put_profile_key wrote.
    auto db = raw(path);
    for (const std::string& ik : {compiled, never_compiled})
      exec(db, "INSERT INTO programs (ik, name, size, owner, first_seen, last_used) VALUES ('" +
                   ik +
                   "', 'p.ll', 10, 1000, 1700000000000, 1700000000000) "
                   "ON CONFLICT (ik) DO UPDATE SET name = excluded.name, size = excluded.size, "
                   "last_used = MAX(programs.last_used, excluded.last_used)");
    exec(db, "INSERT INTO profile_keys (ik, pk, updated_at) VALUES ('" + compiled + "', '" +
                 other_pk + "', 1700000000000)");
  }

  auto store = ProfileStore::open(path);
  REQUIRE(store);
  CHECK(*store->schema_version() == testing::latest_schema_version());
  auto a = store->program(compiled);
  auto b = store->program(never_compiled);
  REQUIRE(a);
  REQUIRE(b);
  REQUIRE(a->has_value());
  REQUIRE(b->has_value());
  CHECK((*a)->pk == other_pk);
  CHECK((*a)->program_hash.empty());
  CHECK((*b)->pk.empty());
  CHECK((*b)->program_hash.empty());
  CHECK(*store->owns_program_with_profile_key(1000, other_pk));
  CHECK_FALSE(*store->owns_program_with_profile_key(2000, other_pk));

  // The daemon verifies an old program's file and records what it learned;
  // from then on the hash is fixed.
  ProgramInfo verified = **a;
  verified.program_hash = std::string(64, 'h');
  auto recorded = store->register_program(verified);
  REQUIRE(recorded);
  CHECK(recorded->program_hash == verified.program_hash);
  CHECK(recorded->first_seen == 1700000000000);
  CHECK(recorded->owner == 1000);
  verified.program_hash = std::string(64, 'x');
  CHECK(store->register_program(verified).error().code() == Errc::conflict);
  CHECK((*store->program(compiled))->program_hash == std::string(64, 'h'));
  CHECK(store->integrity_check());
}
