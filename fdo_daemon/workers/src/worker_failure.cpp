#include "worker_failure.h"

#include "fdo/daemon/worker_pool.h"

#include <csignal>
#include <cstring>
#include <sys/wait.h>

namespace fdo::daemon {

std::string describe_signal(int sig) {
  const char* what = nullptr;
  switch (sig) {
  case SIGSEGV:
    what = "segmentation fault";
    break;
  case SIGABRT:
    what = "aborted";
    break;
  case SIGFPE:
    what = "arithmetic exception, e.g. integer division by zero";
    break;
  case SIGILL:
    what = "illegal instruction";
    break;
  case SIGBUS:
    what = "bus error";
    break;
  case SIGKILL:
    what = "killed";
    break;
  case SIGTERM:
    what = "terminated";
    break;
  case SIGXCPU:
    what = "CPU time limit exceeded";
    break;
  case SIGXFSZ:
    what = "file size limit exceeded";
    break;
  case SIGSYS:
    what = "bad system call";
    break;
  case SIGTRAP:
    what = "trace/breakpoint trap";
    break;
  case SIGPIPE:
    what = "broken pipe";
    break;
  default:
    break;
  }
  const char* abbrev = ::sigabbrev_np(sig);
  std::string name = abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
  if (what == nullptr) {
    const char* d = ::sigdescr_np(sig);
    what = d ? d : "unknown signal";
  }
  return name + " (" + what + ")";
}

namespace detail {

ClassifiedFailure classify_failure(const FailureContext& ctx) {
  const std::string who = ctx.pool_name + " worker";
  const std::string where = " in the " + who + " (pid " + std::to_string(ctx.pid) + ", replaced)";
  const bool signaled = ctx.ended.status != -1 && WIFSIGNALED(ctx.ended.status);
  const int sig = signaled ? WTERMSIG(ctx.ended.status) : 0;

  switch (ctx.kind) {
  case Failure::wall_timeout:
    // A worker that died of something else just as the deadline passed is
    // reported for what it died of.
    if (signaled && sig != SIGKILL) break;
    return {make_error(Errc::timeout, who + " exceeded the wall-time limit of " +
                                          std::to_string(ctx.limits.wall.count()) + " ms (killed)"),
            &FailureCounts::timeout};
  case Failure::output_too_large:
    return {make_error(Errc::resource_exhausted,
                       who + " response exceeds the output limit of " +
                           format_bytes(ctx.limits.max_output_bytes) + " (" + ctx.cause.message() +
                           "); worker pid " + std::to_string(ctx.pid) + " killed and replaced"),
            &FailureCounts::output_too_large};
  case Failure::protocol:
    return {make_error(Errc::internal, who + " pid " + std::to_string(ctx.pid) +
                                           " broke the protocol (" + ctx.cause.message() +
                                           "); killed and replaced"),
            &FailureCounts::protocol};
  case Failure::broken:
    break;
  }

  if (ctx.kind == Failure::broken && ctx.ended_by == EndedBy::pool) {
    return {make_error(Errc::internal, who + " pid " + std::to_string(ctx.pid) +
                                           " stopped answering (" + ctx.cause.message() +
                                           ") and was killed and replaced"),
            &FailureCounts::protocol};
  }
  if (signaled) {
    if (sig == SIGXCPU) {
      return {make_error(Errc::timeout, who + " exceeded the CPU-time limit of " +
                                            std::to_string(effective_cpu_seconds(ctx.limits)) +
                                            " s (SIGXCPU; pid " + std::to_string(ctx.pid) +
                                            ", replaced)"),
              &FailureCounts::cpu_limit};
    }
    if (sig == SIGKILL && ctx.ended.oom_kills > 0) {
      return {make_error(Errc::resource_exhausted,
                         "program exceeded the memory limit of " +
                             format_bytes(ctx.limits.address_space_bytes) + where +
                             ": the kernel killed it at its cgroup's memory limit"),
              &FailureCounts::memory};
    }
    const bool memory_signal = sig == SIGSEGV || sig == SIGBUS || sig == SIGABRT || sig == SIGILL ||
                               sig == SIGTRAP || sig == SIGKILL;
    // The worker reports, from its fatal-signal handler, how much address
    // space the job had added. Within a quarter of the limit, the likeliest
    // story is an allocation that failed and was not checked.
    if (memory_signal && ctx.limits.address_space_bytes != 0 && ctx.report &&
        ctx.report->job_vm_bytes / 3 >= ctx.limits.address_space_bytes / 4) {
      return {make_error(Errc::resource_exhausted,
                         "program exceeded the memory limit of " +
                             format_bytes(ctx.limits.address_space_bytes) + where +
                             ": it had mapped " + format_bytes(ctx.report->job_vm_bytes) +
                             " when it died of " + describe_signal(sig)),
              &FailureCounts::memory};
    }
    std::string msg = "program crashed: " + describe_signal(sig) + where;
    if (sig == SIGKILL)
      msg += "; it was killed from outside the pool, e.g. by the kernel's OOM killer";
    return {make_error(Errc::crashed, msg), &FailureCounts::crashed};
  }
  if (ctx.ended.status != -1 && WIFEXITED(ctx.ended.status)) {
    return {make_error(Errc::crashed, who + " exited unexpectedly with status " +
                                          std::to_string(WEXITSTATUS(ctx.ended.status)) +
                                          " during the job (pid " + std::to_string(ctx.pid) +
                                          ", replaced)"),
            &FailureCounts::exited};
  }
  return {make_error(Errc::crashed, who + " pid " + std::to_string(ctx.pid) + " " +
                                        describe_exit(ctx.ended) + " during the job (" +
                                        ctx.cause.message() + ")"),
          &FailureCounts::crashed};
}

} // namespace detail
} // namespace fdo::daemon
