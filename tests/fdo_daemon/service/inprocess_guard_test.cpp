// Guarded in-process leases through the Service over fake workers
// (docs/runtimes.md, "Guarded leases"): each lease with `guard: true` is one
// stage of the program's lifecycle, planned by the guard; its first submit's
// time per call goes into the trial; the runtime leases again when told to
// renew, naming what it has linked, and gets no object for those. A planted
// slower candidate (the runtime's measured time per call) is rejected, the
// incumbent kept in the profile's guard record and served from then on.
#include "rpc_call.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <future>
#include <random>

using namespace fdo;
using namespace fdo::daemon;
using namespace fdo::daemon::testing;
using nlohmann::json;

namespace {

RpcReply call(Harness& h, const std::string& method, const json& params) {
  CallContext ctx;
  ctx.uid = 1000;
  ctx.connection = 1;
  return call_with(h, method, params, ctx);
}

Config guarded_config() {
  Config c = Harness::base_config(); // policy: 2 stages, 100 counts; sync tier-up
  c.guard.min_stages = 2;
  c.guard.tune_min_stages = 100000; // the profile's trial alone
  c.guard.checkpoint_pairs = 4;
  return c;
}

// What a runtime holds: the outputs it has linked, by storage key, and its
// current lease.
struct Runtime {
  std::string program;
  std::vector<std::string> linked;
  std::uint64_t lease = 0;
  json last; // the last program.lease result

  RpcReply lease_again(Harness& h) {
    json params = {{"program", program}, {"entries", {"main"}}, {"guard", true}};
    if (!linked.empty()) params["loaded"] = linked;
    RpcReply r = call(h, "program.lease", params);
    if (!r.error.is_null()) return r;
    const std::string key = r.result["storage_key"];
    const bool have = std::find(linked.begin(), linked.end(), key) != linked.end();
    CHECK(r.result["unchanged"] == have);
    CHECK(r.fds.size() == (have ? 0u : 1u)); // an object only for what is not linked
    CHECK(r.result["fds"] == r.fds.size());
    if (!have) linked.push_back(key);
    if (lease != 0) CHECK(call(h, "program.release", {{"lease", lease}}).error.is_null());
    lease = r.result["lease"];
    last = r.result;
    return r;
  }
};

} // namespace

TEST_CASE("guarded lease: a planted slower candidate is rejected and the incumbent kept",
          "[service][inprocess][guarded]") {
  Harness h(guarded_config());
  auto reg = h.call("program.register", {{"ir", "in-process program"}});
  REQUIRE(reg);
  Runtime rt{(*reg)["program"], {}, 0, nullptr};
  const std::string pk = (*reg)["profile_key"];
  RpcReply first = rt.lease_again(h);
  INFO(first.error.dump());
  REQUIRE(first.error.is_null());
  CHECK(first.result["mode"] == "instrumented");
  CHECK(first.result["variant"]["role"] == "current");

  // The runtime measures its own calls: the profiled build (the candidate)
  // takes 1.5x the plain build's time per call, with 5% noise.
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> noise(0.95, 1.05);
  std::vector<std::string> modes;
  std::vector<json> variants;
  std::string verdict;
  for (int i = 0; i < 200 && verdict.empty(); ++i) {
    const std::string mode = rt.last["mode"];
    modes.push_back(mode);
    const double per_call = (mode == "optimized" ? 15.0 : 10.0) * noise(rng);
    json b = {{"calls", 1000}, {"exec_ns", static_cast<std::uint64_t>(1000 * per_call)}};
    if (mode == "instrumented") b["counts"] = {{"main", {900, 100}}};
    RpcReply sub = call(h, "feedback.submit", {{"lease", rt.lease}, {"batches", {b}}});
    INFO(sub.error.dump());
    REQUIRE(sub.error.is_null());
    const json& v = sub.result["variant"];
    REQUIRE(v.is_object());
    variants.push_back(v);
    if (v["trial"].is_string() &&
        v["trial"].get<std::string>().find("rejected") != std::string::npos)
      verdict = v["trial"];
    if (sub.result["stale"] == true || sub.result["renew"] == true) {
      RpcReply again = rt.lease_again(h);
      INFO(again.error.dump());
      REQUIRE(again.error.is_null());
    }
  }
  INFO(json(modes).dump());
  REQUIRE_FALSE(verdict.empty());
  CHECK(verdict.find("profiled O2 rejected") != std::string::npos);
  // Both arms ran, each linked once: the instrumented build, the profiled
  // one and the plain one, whatever the number of stages.
  CHECK(std::count(modes.begin(), modes.end(), "optimized") >= 4);
  CHECK(std::count(modes.begin(), modes.end(), "plain") >= 4);
  CHECK(rt.linked.size() == 3);
  // Counted stages ran in blocks (I C C I or C I I C).
  std::vector<std::string> counted;
  for (std::size_t i = 0; i < variants.size(); ++i)
    if (variants[i]["counted"] == true) counted.push_back(variants[i]["role"]);
  REQUIRE(counted.size() >= 8);
  for (std::size_t b = 0; b + 3 < counted.size(); b += 4) {
    CHECK(counted[b] == counted[b + 3]);
    CHECK(counted[b + 1] == counted[b + 2]);
    CHECK(counted[b] != counted[b + 1]);
  }

  // From now on the plain build is served, as the incumbent, without renewing.
  RpcReply kept = rt.lease_again(h);
  REQUIRE(kept.error.is_null());
  CHECK(kept.result["mode"] == "plain");
  CHECK(kept.result["variant"]["role"] == "incumbent");
  CHECK(kept.result["variant"]["name"] == "plain O2");
  CHECK(kept.result["variant"]["reason"].get<std::string>().find("rejected") != std::string::npos);
  CHECK(kept.result["renew"] == false);
  CHECK(kept.result["unchanged"] == true); // linked already
  RpcReply served = call(h, "feedback.submit",
                         {{"lease", rt.lease}, {"batches", {{{"calls", 10}, {"exec_ns", 100}}}}});
  REQUIRE(served.error.is_null());
  CHECK(served.result["renew"] == false);
  CHECK(served.result["variant"]["counted"] == false);

  // The verdict is in the profile's guard record, as an execute trial's.
  auto prof = h.call("profile.get", {{"profile_key", pk}});
  REQUIRE(prof);
  const json& guard = (*prof)["profile"]["guard"];
  CHECK(guard["incumbent"]["base"] == "plain");
  CHECK(guard["trials"].back()["verdict"] == "rejected");
  CHECK(guard["trials"].back()["ratio"].get<double>() > 1.3);
  // Execute stages of the program are served the same decision.
  auto st = h.call("execute", {{"program", rt.program}, {"entry", "main"}});
  REQUIRE(st);
  CHECK((*st)["stage"]["mode"] == "plain");
  CHECK((*st)["stage"]["variant"]["role"] == "incumbent");
}

TEST_CASE("guarded lease: a trial stage counts once however often its lease submits",
          "[service][inprocess][guarded]") {
  Harness h(guarded_config());
  auto reg = h.call("program.register", {{"ir", "in-process program"}});
  REQUIRE(reg);
  Runtime rt{(*reg)["program"], {}, 0, nullptr};
  REQUIRE(rt.lease_again(h).error.is_null());
  // Counts until the profile is rewritten, then stages until a trial runs.
  json trial_variant;
  for (int i = 0; i < 40 && trial_variant.is_null(); ++i) {
    json b = {{"calls", 100}, {"exec_ns", 1000}};
    if (rt.last["mode"] == "instrumented") b["counts"] = {{"main", {900, 100}}};
    RpcReply sub = call(h, "feedback.submit", {{"lease", rt.lease}, {"batches", {b}}});
    REQUIRE(sub.error.is_null());
    REQUIRE(rt.lease_again(h).error.is_null());
    if (rt.last["variant"]["reason"].get<std::string>().find("trial") != std::string::npos &&
        (rt.last["variant"]["role"] == "candidate" || rt.last["variant"]["role"] == "incumbent"))
      trial_variant = rt.last["variant"];
  }
  REQUIRE(trial_variant.is_object());
  CHECK(rt.last["renew"] == true);
  json b = {{"calls", 100}, {"exec_ns", 1000}};
  RpcReply one = call(h, "feedback.submit", {{"lease", rt.lease}, {"batches", {b}}});
  REQUIRE(one.error.is_null());
  CHECK(one.result["variant"]["counted"] == true);
  CHECK(one.result["renew"] == true);
  RpcReply two = call(h, "feedback.submit", {{"lease", rt.lease}, {"batches", {b, b}}});
  REQUIRE(two.error.is_null());
  CHECK(two.result["variant"]["counted"] == false);
  CHECK(two.result["variant"]["trial"].get<std::string>().find("lease again") != std::string::npos);
  CHECK(two.result["accepted"] == 2); // still folded as feedback
}

TEST_CASE("guarded lease refusals: malformed loaded, guard or unknown parameters",
          "[service][inprocess][guarded]") {
  Harness h(guarded_config());
  auto reg = h.call("program.register", {{"ir", "in-process program"}});
  REQUIRE(reg);
  const std::string id = (*reg)["program"];
  auto lease = [&](json extra) {
    json p = {{"program", id}, {"entries", {"main"}}};
    p.update(extra);
    return call(h, "program.lease", p);
  };
  CHECK(lease({{"loaded", "key"}}).code() == "invalid_argument");
  CHECK(lease({{"loaded", json::array({1})}}).code() == "invalid_argument");
  CHECK(lease({{"loaded", json(std::vector<std::string>(9, "k"))}}).code() == "invalid_argument");
  CHECK(lease({{"guard", "yes"}}).code() == "invalid_argument");
  CHECK(lease({{"gaurd", true}}).code() == "invalid_argument");
  auto health = h.call("health", json::object());
  REQUIRE(health);
  CHECK((*health)["inprocess"]["leases"] == 0); // none was made

  // Without guard, a loaded key behaves as unless_storage_key: no lease.
  RpcReply plain = lease(json::object());
  REQUIRE(plain.error.is_null());
  CHECK(plain.result.contains("variant") == false);
  RpcReply same = lease({{"loaded", {plain.result["storage_key"]}}});
  REQUIRE(same.error.is_null());
  CHECK(same.result["unchanged"] == true);
  CHECK(same.result["lease"].is_null());
  CHECK(same.fds.empty());
  // An unguarded lease's submits say nothing of variants.
  RpcReply sub =
      call(h, "feedback.submit",
           {{"lease", plain.result["lease"]}, {"batches", {{{"calls", 1}, {"exec_ns", 1}}}}});
  REQUIRE(sub.error.is_null());
  CHECK(sub.result["variant"].is_null());
  CHECK(sub.result["renew"] == false);
}

TEST_CASE("guarded lease: a stage served an earlier build while the planned one compiles in the "
          "background is counted as such",
          "[service][inprocess][guarded]") {
  // Optimized compiles wait for the test's word: the background tier-up is
  // still under way while the runtime's next stage runs the instrumented build.
  auto gate = std::make_shared<std::promise<void>>();
  std::shared_future<void> open_gate = gate->get_future().share();
  Config c = guarded_config();
  c.tier_up = TierUp::async;
  FakeRunner::Fn compile = [open_gate](const Message& req) -> Expected<Message> {
    if (compile_job_mode(req) == "optimized") open_gate.wait();
    return fake_compile(req);
  };
  struct Opener {
    std::shared_ptr<std::promise<void>> p;
    ~Opener() { p->set_value(); } // before the harness stops its workers
  };
  std::unique_ptr<Harness> h =
      std::make_unique<Harness>(c, fake_exec, nullptr, "test-host", compile);
  Opener opener{gate};
  auto reg = h->call("program.register", {{"ir", "in-process program"}});
  REQUIRE(reg);
  Runtime rt{(*reg)["program"], {}, 0, nullptr};
  REQUIRE(rt.lease_again(*h).error.is_null());
  json b = {{"calls", 100}, {"exec_ns", 1000}, {"counts", {{"main", {900, 100}}}}};
  RpcReply rewrite;
  for (int i = 0; i < 4; ++i) {
    rewrite = call(*h, "feedback.submit", {{"lease", rt.lease}, {"batches", {b}}});
    REQUIRE(rewrite.error.is_null());
    if (rewrite.result["stale"] == true) break;
  }
  REQUIRE(rewrite.result["stale"] == true);
  // The new profile's build compiles in the background; the instrumented one serves.
  REQUIRE(rt.lease_again(*h).error.is_null());
  CHECK(rt.last["mode"] == "instrumented");
  CHECK(rt.last["cache"]["outcome"] == "tier_up_pending");
  CHECK(rt.last["renew"] == true);
  RpcReply pending = call(*h, "feedback.submit", {{"lease", rt.lease}, {"batches", {b}}});
  REQUIRE(pending.error.is_null());
  CHECK(pending.result["policy"].get<std::string>().find("compiles in the background") !=
        std::string::npos);
}
