// fdo-worker: one compile or exec worker process, started by fdod's worker
// pools (`fdo-worker --role compile|exec|gpu --fd N`). Its first job binds it to a
// tenant: it enters that tenant's sandbox (sandbox.h) before touching the
// tenant's program, and serves only that tenant until the pool retires it.
#include "fdo/daemon/gpu_jobs.h"
#include "fdo/daemon/sandbox.h"
#include "fdo/daemon/worker_jobs.h"
#include "fdo/daemon/worker_loop.h"
#include "fdo/util/log.h"

#include <atomic>
#include <cstring>
#include <fcntl.h>
#include <string>
#include <unistd.h>

namespace {

#ifdef FDO_SANITIZER_BUILD
// Sanitizer builds only: once a worker is bound it ends when the pool retires
// it or when its program calls exit(n), and what it still holds then is the
// program's or an unfinished job's, not a leak of ours. LeakSanitizer's report
// would turn the program's exit status into 1.
std::atomic<bool> bound_to_tenant{false};
#endif

// The pool gives each worker the daemon's log as fd 4 (its own stdout and
// stderr may capture the programs it runs).
constexpr int kLogFd = 4;

fdo::daemon::BindHandler binder() {
  return [](const nlohmann::json& j) -> fdo::Expected<nlohmann::json> {
    FDO_TRY(fdo::daemon::SandboxSpec spec, fdo::daemon::sandbox_spec_from_json(j));
    FDO_TRY(fdo::daemon::SandboxReport report, fdo::daemon::enter_sandbox(spec));
#ifdef FDO_SANITIZER_BUILD
    bound_to_tenant.store(true);
#endif
    return fdo::daemon::to_json(report);
  };
}

} // namespace

#ifdef FDO_SANITIZER_BUILD
extern "C" int __lsan_is_turned_off() {
  return bound_to_tenant.load() ? 1 : 0;
}
#endif

int main(int argc, char** argv) {
  std::string role;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--role") == 0) role = argv[i + 1];
  if (::fcntl(kLogFd, F_GETFD) != -1) fdo::log::set_output_fd(kLogFd);
  fdo::log::set_ident("fdo-worker[" + role + ":" + std::to_string(::getpid()) + "]");
  auto fd = fdo::daemon::worker_fd_from_args(argc, argv);
  if (!fd) {
    fdo::log::error(fd.error().describe());
    return 64;
  }
  // Before any thread starts: they inherit it (compile workers, whose part
  // threads then run below the daemon and the exec workers).
  auto nice = fdo::daemon::worker_nice_from_args(argc, argv);
  if (!nice) {
    fdo::log::error(nice.error().describe());
    return 64;
  }
  if (auto st = fdo::daemon::lower_cpu_priority(*nice); !st)
    fdo::log::warning("CPU priority left as it was: " + st.error().describe());
  fdo::daemon::WorkerLoopOptions options;
  if (role == "compile") {
    fdo::daemon::CompileJobs jobs;
    options.bind = binder();
    return fdo::daemon::run_worker_loop(
        *fd, [&](const fdo::daemon::Message& req) { return jobs.handle(req); }, options);
  }
  if (role == "exec") {
    auto jobs = fdo::daemon::ExecJobs::create();
    if (!jobs) {
      fdo::log::error(jobs.error().describe());
      return 1;
    }
    options.bind = binder();
    options.threads_after_job = [&] { return (*jobs)->threads_after_job(); };
    return fdo::daemon::run_worker_loop(
        *fd, [&](const fdo::daemon::Message& req) { return (*jobs)->handle(req); }, options);
  }
  if (role == "gpu") {
    // The driver is loaded on the first job, inside the tenant's sandbox
    // (which refuses a process that already runs the driver's threads).
    fdo::daemon::GpuJobs jobs(
        [](const std::string& path) { return fdo::gpu::load_cuda_driver(path); });
    options.bind = binder();
    options.leftover_threads = fdo::daemon::LeftoverThreads::expected;
    options.retire_after = [&]() -> std::string {
      return jobs.broken() ? "the GPU context was lost to a kernel fault" : "";
    };
    return fdo::daemon::run_worker_loop(
        *fd, [&](const fdo::daemon::Message& req) { return jobs.handle(req); }, options);
  }
  fdo::log::error("usage: fdo-worker --role compile|exec|gpu --fd N");
  return 64;
}
