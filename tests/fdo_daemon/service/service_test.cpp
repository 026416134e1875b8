// The Service composed over fake compile/exec runners and a real SQLite store
// in a temp dir: the execute path, the feedback loop through it, tenancy and
// configuration reloads, without worker processes.
#include "service_harness.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <mutex>
#include <set>
#include <unistd.h>
#include <utility>
#include <vector>

using namespace fdo;
using namespace fdo::daemon;
using namespace fdo::daemon::testing;
using fdo::test_support::TempDir;
using nlohmann::json;

TEST_CASE("service: stages through fake workers fold into a profile rewrite and recompile",
          "[service]") {
  Harness h;
  auto reg = h.call("program.register", {{"ir", "program one"}});
  REQUIRE(reg);
  std::string id = (*reg)["program"];
  std::string pk = (*reg)["profile_key"];

  auto s0 = h.call("execute", {{"program", id}, {"entry", "main"}});
  REQUIRE(s0);
  CHECK((*s0)["value"] == 42);
  CHECK((*s0)["stage"]["mode"] == "instrumented");
  CHECK((*s0)["stage"]["profile_rewritten"].is_null());
  auto s1 = h.call("execute", {{"program", id}, {"entry", "main"}});
  REQUIRE(s1);
  REQUIRE((*s1)["stage"]["profile_rewritten"].is_object());
  CHECK((*s1)["stage"]["profile_rewritten"]["to"] == 1);

  auto s2 = h.call("execute", {{"program", id}, {"entry", "main"}});
  REQUIRE(s2);
  CHECK((*s2)["stage"]["mode"] == "optimized");
  CHECK((*s2)["stage"]["profile_version"] == 1);
  CHECK((*s2)["stage"]["recompiled"] == true);

  auto prof = h.call("profile.get", {{"profile_key", pk}});
  REQUIRE(prof);
  CHECK((*prof)["profile"]["functions"]["main"]["counts"] == json{1800, 200});
  auto metrics = h.call("metrics", json::object(), 0); // the host's: an operator
  REQUIRE(metrics);
  CHECK_THAT((*metrics)["text"].get<std::string>(),
             Catch::Contains("fdo_stages_total 3") &&
                 Catch::Contains("fdo_profile_rewrites_total 1"));
}

TEST_CASE("service: the same IR from two uids is two programs and two profiles", "[service]") {
  Harness h;
  auto a = h.call("program.register", {{"ir", "same IR"}}, 1000);
  auto b = h.call("program.register", {{"ir", "same IR"}}, 1001);
  REQUIRE(a);
  REQUIRE(b);
  CHECK((*a)["program"] != (*b)["program"]);
  CHECK((*a)["profile_key"] != (*b)["profile_key"]);
  // Each sees only its own program.
  auto cross = h.call("execute", {{"program", (*a)["program"]}, {"entry", "main"}}, 1001);
  REQUIRE_FALSE(cross);
  CHECK_THAT(cross.error().message(), Catch::Contains("not_found"));
}

TEST_CASE("service: with shared profiles the same IR is one program for every uid", "[service]") {
  Config c = Harness::base_config();
  c.share_profiles_across_tenants = true;
  Harness h(c);
  auto a = h.call("program.register", {{"ir", "same IR"}}, 1000);
  auto b = h.call("program.register", {{"ir", "same IR"}}, 1001);
  REQUIRE(a);
  REQUIRE(b);
  CHECK((*a)["program"] == (*b)["program"]);
  CHECK((*a)["profile_key"] == (*b)["profile_key"]);
  CHECK(h.call("execute", {{"program", (*a)["program"]}, {"entry", "main"}}, 1001));
}

TEST_CASE("service: reconfigure applies runtime keys and keeps restart-only ones", "[service]") {
  Harness h;
  Config next = h.service->config();
  next.exec_timeout = std::chrono::milliseconds(1234);
  next.tier_up = TierUp::async;
  next.share_profiles_across_tenants = true;
  next.policy.min_stages = 7;
  next.exec_workers = 9;         // restart-only
  next.state_dir = "/elsewhere"; // restart-only
  h.service->reconfigure(next);
  Config now = h.service->config();
  CHECK(now.exec_timeout == std::chrono::milliseconds(1234));
  CHECK(now.tier_up == TierUp::async);
  CHECK(now.share_profiles_across_tenants);
  CHECK(now.policy.min_stages == 7);
  CHECK(now.exec_workers == Harness::base_config().exec_workers);
  CHECK(now.state_dir == h.dir.str());

  // The new values are what the next request uses.
  auto caps = h.call("capabilities", json::object());
  REQUIRE(caps);
  CHECK((*caps)["tier_up"] == "async");
  CHECK((*caps)["share_profiles_across_tenants"] == true);
  auto reg = h.call("program.register", {{"ir", "p"}});
  REQUIRE(reg);
  REQUIRE(h.call("execute", {{"program", (*reg)["program"]}, {"entry", "main"}}));
  CHECK(h.exec->last_limits().wall == std::chrono::milliseconds(1234));
}

// health and capabilities are written as text (fdo/util/json_text.h): every
// member the protocol documents is there, nested where it belongs, with its
// type (docs/fdod-protocol.md; the e2e tests check the schema on a real fdod).
TEST_CASE("service: health and capabilities answer every member, typed", "[service]") {
  Harness h;
  auto health = h.call("health", json::object());
  REQUIRE(health);
  const json& r = *health;
  CHECK(r.size() == 9);
  CHECK(r["status"] == "ok");
  CHECK(r["version"].is_string());
  CHECK(r["pid"] == static_cast<std::int64_t>(::getpid()));
  CHECK(r["uptime_s"].is_number());
  CHECK(r["uptime_s"].get<double>() >= 0);
  REQUIRE(r["workers"].is_object());
  CHECK(r["workers"]["compile"].is_number_unsigned());
  CHECK(r["workers"]["exec"].is_number_unsigned());
  CHECK(r["object_cache_remote"].is_null());
  CHECK(r["host"].is_string());
  REQUIRE(r["inprocess"].is_object());
  CHECK(r["inprocess"] == json{{"leases", 0}, {"leases_granted", 0}, {"batches", 0}});
  const json& store = r["profile_store"];
  REQUIRE(store.is_object());
  CHECK(store["kind"] == "sqlite");
  CHECK(store["state"] == "up");
  CHECK(store["last_error"] == "");
  for (const char* k : {"spooled_batches", "spooled_writes", "spooled_other", "spool_bytes"})
    CHECK(store[k] == 0);
  CHECK(store["database_reads"].is_number_unsigned());
  CHECK_FALSE(store.contains("spool_max_bytes")); // capabilities' only

  auto caps = h.call("capabilities", json::object());
  REQUIRE(caps);
  const json& c = *caps;
  CHECK(c["fdo_version"] == r["version"]);
  CHECK(c["compile_modes"] ==
        json::array({"plain", "instrumented", "optimized", "cs_instrumented"}));
  REQUIRE(c["target"].is_object());
  CHECK(c["target"]["triple"].is_string());
  CHECK(c["target"]["cpu"].is_string());
  CHECK(c["target"]["features"].is_string());
  CHECK(c["tier_up"].is_string());
  CHECK(c["share_profiles_across_tenants"].is_boolean());
  CHECK(c.contains("perf"));
  CHECK(c.contains("sandbox"));
  CHECK(c.contains("gpu"));
  CHECK(c.contains("compiler_identity"));
  CHECK(c["object_cache_remote"].is_null());
  CHECK(c["host"] == r["host"]);
  CHECK(c["profile_store"]["spool_max_bytes"].is_number_unsigned());
  CHECK(c["profile_store"]["kind"] == "sqlite");
}

TEST_CASE("service: a reloaded profile_retention applies to the next write", "[service]") {
  Harness h;
  auto reg = h.call("program.register", {{"ir", "retained"}});
  REQUIRE(reg);
  std::string id = (*reg)["program"], pk = (*reg)["profile_key"];
  auto rewrite = [&] {
    for (int i = 0; i < 2; ++i)
      REQUIRE(h.call("execute", {{"program", id}, {"entry", "main"}}));
  };
  rewrite(); // v1
  REQUIRE(h.call("profile.reset", {{"profile_key", pk}}));
  rewrite(); // v2
  auto hist = h.call("profile.history", {{"profile_key", pk}});
  REQUIRE(hist);
  CHECK((*hist)["versions"].size() == 2);

  Config next = h.service->config();
  next.profile_retention = 1;
  h.service->reconfigure(next);
  REQUIRE(h.call("profile.reset", {{"profile_key", pk}}));
  rewrite(); // v3, and only v3 is kept
  hist = h.call("profile.history", {{"profile_key", pk}});
  REQUIRE(hist);
  REQUIRE((*hist)["versions"].size() == 1);
  CHECK((*hist)["versions"][0]["version"] == 3);
}

TEST_CASE("service: config is shown to root and the daemon's user - not to tenants", "[service]") {
  Harness h;
  auto mine = h.call("config", json::object(), ::geteuid());
  REQUIRE(mine);
  bool found = false;
  for (const json& k : (*mine)["keys"])
    if (k["name"] == "exec_timeout_ms") {
      found = true;
      CHECK(k["reload"] == "runtime");
    }
  CHECK(found);
  if (::geteuid() != 4242) {
    auto denied = h.call("config", json::object(), 4242);
    REQUIRE_FALSE(denied);
    CHECK_THAT(denied.error().message(), Catch::Contains("permission_denied"));
  }
}

TEST_CASE("service: an unparsable program is refused at registration", "[service]") {
  Harness h;
  auto reg = h.call("program.register", {{"ir", "bad program"}});
  REQUIRE_FALSE(reg); // the analyzer refuses it
  CHECK_THAT(reg.error().message(), Catch::Contains("not IR"));
}

TEST_CASE("service: pin - unpin - reset and import each leave an audit record", "[service]") {
  Harness h;
  auto reg = h.call("program.register", {{"ir", "audited"}});
  REQUIRE(reg);
  std::string id = (*reg)["program"], pk = (*reg)["profile_key"];
  for (int i = 0; i < 2; ++i)
    REQUIRE(h.call("execute", {{"program", id}, {"entry", "main"}})); // v1
  CHECK(h.audit->records.empty()); // stages and reads are not audited

  REQUIRE(h.call("profile.pin", {{"profile_key", pk}}));
  REQUIRE(h.call("profile.unpin", {{"profile_key", pk}}));
  REQUIRE(h.call("profile.reset", {{"profile_key", pk}}));
  auto bundle = h.call("profile.export", {{"profile_keys", {pk}}});
  REQUIRE(bundle);
  CHECK(h.audit->records.size() == 3); // export is a read
  REQUIRE(h.call("profile.import", {{"bundle", (*bundle)["bundle"]}}));
  // Refused: another tenant's key reads as missing, and is audited as such.
  CHECK_FALSE(h.call("profile.pin", {{"profile_key", pk}}, 1001));
  CHECK_FALSE(h.call("profile.import", {{"bundle", (*bundle)["bundle"]}}, 1001));

  const auto& r = h.audit->records;
  REQUIRE(r.size() == 6);
  CHECK(r[0].action == "profile.pin");
  CHECK(r[1].action == "profile.unpin");
  CHECK(r[2].action == "profile.reset");
  CHECK(r[3].action == "profile.import");
  for (int i = 0; i < 4; ++i) {
    CHECK(r[i].tenant == 1000);
    CHECK(r[i].profile_key == pk);
    CHECK(r[i].outcome == "ok");
  }
  CHECK(r[0].detail == "version 1, pinned");
  CHECK(r[1].detail == "version 1, not pinned");
  CHECK_THAT(r[3].detail, Catch::StartsWith("new version "));
  CHECK(r[4].action == "profile.pin");
  CHECK(r[4].tenant == 1001);
  CHECK(r[4].profile_key == pk);
  CHECK(r[4].outcome == "not_found");
  CHECK(r[5].action == "profile.import");
  CHECK(r[5].tenant == 1001);
  CHECK(r[5].profile_key.empty());
  CHECK(r[5].outcome == "not_found");
  CHECK(describe(r[0]) == "audit: uid 1000 profile.pin profile " + pk + ": ok (version 1, pinned)");
}

TEST_CASE("service: metrics carry latency histograms - outcomes - decisions and build info",
          "[service]") {
  // Without the guard: after the rewrite it compiles the plain build in the
  // background (docs/guard.md), a third compile that could land between the
  // two reads below; the counts here are the stages' own.
  Config c = Harness::base_config();
  c.guard.mode = GuardMode::off;
  Harness h(c);
  auto reg = h.call("program.register", {{"ir", "measured"}});
  REQUIRE(reg);
  std::string id = (*reg)["program"];
  for (int i = 0; i < 3; ++i)
    REQUIRE(h.call("execute", {{"program", id}, {"entry", "main"}}));
  auto metrics = h.call("metrics", json::object(), 0); // the host's: an operator
  REQUIRE(metrics);
  std::string text = (*metrics)["text"];
  INFO(text);
  // Stage 0 compiles instrumented, stage 1 hits and rewrites, stage 2
  // recompiles optimized (tier_up = sync): two compiles, one hit, one rewrite.
  CHECK_THAT(text, Catch::Contains("# TYPE fdo_stage_duration_seconds histogram"));
  CHECK_THAT(text, Catch::Contains("fdo_stage_duration_seconds_count 3"));
  CHECK_THAT(text, Catch::Contains("fdo_exec_duration_seconds_count 3"));
  CHECK_THAT(text, Catch::Contains("fdo_compile_duration_seconds_count 2"));
  CHECK_THAT(text, Catch::Contains("fdo_stage_duration_seconds_bucket{le=\"+Inf\"} 3"));
  CHECK_THAT(text, Catch::Contains("fdo_stage_cache_outcomes_total{outcome=\"compiled\"} 2"));
  CHECK_THAT(text, Catch::Contains("fdo_stage_cache_outcomes_total{outcome=\"memory_hit\"} 1"));
  CHECK_THAT(text, Catch::Contains("fdo_stage_cache_outcomes_total{outcome=\"disk_hit\"} 0"));
  CHECK_THAT(text, Catch::Contains("fdo_policy_decisions_total{decision=\"rewrite\"} 1"));
  CHECK_THAT(text, Catch::Contains("fdo_policy_decisions_total{decision=\"keep\"} 2"));
  CHECK_THAT(text, Catch::Contains("fdo_build_info{llvm_version=\""));
  CHECK_THAT(text, Catch::Contains("version=\"" + std::string(jit::kFdoVersion) + "\"} 1"));
  CHECK_THAT(text, Catch::Contains("fdo_tier_ups_total{result=\"installed\"} 0"));
  CHECK_THAT(text, Catch::Contains("fdo_worker_restarts_total{pool=\"exec\"} 0"));
  // One source of truth: the totals are the same figures cache.stats reports.
  auto stats = h.call("cache.stats", json::object(), 0);
  REQUIRE(stats);
  CHECK_THAT(text, Catch::Contains("fdo_cache_compiles_total " +
                                   std::to_string((*stats)["compiles"].get<std::uint64_t>())));
}

TEST_CASE("service: a tenant's cache.stats and metrics carry its own figures only",
          "[service][tenancy]") {
  Config c = Harness::base_config();
  c.guard.mode = GuardMode::off;
  Harness h(c);
  auto mine = h.call("program.register", {{"ir", "tenant a's program"}}, 1000);
  auto theirs = h.call("program.register", {{"ir", "tenant b's program"}}, 1001);
  REQUIRE((mine && theirs));
  for (int i = 0; i < 3; ++i)
    REQUIRE(h.call("execute", {{"program", (*mine)["program"]}, {"entry", "main"}}, 1000));
  REQUIRE(h.call("execute", {{"program", (*theirs)["program"]}, {"entry", "main"}}, 1001));

  auto a = h.call("cache.stats", json::object(), 1000);
  auto b = h.call("cache.stats", json::object(), 1001);
  REQUIRE((a && b));
  CHECK((*a)["scope"] == "tenant");
  CHECK((*a)["uid"] == 1000);
  CHECK((*a)["prepares"] == 3);
  CHECK((*a)["compiles"] == 2); // instrumented, then optimized (tier_up = sync)
  CHECK((*a)["memory"]["hits"] == 1);
  CHECK((*b)["prepares"] == 1);
  CHECK((*b)["compiles"] == 1);
  CHECK_FALSE(a->contains("workers")); // no pids, no pool figures
  CHECK_FALSE((*a)["memory"].contains("entries"));
  auto nobody = h.call("cache.stats", json::object(), 1002);
  REQUIRE(nobody);
  CHECK((*nobody)["prepares"] == 0);

  auto host = h.call("cache.stats", json::object(), 0);
  REQUIRE(host);
  CHECK((*host)["scope"] == "host");
  CHECK((*host)["compiles"] == 3);
  CHECK((*host)["workers"]["exec"].contains("workers"));

  auto text_a = h.call("metrics", json::object(), 1000);
  REQUIRE(text_a);
  CHECK((*text_a)["scope"] == "tenant");
  const std::string ta = (*text_a)["text"];
  CHECK_THAT(ta, Catch::Contains("fdo_tenant_stages_total{uid=\"1000\"} 3"));
  CHECK_THAT(ta, Catch::Contains("fdo_tenant_compiles_total{uid=\"1000\"} 2"));
  CHECK(ta.find("1001") == std::string::npos);
  CHECK(ta.find("fdo_stages_total") == std::string::npos);
  CHECK(ta.find("fdo_workers_live") == std::string::npos);
}

TEST_CASE("service: programs and profiles are listed and deleted by their owner only",
          "[service]") {
  Harness h;
  auto a = h.call("program.register", {{"ir", "program a"}, {"name", "alpha"}});
  auto b = h.call("program.register", {{"ir", "program b"}, {"name", "beta"}});
  auto other = h.call("program.register", {{"ir", "program a"}, {"name", "theirs"}}, 1001);
  REQUIRE((a && b && other));
  std::string ia = (*a)["program"], pa = (*a)["profile_key"], ib = (*b)["program"];
  for (int i = 0; i < 2; ++i)
    REQUIRE(h.call("execute", {{"program", ia}, {"entry", "main"}})); // pa at v1

  auto mine = h.call("program.list", json::object());
  REQUIRE(mine);
  REQUIRE((*mine)["programs"].size() == 2);
  std::set<std::string> names;
  for (const json& p : (*mine)["programs"])
    names.insert(p["name"].get<std::string>());
  CHECK(names == std::set<std::string>{"alpha", "beta"});
  auto theirs = h.call("program.list", json::object(), 1001);
  REQUIRE(theirs);
  REQUIRE((*theirs)["programs"].size() == 1);
  CHECK((*theirs)["programs"][0]["name"] == "theirs");

  // profile.list names the caller's programs with each key.
  auto profiles = h.call("profile.list", json::object());
  REQUIRE(profiles);
  REQUIRE((*profiles)["profiles"].size() == 1);
  CHECK((*profiles)["profiles"][0]["programs"] == json{"alpha"});

  // Another tenant's program or profile is not found, and nothing changes.
  CHECK_FALSE(h.call("program.delete", {{"program", ia}}, 1001));
  CHECK_FALSE(h.call("profile.delete", {{"profile_key", pa}}, 1001));
  REQUIRE(h.call("execute", {{"program", ia}, {"entry", "main"}}));

  auto gone = h.call("program.delete", {{"program", ib}});
  REQUIRE(gone);
  CHECK((*gone)["removed"] == true);
  CHECK_FALSE(std::filesystem::exists(h.dir.path() / "programs" / (ib + ".prog")));
  CHECK_FALSE(h.call("execute", {{"program", ib}, {"entry", "main"}}));
  CHECK_FALSE(h.call("program.delete", {{"program", ib}})); // already gone
  mine = h.call("program.list", json::object());
  REQUIRE(mine);
  CHECK((*mine)["programs"].size() == 1);

  auto deleted = h.call("profile.delete", {{"profile_key", pa}});
  REQUIRE(deleted);
  CHECK((*deleted)["removed"]["versions"].get<std::int64_t>() >= 1);
  profiles = h.call("profile.list", json::object());
  REQUIRE(profiles);
  CHECK((*profiles)["profiles"].empty());
  CHECK_FALSE(h.call("profile.history", {{"profile_key", pa}}));

  // Each delete, allowed or refused, is in the audit trail.
  std::vector<std::string> trail;
  for (const auto& r : h.audit->records)
    trail.push_back(r.action + " " + std::to_string(r.tenant) + " " + r.outcome);
  CHECK(trail == std::vector<std::string>{"program.delete 1001 not_found",
                                          "profile.delete 1001 not_found", "program.delete 1000 ok",
                                          "program.delete 1000 not_found",
                                          "profile.delete 1000 ok"});
  CHECK(h.audit->records[2].program == ib);
  CHECK(h.audit->records[4].profile_key == pa);
}

namespace {

// An exec worker stand-in that keeps what it was sent by key, like the real
// one (worker_jobs.h), and records each job.
struct KeepingExecWorker {
  std::mutex mu;
  std::set<std::string> held;
  std::vector<ExecJob> jobs;

  FakeRunner::Fn fn() {
    return [this](const Message& req) -> Expected<Message> {
      FDO_TRY(FakeExecJob j, fake_exec_job(req));
      std::lock_guard lk(mu);
      jobs.push_back(j.job);
      const std::string& key = j.job.key;
      if (j.job.object_size) {
        if (j.job.cache_entries > 0) held.insert(key);
      } else if (!held.contains(key)) {
        return fake_exec_missing();
      }
      StageObservation obs;
      obs.ret = 42;
      obs.exec_ns = 1000;
      obs.measurement.emplace().wall_ns = 1000;
      return fake_exec_ran(std::move(obs));
    };
  }
  std::vector<ExecJob> take() {
    std::lock_guard lk(mu);
    return std::exchange(jobs, {});
  }
};

} // namespace

TEST_CASE("service: an execute names its object by key - the object goes when a worker lacks it",
          "[service]") {
  KeepingExecWorker worker;
  Harness h(Harness::base_config(), worker.fn());
  auto reg = h.call("program.register", {{"ir", "program one"}});
  REQUIRE(reg);
  json params = {{"program", (*reg)["program"]}, {"entry", "main"}};

  // First stage of a key: asked by key, refused, sent again with the object.
  auto s0 = h.call("execute", params);
  REQUIRE(s0);
  CHECK((*s0)["value"] == 42);
  std::string key = (*s0)["stage"]["storage_key"];
  auto jobs = worker.take();
  REQUIRE(jobs.size() == 2);
  CHECK_FALSE(jobs[0].object_size);
  CHECK(jobs[0].metadata.empty());
  CHECK(jobs[0].key == key);
  CHECK(jobs[0].cache_entries == 16);
  CHECK(jobs[0].verbose == false);
  CHECK(jobs[1].object_size);
  CHECK_FALSE(jobs[1].metadata.empty());
  CHECK(jobs[1].key == key);

  // The same key again: one job, no object.
  auto s1 = h.call("execute", params);
  REQUIRE(s1);
  REQUIRE((*s1)["stage"]["storage_key"] == key);
  jobs = worker.take();
  REQUIRE(jobs.size() == 1);
  CHECK_FALSE(jobs[0].object_size);

  // A restarted worker holds nothing: the object goes again, once.
  {
    std::lock_guard lk(worker.mu);
    worker.held.clear();
  }
  params["verbose"] = true;
  auto s2 = h.call("execute", params);
  REQUIRE(s2);
  jobs = worker.take();
  REQUIRE(jobs.size() == 2);
  CHECK(jobs[0].verbose == true);
  CHECK(jobs[1].object_size);
}

TEST_CASE("service: with exec_object_cache_entries 0 every execute carries its object",
          "[service]") {
  KeepingExecWorker worker;
  Config c = Harness::base_config();
  c.exec_object_cache_entries = 0;
  Harness h(c, worker.fn());
  auto reg = h.call("program.register", {{"ir", "program one"}});
  REQUIRE(reg);
  json params = {{"program", (*reg)["program"]}, {"entry", "main"}};
  for (int i = 0; i < 3; ++i) {
    REQUIRE(h.call("execute", params));
    auto jobs = worker.take();
    REQUIRE(jobs.size() == 1);
    CHECK(jobs[0].object_size);
    CHECK(jobs[0].cache_entries == 0);
  }
}

TEST_CASE("service: an execute the worker refuses even with its object is an error", "[service]") {
  Harness h(Harness::base_config(),
            [](const Message&) -> Expected<Message> { return fake_exec_missing(); });
  auto reg = h.call("program.register", {{"ir", "program one"}});
  REQUIRE(reg);
  auto r = h.call("execute", {{"program", (*reg)["program"]}, {"entry", "main"}});
  REQUIRE_FALSE(r);
  CHECK_THAT(r.error().message(), Catch::Contains("asked for the object"));
}

TEST_CASE("service: a stage's counters explain an event only when verbose", "[service]") {
  // The worker sends the typed measurement; the reply's JSON is shaped here.
  Harness h(Harness::base_config(), [](const Message& req) -> Expected<Message> {
    FDO_TRY(FakeExecJob j, fake_exec_job(req));
    if (!j.job.object_size) return fake_exec_missing();
    StageObservation obs;
    obs.ret = 42;
    obs.exec_ns = 900;
    perf::Measurement& m = obs.measurement.emplace();
    m.wall_ns = 900;
    m.thread_cpu_ns = 800;
    m.process_cpu_ns = 850;
    m.method = perf::ReadMethod::read_syscall;
    m.events.resize(2);
    m.events[0].name = "instructions";
    m.events[0].value = 1234;
    m.events[0].raw = 1234;
    m.events[0].enabled_ns = m.events[0].running_ns = 700;
    m.events[0].running_ratio = 1.0;
    m.events[0].status = perf::EventStatus::available;
    m.events[1].name = "branch-misses";
    m.events[1].status = perf::EventStatus::no_pmu;
    m.events[1].error = 2;
    m.events[1].reason = "no PMU here";
    m.task_clock_reason = "task-clock: not opened";
    return fake_exec_ran(std::move(obs));
  });
  auto reg = h.call("program.register", {{"ir", "program one"}});
  REQUIRE(reg);
  json params = {{"program", (*reg)["program"]}, {"entry", "main"}};
  auto compact = h.call("execute", params);
  REQUIRE(compact);
  const json& c = (*compact)["stage"]["counters"];
  INFO(c.dump());
  CHECK(c["wall_ns"] == 900);
  CHECK(c["thread_cpu_ns"] == 800);
  CHECK(c["process_cpu_ns"] == 850);
  CHECK(c["task_clock_ns"].is_null());
  CHECK(c["read_method"] == "read_syscall");
  CHECK_FALSE(c.contains("task_clock_reason"));
  REQUIRE(c["events"].size() == 2);
  CHECK(c["events"][0] == json{{"name", "instructions"},
                               {"status", "available"},
                               {"errno", 0},
                               {"value", 1234},
                               {"raw", 1234},
                               {"enabled_ns", 700},
                               {"running_ns", 700},
                               {"running_ratio", 1.0},
                               {"multiplexed", false}});
  // An event that did not count: its name, status and errno; nothing else.
  CHECK(c["events"][1] ==
        json{{"name", "branch-misses"}, {"status", "no_pmu"}, {"errno", 2}, {"value", nullptr}});
  CHECK((*compact)["stage"]["exec_ns"] == 900);

  params["verbose"] = true;
  auto full = h.call("execute", params);
  REQUIRE(full);
  const json& v = (*full)["stage"]["counters"];
  CHECK(v["task_clock_reason"] == "task-clock: not opened");
  CHECK(v["events"][1]["reason"] == "no PMU here");
  CHECK(v["events"][1]["raw"] == 0);
}

TEST_CASE("service: an exec reply whose typed body is malformed fails the stage clearly",
          "[service][errors]") {
  Harness h(Harness::base_config(), [](const Message&) -> Expected<Message> {
    Message m;
    m.payload = "EXR"; // three bytes of a four-byte magic
    m.body = TypedBody{TypedOp::none, 3};
    return m;
  });
  auto reg = h.call("program.register", {{"ir", "program one"}});
  REQUIRE(reg);
  auto r = h.call("execute", {{"program", (*reg)["program"]}, {"entry", "main"}});
  REQUIRE_FALSE(r);
  CHECK_THAT(r.error().message(), Catch::Contains("exec worker sent a malformed reply") &&
                                      Catch::Contains("exec reply: truncated"));
}

TEST_CASE("service: after a rewrite the new profile's build compiles before the guard's plain "
          "build (async tier-up)",
          "[service][tier_up]") {
  // docs/cache.md, "Tier-up": with one background thread, the guard's plain
  // build asked for at the rewrite used to start first, and a big program's
  // next stage waited for it before its own build even began.
  std::mutex mu;
  std::vector<std::string> order; // mode of each compile, in the order they began
  auto recording = [&](const Message& req) -> Expected<Message> {
    if (job_op(req) == "compile") {
      std::lock_guard lk(mu);
      order.push_back(compile_job_mode(req));
    }
    return fake_compile(req);
  };
  auto compiled = [&] {
    std::lock_guard lk(mu);
    return order;
  };
  Config c = Harness::base_config();
  c.tier_up = TierUp::async;
  REQUIRE(c.guard.mode != GuardMode::off);
  Harness h(c, fake_exec, nullptr, "test-host", recording);
  auto reg = h.call("program.register", {{"ir", "rewritten then tiered up"}});
  REQUIRE(reg);
  const std::string id = (*reg)["program"];
  REQUIRE(h.call("execute", {{"program", id}, {"entry", "main"}}));
  auto s1 = h.call("execute", {{"program", id}, {"entry", "main"}});
  REQUIRE(s1);
  REQUIRE((*s1)["stage"]["profile_rewritten"].is_object());
  // Both builds were queued when the rewriting stage replied.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (compiled().size() < 3 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  REQUIRE(compiled() == std::vector<std::string>{"instrumented", "optimized", "plain"});
  auto s2 = h.call("execute", {{"program", id}, {"entry", "main"}});
  REQUIRE(s2);
  CHECK((*s2)["stage"]["mode"] == "optimized");
  CHECK((*s2)["stage"]["cache"]["outcome"] == "memory_hit");
  CHECK(compiled().size() == 3);
}
