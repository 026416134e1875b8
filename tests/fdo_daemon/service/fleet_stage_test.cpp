// Two services ("hosts") over one profile store (one SQLite file opened by
// each, standing in for the shared PostgreSQL store of docs/fleet.md): a host
// that meets a program whose profile exists already compiles it optimized at
// its first stage (IK -> PK from the store, then the current profile).
#include "service_harness.h"

#include <catch2/catch.hpp>

using namespace fdo;
using namespace fdo::daemon;
using namespace fdo::daemon::testing;
using nlohmann::json;

namespace {

ServiceBuilder::StoreCreator shared_store(const std::string& path) {
  return [path](const Config&) -> Expected<std::unique_ptr<profile_store::ProfileStore>> {
    FDO_TRY(profile_store::ProfileStore store, profile_store::ProfileStore::open(path));
    return std::make_unique<profile_store::ProfileStore>(std::move(store));
  };
}

} // namespace

TEST_CASE("fleet: a host meeting a program with a stored profile starts optimized",
          "[service][fleet]") {
  TempDir shared("fdo-fleet");
  const std::string path = shared.str() + "/profiles.db";
  Harness a(Harness::base_config(), fake_exec, shared_store(path), "host-a");
  Harness b(Harness::base_config(), fake_exec, shared_store(path), "host-b");

  auto reg = a.call("program.register", {{"ir", "shared program"}});
  REQUIRE(reg);
  const std::string id = (*reg)["program"];
  // Host A profiles it: instrumented stages until the rewrite, then optimized.
  REQUIRE((*a.call("execute", {{"program", id}, {"entry", "main"}}))["stage"]["mode"] ==
          "instrumented");
  auto rewrite = a.call("execute", {{"program", id}, {"entry", "main"}});
  REQUIRE((*rewrite)["stage"]["profile_rewritten"]["to"] == 1);
  REQUIRE(a.service->flush_feedback());

  // Host B registers the same bytes (the same program id) and its very first
  // stage runs the optimized build of A's profile.
  auto reg_b = b.call("program.register", {{"ir", "shared program"}});
  REQUIRE(reg_b);
  REQUIRE((*reg_b)["program"] == id);
  auto first = b.call("execute", {{"program", id}, {"entry", "main"}});
  REQUIRE(first);
  CHECK((*first)["stage"]["mode"] == "optimized");
  CHECK((*first)["stage"]["profile_version"] == 1);
  CHECK((*first)["stage"]["cache"]["outcome"] == "compiled");

  // B's stages carry B's name, A's carried A's: the store keeps both hosts.
  auto second = b.call("execute", {{"program", id}, {"entry", "main"}});
  REQUIRE(second);
  REQUIRE(b.service->flush_feedback());
  auto store = profile_store::ProfileStore::open(path);
  REQUIRE(store);
  auto totals = store->feedback((*reg)["profile_key"].get<std::string>(), 1);
  REQUIRE(totals);
  REQUIRE(*totals);
  CHECK((*totals)->host_stages.count("host-b") == 1);
  CHECK((*totals)->host_stages.at("host-b") == 2);
  // The history names the writer.
  auto hist = store->history((*reg)["profile_key"].get<std::string>());
  REQUIRE(hist);
  CHECK(hist->back().host == "host-a");
  CHECK(hist->back().reason.find("evidence from host host-a") != std::string::npos);
}
