// fdo-worker: one compile or exec worker process, started by fdod's worker
// pools (`fdo-worker --role compile|exec --fd N`).
#include "fdo/daemon/worker_jobs.h"
#include "fdo/daemon/worker_loop.h"
#include "fdo/util/log.h"

#include <cstring>
#include <string>
#include <unistd.h>

int main(int argc, char** argv) {
  std::string role;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--role") == 0) role = argv[i + 1];
  fdo::log::set_ident("fdo-worker[" + role + ":" + std::to_string(::getpid()) + "]");
  auto fd = fdo::daemon::worker_fd_from_args(argc, argv);
  if (!fd) {
    fdo::log::error(fd.error().describe());
    return 64;
  }
  if (role == "compile") {
    auto jobs = fdo::daemon::CompileJobs::create();
    if (!jobs) {
      fdo::log::error(jobs.error().describe());
      return 1;
    }
    return fdo::daemon::run_worker_loop(
        *fd, [&](const fdo::daemon::Message& req) { return (*jobs)->handle(req); });
  }
  if (role == "exec") {
    auto jobs = fdo::daemon::ExecJobs::create();
    if (!jobs) {
      fdo::log::error(jobs.error().describe());
      return 1;
    }
    return fdo::daemon::run_worker_loop(
        *fd, [&](const fdo::daemon::Message& req) { return (*jobs)->handle(req); });
  }
  fdo::log::error("usage: fdo-worker --role compile|exec --fd N");
  return 64;
}
