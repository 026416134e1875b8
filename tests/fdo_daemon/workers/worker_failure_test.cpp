// classify_failure: how a job that took its worker down is reported and
// counted, for every way the pool can lose a worker, without a process.
#include "fdo/daemon/worker_pool.h"
#include "worker_failure.h"

#include <catch2/catch.hpp>
#include <csignal>
#include <sys/wait.h>

using namespace fdo;
using namespace fdo::daemon;
using namespace fdo::daemon::detail;
using namespace std::chrono_literals;

namespace {

FailureContext context(Failure kind, int wait_status, EndedBy ended_by = EndedBy::itself) {
  FailureContext ctx;
  ctx.pool_name = "exec";
  ctx.kind = kind;
  ctx.cause = make_error(Errc::unavailable, "channel closed");
  ctx.limits.wall = 500ms;
  ctx.limits.address_space_bytes = 64 * kMiB;
  ctx.limits.max_output_bytes = 1 * kMiB;
  ctx.ended.status = wait_status;
  ctx.pid = 4242;
  ctx.ended_by = ended_by;
  return ctx;
}

int killed_by(int sig) {
  return W_EXITCODE(0, sig);
}
int exited_with(int code) {
  return W_EXITCODE(code, 0);
}

bool counts(const ClassifiedFailure& f, std::uint64_t FailureCounts::*counter) {
  return f.counter == counter;
}

} // namespace

TEST_CASE("a worker killed at the wall deadline is a timeout naming the limit") {
  auto f = classify_failure(context(Failure::wall_timeout, killed_by(SIGKILL), EndedBy::pool));
  CHECK(f.error.code() == Errc::timeout);
  CHECK_THAT(f.error.message(), Catch::Contains("wall-time limit of 500 ms"));
  CHECK(counts(f, &FailureCounts::timeout));
}

TEST_CASE("a worker that crashed just as the deadline passed is reported for its crash") {
  auto f = classify_failure(context(Failure::wall_timeout, killed_by(SIGSEGV)));
  CHECK(f.error.code() == Errc::crashed);
  CHECK_THAT(f.error.message(), Catch::Contains("SIGSEGV (segmentation fault)"));
  CHECK_THAT(f.error.message(), Catch::Contains("pid 4242"));
  CHECK(counts(f, &FailureCounts::crashed));
}

TEST_CASE("an oversized response and a broken protocol are counted apart") {
  auto big =
      classify_failure(context(Failure::output_too_large, killed_by(SIGKILL), EndedBy::pool));
  CHECK(big.error.code() == Errc::resource_exhausted);
  CHECK_THAT(big.error.message(), Catch::Contains("output limit of 1 MiB"));
  CHECK(counts(big, &FailureCounts::output_too_large));

  auto proto = classify_failure(context(Failure::protocol, killed_by(SIGKILL), EndedBy::pool));
  CHECK(proto.error.code() == Errc::internal);
  CHECK_THAT(proto.error.message(), Catch::Contains("broke the protocol (channel closed)"));
  CHECK(counts(proto, &FailureCounts::protocol));

  auto silent = classify_failure(context(Failure::broken, killed_by(SIGKILL), EndedBy::pool));
  CHECK_THAT(silent.error.message(), Catch::Contains("stopped answering"));
  CHECK(counts(silent, &FailureCounts::protocol));
}

TEST_CASE("SIGXCPU is the CPU-time limit, derived from the wall limit when unset") {
  auto f = classify_failure(context(Failure::broken, killed_by(SIGXCPU)));
  CHECK(f.error.code() == Errc::timeout);
  CHECK_THAT(f.error.message(), Catch::Contains("CPU-time limit of 2 s"));
  CHECK(counts(f, &FailureCounts::cpu_limit));
}

TEST_CASE("memory: a cgroup OOM kill, or a fatal signal near the address-space limit") {
  auto ctx = context(Failure::broken, killed_by(SIGKILL));
  ctx.ended.oom_kills = 1;
  auto oom = classify_failure(ctx);
  CHECK(oom.error.code() == Errc::resource_exhausted);
  CHECK_THAT(oom.error.message(), Catch::Contains("cgroup's memory limit"));
  CHECK(counts(oom, &FailureCounts::memory));

  auto near = context(Failure::broken, killed_by(SIGSEGV));
  near.report = FatalReport{SIGSEGV, 60 * kMiB};
  auto f = classify_failure(near);
  CHECK(f.error.code() == Errc::resource_exhausted);
  CHECK_THAT(f.error.message(), Catch::Contains("it had mapped 60 MiB"));
  CHECK(counts(f, &FailureCounts::memory));

  // Far below the limit, the same signal is a crash.
  near.report = FatalReport{SIGSEGV, 1 * kMiB};
  auto crash = classify_failure(near);
  CHECK(crash.error.code() == Errc::crashed);
  CHECK(counts(crash, &FailureCounts::crashed));
}

TEST_CASE("a SIGKILL from outside the pool says so") {
  auto f = classify_failure(context(Failure::broken, killed_by(SIGKILL)));
  CHECK(f.error.code() == Errc::crashed);
  CHECK_THAT(f.error.message(), Catch::Contains("killed from outside the pool"));
}

TEST_CASE("a worker that exits mid-job is counted as exited") {
  auto f = classify_failure(context(Failure::broken, exited_with(3)));
  CHECK(f.error.code() == Errc::crashed);
  CHECK_THAT(f.error.message(), Catch::Contains("exited unexpectedly with status 3"));
  CHECK(counts(f, &FailureCounts::exited));
}

TEST_CASE("describe_signal names the signal and what it means") {
  CHECK(describe_signal(SIGFPE) == "SIGFPE (arithmetic exception, e.g. integer division by zero)");
  CHECK_THAT(describe_signal(SIGUSR1), Catch::StartsWith("SIGUSR1 ("));
}
