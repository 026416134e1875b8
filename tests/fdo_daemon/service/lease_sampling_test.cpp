// Sampling of in-process runtimes (lease_sampling.h): who may be sampled
// (may_sample), what a runtime may report (ranges of the leased output's
// functions, threads of its own process only) over a fake host and the perf
// syscall seam (hardware events included), and end to end through the
// Service: cpu-clock samples of a real thread of this test, spinning in code
// reported as the leased program's "main", come back from feedback.submit
// attributed to "main".
#include "../../perf/perf_fixtures.h"
#include "fdo/daemon/lease_sampling.h"
#include "rpc_call.h"
#include "support/skip.h"
#include "support/spin_section.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <ctime>
#include <iostream>
#include <thread>
#include <unistd.h>

using namespace fdo;
using namespace fdo::daemon;
using namespace fdo::daemon::testing;
using nlohmann::json;

using fdo::testing::thread_cpu_ns;

namespace {

SamplingConfig sampling_on() {
  SamplingConfig c;
  c.events = {"cpu-clock", "branch-misses"};
  c.frequency_hz = 1000;
  return c;
}

class FakeHost final : public SamplingHost {
public:
  SamplingAccess granted{0, true, 2};
  std::map<pid_t, uid_t> owners{{100, 1000}};
  std::set<std::pair<pid_t, pid_t>> threads{{100, 100}, {100, 101}, {100, 102}};
  perf::testing::FakeSyscalls sys;

  SamplingAccess access() override { return granted; }
  bool is_thread_of(pid_t pid, pid_t tid) override { return threads.count({pid, tid}) != 0; }
  std::optional<uid_t> owner(pid_t pid) override {
    auto it = owners.find(pid);
    return it == owners.end() ? std::nullopt : std::optional<uid_t>(it->second);
  }
  perf::Syscalls& syscalls() override { return sys; }
};

jit::CompileResult metadata() {
  jit::CompileResult m;
  m.entries.push_back(jit::EntryInfo{"run", "i64", {}, false});
  m.source_names["helper.c:helper"] = "helper";
  m.block_map.push_back({"run", {{0, 16, "run", 0, -1}, {16, 32, "run", 1, 0}}});
  return m;
}

} // namespace

TEST_CASE("may_sample: capability, same uid and paranoia decide, with a reason",
          "[service][inprocess][sampling]") {
  const SamplingConfig on = sampling_on();
  SamplingConfig off = on;
  off.frequency_hz = 0;
  const SamplingAccess cap{999, true, 3};
  const SamplingAccess plain{1000, false, 2};

  auto v = may_sample(cap, off, 1000, 42);
  CHECK_FALSE(v.allowed);
  CHECK(v.reason.find("sampling.frequency_hz = 0") != std::string::npos);
  v = may_sample(cap, on, 1000, 0);
  CHECK_FALSE(v.allowed);
  CHECK(v.reason.find("SO_PEERCRED") != std::string::npos);
  CHECK(may_sample(cap, on, 1000, 42).allowed); // CAP_PERFMON: any uid, any paranoia
  CHECK(may_sample(plain, on, 1000, 42).allowed);
  v = may_sample(plain, on, 1001, 42);
  CHECK_FALSE(v.allowed);
  CHECK(v.reason.find("uid 1001") != std::string::npos);
  CHECK(v.reason.find("CAP_PERFMON") != std::string::npos);
  v = may_sample({1000, false, 3}, on, 1000, 42);
  CHECK_FALSE(v.allowed);
  CHECK(v.reason.find("perf_event_paranoid is 3") != std::string::npos);
  CHECK_FALSE(may_sample({1000, false, std::nullopt}, on, 1000, 42).allowed);
}

TEST_CASE("lease sampling: ranges must be the leased output's functions",
          "[service][inprocess][sampling]") {
  auto host = std::make_shared<FakeHost>();
  LeaseSampling ls(host, 100, 1000, sampling_on(), metadata());
  CHECK(ls.set_ranges(json::array({{{"name", "run"}, {"start", 4096}, {"size", 64}},
                                   {{"name", "__fdo_thunk_run"}, {"start", 8192}, {"size", 32}},
                                   {{"name", "helper"}, {"start", 100}, {"size", 10}}})));
  CHECK(ls.state()["ranges"] == 3);

  auto refused = [&](const json& ranges, const std::string& words) {
    auto st = ls.set_ranges(ranges);
    REQUIRE_FALSE(st);
    CHECK(st.error().code() == Errc::invalid_argument);
    INFO(st.error().message());
    CHECK(st.error().message().find(words) != std::string::npos);
    CHECK(ls.state()["ranges"] == 3); // nothing changed
  };
  refused(json::array({{{"name", "libc_memcpy"}, {"start", 1}, {"size", 1}}}),
          "not a function of the leased output");
  refused(json::array({{{"name", "run"}, {"start", 4096}, {"size", 64}},
                       {{"name", "helper"}, {"start", 4100}, {"size", 8}}}),
          "overlap");
  refused(json::array({{{"name", "run"}, {"start", 4096}, {"size", 0}}}), "size of 0");
  refused(json::array({{{"name", "run"}, {"start", UINT64_MAX - 4}, {"size", 64}}}),
          "within the address space");
  refused(json::array({{{"name", "run"}, {"start", -5}, {"size", 64}}}), "must be {");
  refused(json::object(), "must be an array");
}

TEST_CASE("lease sampling: only threads of the lease's own process are sampled",
          "[service][inprocess][sampling]") {
  auto host = std::make_shared<FakeHost>();
  LeaseSamplingLimits limits;
  limits.max_threads = 2;
  LeaseSampling ls(host, 100, 1000, sampling_on(), metadata(), limits);
  CHECK(ls.state()["available"] == false);
  CHECK_FALSE(ls.drain()); // nothing sampled yet

  auto st = ls.add_threads(json::array({100, 555}));
  REQUIRE_FALSE(st);
  CHECK(st.error().code() == Errc::permission_denied);
  CHECK(st.error().message().find("thread 555 is not a thread of process 100") !=
        std::string::npos);
  CHECK(host->sys.opened.empty()); // refused before anything was opened
  CHECK_FALSE(ls.add_threads(json::array({"100"})));
  CHECK_FALSE(ls.add_threads(json::array({-1})));

  // The process at the other end changed hands: nothing is opened for it.
  host->owners[100] = 1001;
  st = ls.add_threads(json::array({100}));
  REQUIRE_FALSE(st);
  CHECK(st.error().message().find("no longer runs as uid 1000") != std::string::npos);
  host->owners[100] = 1000;

  // No PMU (the hardware event variants through the seam): cpu-clock samples,
  // branch-misses says why not.
  host->sys.fail_pmu_events(ENOENT);
  REQUIRE(ls.add_threads(json::array({100, 101, 102})));
  std::set<pid_t> watched;
  for (const auto& e : host->sys.opened)
    watched.insert(e.pid);
  CHECK(watched == std::set<pid_t>{100, 101}); // the third is past max_threads
  json state = ls.state();
  INFO(state.dump());
  CHECK(state["available"] == true);
  CHECK(state["threads"] == 2);
  CHECK(state["threads_refused"] == 1);
  REQUIRE(state["events"].size() == 2);
  CHECK(state["events"][0]["status"] == "available");
  CHECK(state["events"][1]["status"] != "available");
  CHECK(state["events"][1]["reason"].get<std::string>().find("ENOENT") != std::string::npos);

  // Already sampled threads are not opened twice.
  const std::size_t opened = host->sys.opened.size();
  REQUIRE(ls.add_threads(json::array({100})));
  CHECK(host->sys.opened.size() == opened);

  // A thread that ended is dropped at the next drain, its rings closed.
  REQUIRE(ls.set_ranges(json::array({{{"name", "run"}, {"start", 4096}, {"size", 64}}})));
  host->threads.erase({100, 101});
  std::optional<StageObservation> drained = ls.drain();
  REQUIRE(drained);
  REQUIRE(drained->samples);
  CHECK(drained->samples->recorded == 0);
  REQUIRE(drained->function_ranges);
  CHECK(drained->function_ranges->size() == 1);
  CHECK(ls.state()["threads"] == 1);
}

namespace {

using Reply = RpcReply;

// A request from process `pid` of this test's uid, on one connection.
Reply call_as_process(Harness& h, const std::string& method, const json& params, pid_t pid) {
  CallContext ctx;
  ctx.uid = ::geteuid();
  ctx.pid = pid;
  ctx.connection = 7;
  return call_with(h, method, params, ctx);
}

} // namespace

TEST_CASE("in-process sampling end to end: a thread's cpu-clock samples land in the leased code",
          "[service][inprocess][sampling][real]") {
  Config c = Harness::base_config();
  c.sampling.events = {"cpu-clock"};
  c.sampling.frequency_hz = 1000;
  Harness h(c);
  auto reg = h.call("program.register", {{"ir", "sampled program"}}, ::geteuid());
  REQUIRE(reg);
  const std::string program = (*reg)["program"];
  const pid_t pid = ::getpid();

  // Without a peer pid fdod says why it cannot sample.
  Reply blind =
      call_as_process(h, "program.lease", {{"program", program}, {"entries", {"main"}}}, 0);
  REQUIRE(blind.error.is_null());
  CHECK(blind.result["sampling"]["available"] == false);
  CHECK(blind.result["sampling"]["reason"].get<std::string>().find("SO_PEERCRED") !=
        std::string::npos);

  Reply lease =
      call_as_process(h, "program.lease", {{"program", program}, {"entries", {"main"}}}, pid);
  REQUIRE(lease.error.is_null());
  const json& sampling = lease.result["sampling"];
  if (sampling["available"] != true) {
    FDO_SKIP("skipped: fdod may not sample this process here: " + sampling["reason"].dump());
  }
  const std::uint64_t id = lease.result["lease"];

  std::atomic<pid_t> tid{0};
  std::atomic<bool> go{false};
  std::atomic<std::uint64_t> sink{0};
  std::thread spinner([&] {
    tid = static_cast<pid_t>(::gettid());
    while (!go)
      std::this_thread::yield();
    std::uint64_t x = 1;
    const std::uint64_t until = thread_cpu_ns() + 300'000'000; // 300 ms of CPU
    while (thread_cpu_ns() < until)
      x = fdo::testing::spin_in_section(2'000'000, x);
    sink = x;
  });
  while (tid == 0)
    std::this_thread::yield();
  const std::uint64_t start = fdo::testing::spin_start();
  const std::uint64_t size = fdo::testing::spin_size();
  const json ranges = json::array({{{"name", "main"}, {"start", start}, {"size", size}}});

  // Someone else's pid, or a thread of another process: refused.
  Reply other = call_as_process(
      h, "program.sample", {{"lease", id}, {"pid", 1}, {"threads", {1}}, {"ranges", ranges}}, pid);
  CHECK(other.error["data"]["code"] == "permission_denied");
  other = call_as_process(h, "program.sample",
                          {{"lease", id}, {"pid", pid}, {"threads", {1}}, {"ranges", ranges}}, pid);
  CHECK(other.error["data"]["code"] == "permission_denied");

  Reply started = call_as_process(
      h, "program.sample",
      {{"lease", id}, {"pid", pid}, {"threads", {tid.load()}}, {"ranges", ranges}}, pid);
  INFO(started.error.dump() << started.result.dump());
  REQUIRE(started.error.is_null());
  if (started.result["sampling"]["available"] != true) {
    go = true;
    spinner.join();
    FDO_SKIP("skipped: cpu-clock sampling of another thread unavailable: " +
             started.result["sampling"].dump());
  }
  CHECK(started.result["sampling"]["threads"] == 1);
  go = true;
  spinner.join();
  // join() returns once the thread cleared its tid, a moment before the
  // kernel removes its /proc/<pid>/task entry (what the drain looks at).
  const std::string task = "/proc/self/task/" + std::to_string(tid.load());
  for (int i = 0; i < 500 && ::access(task.c_str(), F_OK) == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  REQUIRE(::access(task.c_str(), F_OK) != 0);
  CHECK(sink != 0);

  Reply submitted = call_as_process(
      h, "feedback.submit",
      {{"lease", id},
       {"batches", {{{"calls", 100}, {"exec_ns", 300'000'000}, {"counts", json::object()}}}}},
      pid);
  INFO(submitted.error.dump());
  REQUIRE(submitted.error.is_null());
  const json& samples = submitted.result["samples"];
  std::cout << "in-process sampling: " << samples.dump() << "\n";
  REQUIRE(samples.is_object());
  CHECK(samples["clock_event"] == "cpu-clock");
  CHECK(samples["attributed"].get<std::uint64_t>() >= 50); // ~300 at 1 kHz
  const std::uint64_t in_main = samples["functions"].value("main", std::uint64_t{0});
  CHECK(in_main * 10 >= samples["attributed"].get<std::uint64_t>() * 8);

  // The thread has ended: the drain dropped its sampler, so nothing is
  // sampled any more and the next submit carries no samples.
  Reply now = call_as_process(h, "program.sample", {{"lease", id}, {"pid", pid}}, pid);
  REQUIRE(now.error.is_null());
  CHECK(now.result["sampling"]["threads"] == 0);
  submitted = call_as_process(
      h, "feedback.submit",
      {{"lease", id}, {"batches", {{{"calls", 1}, {"exec_ns", 1}, {"counts", json::object()}}}}},
      pid);
  REQUIRE(submitted.error.is_null());
  CHECK(submitted.result["samples"].is_null());

  // Releasing the lease closes the samplers with it.
  Reply released = call_as_process(h, "program.release", {{"lease", id}}, pid);
  CHECK(released.error.is_null());
}
