// The Service over fake workers and a real state dir, for what a hostile
// tenant or a damaged state dir could do: importing a profile under another
// tenant's future key, a .prog file replaced behind the daemon's back, a
// profiles.db that vanished, and state files readable by others.
#include "fakes.h"
#include "fdo/daemon/service.h"
#include "fdo/daemon/tenant.h"
#include "fdo/jit/compiler.h"
#include "service_harness.h"
#include "support/file_mode.h"
#include "support/temp_dir.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <filesystem>
#include <sys/stat.h>

using namespace fdo;
using namespace fdo::daemon;
using namespace fdo::daemon::testing;
using fdo::test_support::TempDir;
using nlohmann::json;
namespace fs = std::filesystem;

using fdo::test_support::mode_of;
using fdo::test_support::ScopedUmask;

namespace {

Config base_config(const std::string& state_dir) {
  Config c;
  c.state_dir = state_dir;
  c.tier_up = TierUp::sync;
  c.policy.min_stages = 2;
  c.policy.min_counts = 100;
  return c;
}

Expected<std::unique_ptr<Service>> build(const Config& c,
                                         FakeRunner::Fn compile = FakeRunner::Fn(fake_compile)) {
  return ServiceBuilder(c)
      .runners([compile](WorkerRole role, const Config&,
                         auto&&...) -> Expected<std::unique_ptr<JobRunner>> {
        return std::unique_ptr<JobRunner>(std::make_unique<FakeRunner>(
            std::string(to_string(role)),
            role == WorkerRole::compile ? compile : FakeRunner::Fn(fake_exec)));
      })
      .perf_probe([](const Config&, JobRunner&) {
        return json{{"pmu", false}};
      })
      .sandbox_probe([] { return testing::test_host(); })
      .host_name("test-host")
      .create();
}

// One daemon over a state dir; restart() stops it and starts another on the
// same directory.
struct Daemon {
  Config config;
  std::unique_ptr<Service> service;
  std::unique_ptr<Dispatcher> dispatcher;

  FakeRunner::Fn compile = FakeRunner::Fn(fake_compile);

  explicit Daemon(Config c) : config(std::move(c)) { start(); }
  Daemon(Config c, FakeRunner::Fn compile_fn)
      : config(std::move(c)), compile(std::move(compile_fn)) {
    start();
  }

  void start() {
    auto s = build(config, compile);
    if (!s) FAIL(s.error().describe());
    service = std::move(*s);
    dispatcher = std::make_unique<Dispatcher>();
    service->register_methods(*dispatcher);
  }
  void stop() {
    dispatcher.reset();
    service.reset();
  }
  void restart() {
    stop();
    start();
  }

  // The result, or the JSON-RPC error object.
  struct Reply {
    json result;
    json error;
    bool ok() const { return error.is_null(); }
  };
  Reply call(const std::string& method, const json& params, uid_t uid) {
    CallContext ctx;
    ctx.uid = uid;
    json req = {{"jsonrpc", "2.0"}, {"id", 1}, {"method", method}, {"params", params}};
    auto line = dispatcher->handle_line(req.dump(), ctx);
    REQUIRE(line);
    json resp = json::parse(*line);
    if (resp.contains("error")) return {json(), resp["error"]};
    return {resp["result"], json()};
  }
  json ok(const std::string& method, const json& params, uid_t uid) {
    Reply r = call(method, params, uid);
    INFO(method << " failed: " << r.error.dump());
    REQUIRE(r.ok());
    return r.result;
  }
};

// Registers `ir` for `uid` and runs stages until its profile has version 1.
std::pair<std::string, std::string> profiled_program(Daemon& d, const std::string& ir, uid_t uid) {
  json reg = d.ok("program.register", {{"ir", ir}}, uid);
  for (int i = 0; i < 2; ++i)
    d.ok("execute", {{"program", reg["program"]}, {"entry", "main"}}, uid);
  json prof = d.ok("profile.get", {{"profile_key", reg["profile_key"]}}, uid);
  REQUIRE(prof["version"] == 1);
  return {reg["program"], reg["profile_key"]};
}

// The bundle of one profile, its key changed to `pk`.
json bundle_as(Daemon& d, const std::string& from_pk, uid_t owner, const std::string& pk) {
  json exported =
      d.ok("profile.export", {{"profile_keys", json::array({from_pk})}}, owner)["bundle"];
  exported["profiles"][0]["pk"] = pk;
  return exported;
}

// The key the fake analyzer and the tenant scope give `ir` for `uid`.
std::string future_profile_key(const std::string& ir, uid_t uid) {
  return TenantScope::of(uid, ProfileSharing::per_tenant).profile_key(blake3_hex(ir));
}

// What a request about a key the caller may not see answers, with the key
// taken out, so two answers can be compared.
json without(json error, const std::string& pk) {
  std::string m = error["message"];
  for (std::size_t at; (at = m.find(pk)) != std::string::npos;)
    m.replace(at, pk.size(), "<pk>");
  error["message"] = m;
  return error;
}

constexpr uid_t kAlice = 1000, kMallory = 1001, kCarol = 1002;

} // namespace

TEST_CASE("service: profile.import cannot claim another tenant's future profile key",
          "[service][tenant]") {
  TempDir dir{"fdo-service-state"};
  Daemon d(base_config(dir.str()));
  auto [alice_id, alice_pk] = profiled_program(d, "alice's program", kAlice);
  auto [mallory_id, mallory_pk] = profiled_program(d, "mallory's program", kMallory);
  const json mallorys =
      d.ok("profile.export", {{"profile_keys", json::array({mallory_pk})}}, kMallory)["bundle"];

  // Carol's key is predictable from her uid and her IR before she registers it.
  const std::string carol_ir = "carol's program";
  const std::string carol_pk = future_profile_key(carol_ir, kCarol);
  auto squat = d.call("profile.import", {{"bundle", bundle_as(d, mallory_pk, kMallory, carol_pk)}},
                      kMallory);
  REQUIRE_FALSE(squat.ok());
  CHECK(squat.error["data"]["code"] == "not_found");
  CHECK_THAT(squat.error["message"].get<std::string>(), Catch::Contains("no profile " + carol_pk));
  // It reads exactly like importing over a key that exists with another
  // owner, and names nothing but the key Mallory sent.
  auto foreign = d.call("profile.import",
                        {{"bundle", bundle_as(d, mallory_pk, kMallory, alice_pk)}}, kMallory);
  REQUIRE_FALSE(foreign.ok());
  CHECK(without(squat.error, carol_pk) == without(foreign.error, alice_pk));
  CHECK(squat.error["message"].get<std::string>().find(mallory_pk) == std::string::npos);
  // And like any other key no program of Mallory's uses.
  const std::string random_pk(64, '7');
  auto stray = d.call("profile.import", {{"bundle", bundle_as(d, mallory_pk, kMallory, random_pk)}},
                      kMallory);
  REQUIRE_FALSE(stray.ok());
  CHECK(without(stray.error, random_pk) == without(squat.error, carol_pk));

  // Carol registers and finds her key free: no profile yet, her first
  // stages build it, and she may import over it.
  json reg = d.ok("program.register", {{"ir", carol_ir}}, kCarol);
  CHECK(reg["profile_key"] == carol_pk);
  auto none = d.call("profile.get", {{"profile_key", carol_pk}}, kCarol);
  REQUIRE_FALSE(none.ok());
  CHECK(none.error["data"]["code"] == "not_found");
  json imported =
      d.ok("profile.import", {{"bundle", bundle_as(d, mallory_pk, kMallory, carol_pk)}}, kCarol);
  CHECK(imported["imported"][0]["profile_key"] == carol_pk);
  CHECK(d.ok("profile.get", {{"profile_key", carol_pk}}, kCarol)["version"] == 1);
  d.ok("execute", {{"program", reg["program"]}, {"entry", "main"}}, kCarol);

  // Mallory still imports into her own profile, and may create the key of a
  // program of hers that has no profile yet.
  d.ok("profile.import", {{"bundle", mallorys}}, kMallory);
  json second = d.ok("program.register", {{"ir", "mallory's second program"}}, kMallory);
  d.ok("profile.import", {{"bundle", bundle_as(d, mallory_pk, kMallory, second["profile_key"])}},
       kMallory);
  CHECK(d.ok("profile.get", {{"profile_key", second["profile_key"]}}, kMallory)["version"] == 1);

  // The rule holds after a restart, from the registry's rows.
  d.restart();
  const std::string dave_pk = future_profile_key("dave's program", 1003);
  CHECK_FALSE(
      d.call("profile.import", {{"bundle", bundle_as(d, mallory_pk, kMallory, dave_pk)}}, kMallory)
          .ok());
  d.ok("profile.import", {{"bundle", bundle_as(d, carol_pk, kCarol, carol_pk)}}, kCarol);
}

TEST_CASE("service: with shared profiles an import creates any key, as before", "[service]") {
  TempDir dir{"fdo-service-state"};
  Config c = base_config(dir.str());
  c.share_profiles_across_tenants = true;
  Daemon d(c);
  auto [id, pk] = profiled_program(d, "shared program", kAlice);
  const std::string fresh(64, '5');
  json imported = d.ok("profile.import", {{"bundle", bundle_as(d, pk, kAlice, fresh)}}, kMallory);
  CHECK(imported["imported"][0]["profile_key"] == fresh);
  CHECK(d.ok("profile.get", {{"profile_key", fresh}}, kAlice)["version"] == 1);
}

TEST_CASE("service: a .prog file replaced by another tenant is refused after a restart",
          "[service][tenant]") {
  TempDir dir{"fdo-service-state"};
  Daemon d(base_config(dir.str()));
  json victim = d.ok("program.register", {{"ir", "victim's program"}}, kAlice);
  json attacker = d.ok("program.register", {{"ir", "attacker's program"}}, kMallory);
  d.stop();
  const fs::path programs = dir.path() / "programs";
  const fs::path target = programs / (victim["program"].get<std::string>() + ".prog");
  fs::copy_file(programs / (attacker["program"].get<std::string>() + ".prog"), target,
                fs::copy_options::overwrite_existing);

  d.start();
  auto ran = d.call("execute", {{"program", victim["program"]}, {"entry", "main"}}, kAlice);
  REQUIRE_FALSE(ran.ok());
  CHECK(ran.error["data"]["code"] == "corrupt");
  CHECK_THAT(ran.error["message"].get<std::string>(),
             Catch::Contains(target.string()) && Catch::Contains("refusing to run it"));
  // The attacker's own program is unaffected; the victim's is back once its
  // owner registers it again.
  d.ok("execute", {{"program", attacker["program"]}, {"entry", "main"}}, kMallory);
  json again = d.ok("program.register", {{"ir", "victim's program"}}, kAlice);
  CHECK(again["program"] == victim["program"]);
  d.restart();
  d.ok("execute", {{"program", victim["program"]}, {"entry", "main"}}, kAlice);
}

TEST_CASE("service: a profiles.db that vanished or was emptied is refused at startup",
          "[service]") {
  TempDir dir{"fdo-service-state"};
  const std::string db = dir.file("profiles.db");
  Daemon d(base_config(dir.str()));
  json reg = d.ok("program.register", {{"ir", "a program"}}, kAlice);
  d.ok("execute", {{"program", reg["program"]}, {"entry", "main"}}, kAlice);
  d.stop();

  SECTION("deleted") {
    for (const char* suffix : {"", "-wal", "-shm"})
      fs::remove(db + suffix);
  }
  SECTION("truncated to 0 bytes") {
    fs::resize_file(db, 0);
    for (const char* suffix : {"-wal", "-shm"})
      fs::remove(db + suffix);
  }
  auto refused = build(base_config(dir.str()));
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code() == Errc::corrupt);
  CHECK_THAT(refused.error().message(),
             Catch::Contains("programs/ holds 1 registered program file") &&
                 Catch::Contains("cache/ holds compiled entries") &&
                 Catch::Contains("Restore profiles.db"));
  // Refusing created nothing: the operator decides.
  CHECK((!fs::exists(db) || fs::file_size(db) == 0));

  // Moving programs/ and cache/ away is a fresh start.
  fs::rename(dir.file("programs"), dir.file("programs.old"));
  fs::rename(dir.file("cache"), dir.file("cache.old"));
  auto fresh = build(base_config(dir.str()));
  REQUIRE(fresh);
}

TEST_CASE("service: every state file and directory is private under umask 022", "[service]") {
  ScopedUmask mask(022);
  TempDir dir{"fdo-service-state"};
  const fs::path state = dir.path() / "state";
  {
    Daemon d(base_config(state.string()));
    auto [id, pk] = profiled_program(d, "a program", kAlice);
    d.ok("execute", {{"program", id}, {"entry", "main"}}, kAlice); // an optimized compile
  }
  CHECK(mode_of(state) == 0700);
  int files = 0, objects = 0, programs = 0;
  for (const fs::directory_entry& e : fs::recursive_directory_iterator(state)) {
    INFO(e.path().string());
    if (e.is_directory()) {
      CHECK(mode_of(e.path()) == 0700);
      continue;
    }
    ++files;
    CHECK(mode_of(e.path()) == 0600);
    if (e.path().extension() == ".obj") ++objects;
    if (e.path().extension() == ".prog") ++programs;
  }
  CHECK(fs::exists(state / "profiles.db"));
  CHECK(objects >= 2); // instrumented and optimized outputs in the disk tier
  CHECK(programs == 1);
  CHECK(fs::exists(state / "cache" / "programs")); // the identity history
  CHECK(files >= 4);
}

TEST_CASE("service: a compile reply that does not decode is a clear error and caches nothing",
          "[service][errors]") {
  TempDir dir;
  auto broken = std::make_shared<std::atomic<bool>>(true);
  Daemon d(base_config(dir.path()), [broken](const Message& req) -> Expected<Message> {
    auto out = fake_compile(req);
    // The body's length missing, or its metadata running past the payload's
    // end (the typed reply cut after its body).
    if (out && *broken && job_op(req) == "compile") {
      auto job = compile_job_of(req);
      if (!job) return job.error();
      if (job->program == "a program")
        out->body.reset();
      else
        out->payload.resize(out->body->bytes);
    }
    return out;
  });
  for (const std::string ir : {"a program", "another program"}) {
    json reg = d.ok("program.register", {{"ir", ir}}, kAlice);
    Daemon::Reply r = d.call("execute", {{"program", reg["program"]}, {"entry", "main"}}, kAlice);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error["data"]["code"] == "internal");
    CHECK(r.error["message"].get<std::string>().find("compile worker's reply does not decode") !=
          std::string::npos);
  }
  // Nothing half-made was kept: once the worker answers properly, the same
  // program compiles and runs.
  broken->store(false);
  json reg = d.ok("program.register", {{"ir", "a program"}}, kAlice);
  json ran = d.ok("execute", {{"program", reg["program"]}, {"entry", "main"}}, kAlice);
  CHECK(ran["stage"]["cache"]["outcome"] == "compiled");
}
