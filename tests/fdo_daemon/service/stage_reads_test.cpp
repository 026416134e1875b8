// The warm path through the Service over its default SQLite store: once a
// program is steady (optimized, a memory hit, nothing rewritten), its stages
// read nothing from the store's file (profile_store's read view), and every
// change an operator makes (pin, reset, import, delete, gc, restore) is seen
// by the very next stage — over SQLite and, where a server can be started
// here, over PostgreSQL (a fresh database on a private server per binary).
#include "fdo/profile_store/backup.h"
#include "service_harness.h"
#include "support/postgres_server.h"
#include "support/skip.h"

#include <catch2/catch.hpp>
#include <iostream>
#include <libpq-fe.h>
#include <memory>
#include <stdexcept>
#include <thread>

using namespace fdo;
using namespace fdo::daemon;
using namespace fdo::daemon::testing;
using nlohmann::json;

namespace {

enum class StoreKind { sqlite, postgresql };

// A new empty database on this binary's PostgreSQL server (started on first use).
std::string fresh_postgres_database() {
  static std::unique_ptr<test_support::PostgresServer> server =
      std::make_unique<test_support::PostgresServer>();
  static int counter = 0;
  const std::string name =
      "fdo_stage" + std::to_string(::getpid()) + "_" + std::to_string(++counter);
  PGconn* c = PQconnectdb(server->conninfo("postgres").c_str());
  std::string error;
  if (PQstatus(c) != CONNECTION_OK) {
    error = PQerrorMessage(c);
  } else {
    PGresult* r = PQexec(c, ("CREATE DATABASE " + name).c_str());
    if (PQresultStatus(r) != PGRES_COMMAND_OK) error = PQresultErrorMessage(r);
    PQclear(r);
  }
  PQfinish(c);
  if (!error.empty()) throw std::runtime_error("CREATE DATABASE " + name + ": " + error);
  return "postgresql:///" + name + "?host=" + server->socket_dir() + "&user=postgres";
}

// The stores the operation tests run over: PostgreSQL only where a server
// can be started here (the reason is printed otherwise).
std::vector<StoreKind> store_kinds() {
  static const std::vector<StoreKind> kinds = [] {
    std::vector<StoreKind> k{StoreKind::sqlite};
    if (test_support::PostgresServer::available()) k.push_back(StoreKind::postgresql);
    return k;
  }();
  // The SQLite part runs; the case reads as skipped, not passed.
  if (kinds.size() == 1)
    test_support::note_skip("stage path over PostgreSQL " +
                            test_support::PostgresServer::skip_reason());
  return kinds;
}

// The harness's config over `kind`, the guard off (no trials: a program stays on one build).
Config on_store(StoreKind kind) {
  Config c = Harness::base_config();
  c.guard.mode = GuardMode::off;
  if (kind == StoreKind::postgresql) c.profile_store = fresh_postgres_database();
  return c;
}

#define FOR_EACH_STORE(kind)                                                                       \
  const StoreKind kind = GENERATE(from_range(store_kinds()));                                      \
  INFO("store: " << (kind == StoreKind::sqlite ? "sqlite" : "postgresql"))

std::uint64_t database_reads(Harness& h) {
  auto health = h.call("health", json::object());
  REQUIRE(health);
  REQUIRE((*health)["profile_store"]["database_reads"].is_number_unsigned());
  return (*health)["profile_store"]["database_reads"].get<std::uint64_t>();
}

// Compiled objects in the memory tier.
std::int64_t memory_entries(Harness& h) {
  auto st = h.call("cache.stats", json::object(), 0);
  REQUIRE(st);
  return (*st)["memory"]["entries"].get<std::int64_t>();
}

json stage(Harness& h, const std::string& id) {
  auto r = h.call("execute", {{"program", id}, {"entry", "main"}});
  REQUIRE(r);
  return (*r)["stage"];
}

// Runs stages until one is optimized, a memory hit, with nothing rewritten.
void settle(Harness& h, const std::string& id) {
  for (int i = 0; i < 20; ++i) {
    json st = stage(h, id);
    if (st["mode"] == "optimized" && st["cache"]["outcome"] == "memory_hit" &&
        st["profile_rewritten"].is_null())
      return;
  }
  FAIL("the program did not settle in 20 stages");
}

} // namespace

TEST_CASE("stage path: a steady program's stages read nothing from the store",
          "[service][stage_path]") {
  Config c = Harness::base_config();
  c.guard.mode = GuardMode::off; // no trials: the program stays on one build
  Harness h(c);
  auto reg = h.call("program.register", {{"ir", "steady program"}});
  REQUIRE(reg);
  const std::string id = (*reg)["program"];
  settle(h, id);
  const std::uint64_t before = database_reads(h);
  for (int i = 0; i < 30; ++i) {
    json st = stage(h, id);
    REQUIRE(st["mode"] == "optimized");
    REQUIRE(st["cache"]["outcome"] == "memory_hit");
  }
  CHECK(database_reads(h) == before);
}

TEST_CASE("stage path: after pin, reset and import the next stage serves what they imply",
          "[service][stage_path]") {
  FOR_EACH_STORE(kind);
  Harness h(on_store(kind));
  auto reg = h.call("program.register", {{"ir", "changing program"}});
  REQUIRE(reg);
  const std::string id = (*reg)["program"];
  const std::string pk = (*reg)["profile_key"];
  settle(h, id);
  const std::int64_t settled = stage(h, id)["profile_version"];

  // Reset: the next stage has no profile, so it runs instrumented code again.
  REQUIRE(h.call("profile.reset", {{"profile_key", pk}}));
  json after_reset = stage(h, id);
  CHECK(after_reset["mode"] == "instrumented");
  settle(h, id);
  const std::int64_t again = stage(h, id)["profile_version"];
  CHECK(again > settled);

  // Pin: stages go on serving the pinned version, and feedback does not rewrite it.
  REQUIRE(h.call("profile.pin", {{"profile_key", pk}}));
  for (int i = 0; i < 4; ++i) {
    json st = stage(h, id);
    CHECK(st["profile_version"] == again);
    CHECK(st["profile_rewritten"].is_null());
  }
  REQUIRE(h.call("profile.unpin", {{"profile_key", pk}}));

  // Export and import over it with a new body (an operator write in between
  // moves the current version on): the next stage compiles the imported one.
  auto exported = h.call("profile.export", {{"profile_keys", json::array({pk})}});
  REQUIRE(exported);
  json bundle = (*exported)["bundle"];
  REQUIRE(h.call("profile.reset", {{"profile_key", pk}}));
  auto imported = h.call("profile.import", {{"bundle", bundle}});
  REQUIRE(imported);
  json after_import = stage(h, id);
  CHECK(after_import["mode"] == "optimized");
  CHECK(after_import["profile_version"].get<std::int64_t>() > again);
}

TEST_CASE("stage path: after store.restore the next stage serves the restored profile, "
          "its lifecycle started over",
          "[service][stage_path]") {
  Config c = Harness::base_config();
  c.guard.mode = GuardMode::off;
  Harness h(c);
  const std::string db = (h.dir.path() / "profiles.db").string(),
                    copy = (h.dir.path() / "backup.db").string();
  auto reg = h.call("program.register", {{"ir", "restored program"}});
  REQUIRE(reg);
  const std::string id = (*reg)["program"], pk = (*reg)["profile_key"];
  settle(h, id);
  const std::int64_t backed_up = stage(h, id)["profile_version"];
  REQUIRE(h.service->flush_feedback());
  REQUIRE(profile_store::backup_database(db, copy));

  // After the backup: reset and profiled again, so the live store moves on.
  REQUIRE(h.call("profile.reset", {{"profile_key", pk}}));
  settle(h, id);
  REQUIRE(stage(h, id)["profile_version"].get<std::int64_t>() > backed_up);

  REQUIRE(h.call("store.restore", {{"file", copy}}, 0));
  json first = stage(h, id);
  CHECK(first["profile_version"] == backed_up);
  CHECK(first["mode"] == "optimized");
  // The daemon met the key afresh: its lifecycle began again at this stage.
  REQUIRE(first["lifecycle"].is_object());
  REQUIRE_FALSE(first["lifecycle"]["transitions"].empty());
  CHECK(first["lifecycle"]["transitions"][0]["stage"] == first["number"]);
}

TEST_CASE("stage path: program.delete drops the program's compiled objects",
          "[service][stage_path]") {
  FOR_EACH_STORE(kind);
  Harness h(on_store(kind));
  auto reg = h.call("program.register", {{"ir", "deleted program"}});
  REQUIRE(reg);
  const std::string id = (*reg)["program"];
  settle(h, id);
  REQUIRE(memory_entries(h) > 0);
  REQUIRE(h.call("program.delete", {{"program", id}}));
  CHECK(memory_entries(h) == 0);
  // Registered again, it compiles afresh (instrumented: its mappings went too).
  REQUIRE(h.call("program.register", {{"ir", "deleted program"}}));
  json again = stage(h, id);
  CHECK(again["cache"]["outcome"] == "compiled");
}

TEST_CASE("stage path: after gc the next stage of a program registered again starts afresh",
          "[service][stage_path]") {
  FOR_EACH_STORE(kind);
  Harness h(on_store(kind));
  auto reg = h.call("program.register", {{"ir", "collected program"}});
  REQUIRE(reg);
  const std::string id = (*reg)["program"], pk = (*reg)["profile_key"];
  settle(h, id);
  REQUIRE(h.service->flush_feedback());
  REQUIRE(memory_entries(h) > 0);

  // Nothing is old enough yet: gc keeps everything and the program stays steady.
  auto kept = h.call("gc", {{"max_age_s", 3600}}, 0);
  REQUIRE(kept);
  CHECK((*kept)["programs"].empty());
  CHECK((*kept)["profiles"].empty());
  json steady = stage(h, id);
  CHECK(steady["mode"] == "optimized");
  CHECK(steady["cache"]["outcome"] == "memory_hit");

  // Everything older than now goes: the program, its profile, its objects.
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  auto gone = h.call("gc", {{"max_age_s", 0}}, 0);
  REQUIRE(gone);
  REQUIRE((*gone)["errors"].empty());
  REQUIRE((*gone)["programs"].size() == 1);
  CHECK((*gone)["programs"][0]["program"] == id);
  REQUIRE((*gone)["profiles"].size() == 1);
  CHECK((*gone)["profiles"][0]["profile_key"] == pk);
  CHECK(memory_entries(h) == 0);
  auto missing = h.call("execute", {{"program", id}, {"entry", "main"}});
  REQUIRE_FALSE(missing);

  // Registered again: no profile, no mappings, no object: compiled instrumented.
  REQUIRE(h.call("program.register", {{"ir", "collected program"}}));
  json again = stage(h, id);
  CHECK(again["cache"]["outcome"] == "compiled");
  CHECK(again["mode"] == "instrumented");
  CHECK(again["profile_version"] == 0);
}
