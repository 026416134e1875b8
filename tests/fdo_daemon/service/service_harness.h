// The Service composed over fake compile/exec runners (fakes.h) and a real
// SQLite store in a temp dir, for the service's tests: Harness::call sends
// one JSON-RPC request as a given uid; `audit` records every audit record.
#pragma once

#include "fakes.h"
#include "fdo/daemon/service.h"
#include "fdo/jit/compiler.h"
#include "support/temp_dir.h"

#include <catch2/catch.hpp>
#include <mutex>
#include <unistd.h>

namespace fdo::daemon::testing {

using fdo::test_support::TempDir;
using nlohmann::json;

inline constexpr std::uint64_t kHash = 0xfeed;

// A compile worker stand-in: analysis from the bytes, "objects" naming the
// mode, instrumented builds with one counted function "main" (cs_instrumented
// ones too, under a CFG hash with the CS flag).
// A compile worker's reply (compile_messages.h): the metadata text, then the object.
inline Expected<Message> compile_reply(const jit::CompileResult& r, const std::string& object) {
  return compile_reply_message(CompileReply{}, jit::metadata_to_json(r).dump(), object);
}

inline Expected<Message> fake_compile(const Message& req) {
  Message out;
  std::string op = job_op(req);
  if (op == "analyze") {
    if (req.payload.starts_with("bad")) return make_error(Errc::parse, "not IR");
    out.header = {{"profile_key", blake3_hex(req.payload)},
                  {"entries", {{{"name", "main"}, {"returns", "i64"}, {"params", json::array()}}}}};
    return out;
  }
  if (op == "compile") {
    FDO_TRY(CompileJobView job, compile_job_of(req));
    jit::CompileResult r;
    r.mode = job.job.mode;
    r.profile_key = blake3_hex(job.program);
    r.entries.push_back(jit::EntryInfo{"main", "i64", {}, true});
    r.mutable_globals = false;
    // One indirect-call site and one profiled argument (in-process value
    // profiles are checked against them: inprocess_test.cpp).
    if (r.mode == CompileMode::instrumented)
      r.counters_layout.push_back({"main", kHash, 2, 1, 0, {0}});
    if (r.mode == CompileMode::cs_instrumented)
      r.counters_layout.push_back({"main", kHash | kCsHashFlag, 3});
    std::string object = "object:" + std::string(to_string(r.mode));
    // Compiled with context-sensitive counts (what CSIRUse would apply).
    if (job.job.profile && !job.job.profile->cs_functions.empty()) object += "+cs";
    return compile_reply(r, object);
  }
  return make_error(Errc::invalid_argument, "unknown op " + op);
}

// An exec worker stand-in: returns 42; instrumented objects report counts.
// An execute sent by key only (no object_size: exec_messages.h) is answered
// with missing_object, as by a worker that does not hold the key; the
// service then sends it again with the object. Other ops (the perf probe)
// get an empty answer.
inline Expected<Message> fake_exec(const Message& req) {
  if (job_op(req) != "exec") return Message{};
  FDO_TRY(FakeExecJob j, fake_exec_job(req));
  if (!j.job.object_size) return fake_exec_missing();
  StageObservation obs;
  // 43 from an object compiled with context-sensitive counts.
  obs.ret = j.object.ends_with("+cs") ? 43 : 42;
  obs.exec_ns = 1000;
  obs.measurement.emplace().wall_ns = 1000;
  if (j.object.starts_with("object:instrumented")) obs.counts["main"] = {900, 100};
  if (j.object.starts_with("object:cs_instrumented")) obs.counts["main"] = {30, 0, 70};
  return fake_exec_ran(std::move(obs));
}

// The audit seam: every record the service writes.
struct RecordingAudit : AuditSink {
  std::mutex mu;
  std::vector<AuditRecord> records;
  void record(const AuditRecord& r) override {
    std::lock_guard lk(mu);
    records.push_back(r);
  }
};

struct Harness {
  TempDir dir{"fdo-service"};
  std::shared_ptr<RecordingAudit> audit = std::make_shared<RecordingAudit>();
  FakeRunner* compile = nullptr;
  FakeRunner* exec = nullptr;
  std::unique_ptr<Service> service;
  Dispatcher dispatcher;

  // `store`: the store to compose over (default: SQLite in the state dir);
  // `host`: this service's host name; `compile_fn`: the compile worker;
  // `state_dir`: an existing state dir to start over (a restart), instead of
  // the harness's own.
  explicit Harness(Config c = base_config(), FakeRunner::Fn exec_fn = fake_exec,
                   ServiceBuilder::StoreCreator store = nullptr, std::string host = "test-host",
                   FakeRunner::Fn compile_fn = fake_compile, std::string state_dir = "") {
    c.state_dir = state_dir.empty() ? dir.str() : state_dir;
    ServiceBuilder builder(c);
    if (store) builder.store(std::move(store));
    auto s =
        builder
            .runners([this, exec_fn,
                      compile_fn](WorkerRole role, const Config&,
                                  auto&&...) -> Expected<std::unique_ptr<JobRunner>> {
              auto r = std::make_unique<FakeRunner>(
                  std::string(to_string(role)), role == WorkerRole::compile ? compile_fn : exec_fn);
              (role == WorkerRole::compile ? compile : exec) = r.get();
              return std::unique_ptr<JobRunner>(std::move(r));
            })
            .perf_probe([](const Config&, JobRunner&) {
              return json{{"pmu", false}};
            })
            .sandbox_probe([] { return testing::test_host(); })
            .host_name(host)
            .audit_sink(audit)
            .create();
    REQUIRE(s);
    service = std::move(*s);
    service->register_methods(dispatcher);
  }

  static Config base_config() {
    Config c;
    c.tier_up = TierUp::sync;
    c.policy.min_stages = 2;
    c.policy.min_counts = 100;
    // Tests count stages and versions of the first round alone; the
    // context-sensitive round (on by default) has tests that set it.
    c.policy.cs_pgo_stages = 0;
    return c;
  }

  Expected<json> call(const std::string& method, const json& params, uid_t uid = 1000) {
    CallContext ctx;
    ctx.uid = uid;
    json req = {{"jsonrpc", "2.0"}, {"id", 1}, {"method", method}, {"params", params}};
    auto line = dispatcher.handle_line(req.dump(), ctx);
    REQUIRE(line);
    json resp = json::parse(*line);
    if (resp.contains("error")) {
      UNSCOPED_INFO(method << " failed: " << resp["error"].dump());
      return make_error(Errc::internal, resp["error"].dump());
    }
    return resp["result"];
  }
};

} // namespace fdo::daemon::testing
