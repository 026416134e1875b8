#include "worker_process.h"

#include "fdo/daemon/worker_pool.h"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <string_view>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

extern char** environ;

namespace fdo::daemon::detail {

std::string describe_exit(const ExitInfo& e) {
  if (e.status == -1) return "ended (status unknown: reaped elsewhere; is SIGCHLD ignored?)";
  if (WIFSIGNALED(e.status)) return "was killed by " + describe_signal(WTERMSIG(e.status));
  if (WIFEXITED(e.status)) return "exited with status " + std::to_string(WEXITSTATUS(e.status));
  return "ended with wait status " + std::to_string(e.status);
}

void Child::signal_group(int sig) const {
  if (reaped_) return; // an unreaped leader keeps its pid and pgid from being reused
  ::kill(-pid_, sig);
  ::kill(pid_, sig); // in case the job moved the worker to another group
}

bool Child::wait_exited(milliseconds timeout) const {
  if (reaped_) return true;
  auto deadline = Clock::now() + timeout;
  for (;;) {
    siginfo_t si{};
    int r = ::waitid(P_PID, static_cast<id_t>(pid_), &si, WEXITED | WNOHANG | WNOWAIT);
    if (r == 0 && si.si_pid == pid_) return true;
    if (r != 0 && errno == ECHILD) return true;
    if (r != 0 && errno == EINTR) continue;
    auto now = Clock::now();
    if (now >= deadline) return false;
    auto left = std::chrono::ceil<milliseconds>(deadline - now).count();
    if (pidfd_.valid()) {
      pollfd p{pidfd_.get(), POLLIN, 0};
      ::poll(&p, 1, static_cast<int>(std::min<std::int64_t>(left, 100)));
    } else {
      std::this_thread::sleep_for(std::min(milliseconds(2), milliseconds(left)));
    }
  }
}

ExitInfo Child::reap() {
  if (reaped_) return exit_;
  signal_group(SIGKILL);
  ExitInfo e;
  int status = 0;
  pid_t r;
  do {
    r = ::wait4(pid_, &status, 0, &e.usage);
  } while (r < 0 && errno == EINTR);
  if (r == pid_) e.status = status;
  if (cgroup_) {
    e.oom_kills = cgroup_->oom_kills();
    (void)cgroup_->kill(); // anything of the worker's still in its group
  }
  reaped_ = true;
  exit_ = e;
  return e;
}

void Child::reset_output() {
  if (!outputs_empty_)
    for (const Fd* f : {&out_, &err_})
      if (f->valid()) (void)::ftruncate(f->get(), 0);
  outputs_empty_ = false; // a job runs now
}

namespace {

// Up to `limit` bytes of a capture file; `truncated` when it holds more;
// `empty` false unless it held nothing.
std::string read_capture(const Fd& f, std::uint64_t limit, bool& truncated, bool& empty) {
  empty = false;
  if (!f.valid()) return {};
  struct stat st {};
  if (::fstat(f.get(), &st) != 0) return {};
  auto size = static_cast<std::uint64_t>(st.st_size);
  empty = size == 0;
  if (size > limit) truncated = true;
  std::string out(std::min(size, limit), '\0');
  std::size_t got = 0;
  while (got < out.size()) {
    ssize_t n = ::pread(f.get(), out.data() + got, out.size() - got, static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  out.resize(got);
  return out;
}

Expected<Fd> capture_file(const char* name) {
  int fd = ::memfd_create(name, MFD_CLOEXEC);
  if (fd < 0) return Error::from_errno("memfd_create", errno);
  Fd f(fd);
  // Appends land at the end even after the pool truncates the file.
  if (::fcntl(fd, F_SETFL, O_APPEND) != 0) return Error::from_errno("fcntl(O_APPEND)", errno);
  return f;
}

} // namespace

JobOutput Child::read_output(std::uint64_t limit) const {
  JobOutput o;
  // A bound worker's RLIMIT_FSIZE is limit + 1: a longer stream was cut.
  bool out_empty = false, err_empty = false;
  o.out = read_capture(out_, limit, o.truncated, out_empty);
  o.err = read_capture(err_, limit, o.truncated, err_empty);
  outputs_empty_ = out_empty && err_empty;
  return o;
}

struct FileActions {
  posix_spawn_file_actions_t fa;
  FileActions() { ::posix_spawn_file_actions_init(&fa); }
  ~FileActions() { ::posix_spawn_file_actions_destroy(&fa); }
  FileActions(const FileActions&) = delete;
  FileActions& operator=(const FileActions&) = delete;
};

struct SpawnAttr {
  posix_spawnattr_t attr;
  SpawnAttr() { ::posix_spawnattr_init(&attr); }
  ~SpawnAttr() { ::posix_spawnattr_destroy(&attr); }
  SpawnAttr(const SpawnAttr&) = delete;
  SpawnAttr& operator=(const SpawnAttr&) = delete;
};

Expected<std::unique_ptr<Child>> spawn_worker(const SpawnOptions& o) {
  const std::string who = o.name + " worker " + o.path;
  FDO_TRY(SocketPair sp, make_socket_pair());

  std::vector<std::string> args;
  args.push_back(o.path);
  args.insert(args.end(), o.args.begin(), o.args.end());
  args.push_back("--fd");
  args.push_back(std::to_string(kWorkerChannelFd));
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);

  const std::string parent_var = std::string(kWorkerParentPidEnv) + "=";
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e)
    if (!std::string_view(*e).starts_with(parent_var)) env.emplace_back(*e);
  env.push_back(parent_var + std::to_string(::getpid()));
  std::vector<char*> envp;
  for (auto& e : env)
    envp.push_back(e.data());
  envp.push_back(nullptr);

  // The child gets exactly: stdin from /dev/null; as stdout and stderr the
  // capture files, or our own (the journal); the channel as fd 3; our stderr
  // as fd 4 for its own log lines; nothing else. closefrom runs in the child
  // after the dup2s, so no descriptor of the daemon (listening socket,
  // database, other workers' channels) leaks, CLOEXEC or not.
  Fd out, err;
  if (o.capture_output_bytes != 0) {
    FDO_TRY(out, capture_file("fdo-job-stdout"));
    FDO_TRY(err, capture_file("fdo-job-stderr"));
  }
  const bool have_stderr = ::fcntl(STDERR_FILENO, F_GETFD) != -1;
  FileActions fa;
  int rc = ::posix_spawn_file_actions_adddup2(&fa.fa, sp.second.get(), kWorkerChannelFd);
  if (rc == 0 && have_stderr)
    rc = ::posix_spawn_file_actions_adddup2(&fa.fa, STDERR_FILENO, kWorkerLogFd);
  if (rc == 0 && !have_stderr)
    rc = ::posix_spawn_file_actions_addopen(&fa.fa, kWorkerLogFd, "/dev/null", O_WRONLY, 0);
  if (rc == 0) rc = ::posix_spawn_file_actions_addopen(&fa.fa, 0, "/dev/null", O_RDONLY, 0);
  if (out.valid()) {
    if (rc == 0) rc = ::posix_spawn_file_actions_adddup2(&fa.fa, out.get(), 1);
    if (rc == 0) rc = ::posix_spawn_file_actions_adddup2(&fa.fa, err.get(), 2);
  } else {
    for (int fd : {1, 2}) {
      bool usable = ::fcntl(fd, F_GETFD) != -1 && fd != sp.first.get() && fd != sp.second.get();
      if (rc == 0 && !usable)
        rc = ::posix_spawn_file_actions_addopen(&fa.fa, fd, "/dev/null", O_WRONLY, 0);
    }
  }
  if (rc == 0) rc = ::posix_spawn_file_actions_addclosefrom_np(&fa.fa, kWorkerLogFd + 1);
  if (rc != 0) return Error::from_errno("prepare to start " + who, rc);

  SpawnAttr at;
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  rc = ::posix_spawnattr_setflags(&at.attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
                                                POSIX_SPAWN_SETSIGDEF);
  if (rc == 0) rc = ::posix_spawnattr_setpgroup(&at.attr, 0);
  if (rc == 0) rc = ::posix_spawnattr_setsigmask(&at.attr, &none);
  if (rc == 0) rc = ::posix_spawnattr_setsigdefault(&at.attr, &all);
  if (rc != 0) return Error::from_errno("prepare to start " + who, rc);

  pid_t pid = -1;
  rc = ::posix_spawn(&pid, o.path.c_str(), &fa.fa, &at.attr, argv.data(), envp.data());
  if (rc != 0) return Error::from_errno("start " + who, rc);
  sp.second.reset();

  int raw_pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  auto child = std::make_unique<Child>(pid, Fd(raw_pidfd >= 0 ? raw_pidfd : -1),
                                       std::move(sp.first), std::move(out), std::move(err));
  const std::string named = who + " (pid " + std::to_string(pid) + ")";
  if (o.cgroups) {
    // Placed before its handshake, long before its first job binds it.
    auto group = o.cgroups->create("w" + std::to_string(pid));
    Status placed = group ? (*group)->add(pid) : Status(group.error());
    if (!placed) {
      child->reap();
      return placed.error().context("place " + named + " in its cgroup");
    }
    child->set_cgroup(std::move(*group));
  }

  auto hello = recv_message(child->sock(), FrameLimits{64 * kKiB, 0, 64 * kKiB},
                            Deadline::after(o.startup_timeout), child->pidfd());
  if (!hello) {
    if (hello.error().code() == Errc::timeout) {
      child->reap();
      return make_error(Errc::unavailable, named + " did not complete its handshake within " +
                                               std::to_string(o.startup_timeout.count()) +
                                               " ms (killed)");
    }
    child->wait_exited(kExitGrace);
    ExitInfo e = child->reap();
    return make_error(Errc::unavailable, named + " " + describe_exit(e) +
                                             " before completing its handshake (" +
                                             hello.error().message() + ")");
  }
  const auto& h = hello->header;
  bool good = h.is_object() && h.contains("hello") && h["hello"].is_object() &&
              h["hello"].value("protocol", -1) == kWorkerProtocolVersion;
  if (!good) {
    child->reap();
    return make_error(Errc::unavailable,
                      named + " sent an unexpected handshake: " +
                          h.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  }
  return child;
}

} // namespace fdo::daemon::detail
