#include "fdo/daemon/worker_pool.h"

#include "fdo/util/enum_names.h"
#include "fdo/util/log.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <deque>
#include <fcntl.h>
#include <filesystem>
#include <mutex>
#include <optional>
#include <poll.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

extern char** environ;

namespace fdo::daemon {

namespace {
constexpr EnumNames<WorkerState, 4> kWorkerStateNames{{{{WorkerState::starting, "starting"},
                                                        {WorkerState::idle, "idle"},
                                                        {WorkerState::busy, "busy"},
                                                        {WorkerState::dead, "dead"}}}};
} // namespace

std::string_view to_string(WorkerState s) {
  return kWorkerStateNames.name(s);
}

std::uint64_t FailureCounts::total() const {
  return handler_error + timeout + cpu_limit + crashed + memory + exited + output_too_large +
         protocol + queue_full + queue_timeout + unavailable;
}

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

nlohmann::json to_json(const PoolStats& s) {
  nlohmann::json workers = nlohmann::json::array();
  for (const auto& w : s.workers) {
    nlohmann::json j = {{"slot", w.slot},
                        {"pid", static_cast<long>(w.pid)},
                        {"state", std::string(to_string(w.state))},
                        {"jobs", w.jobs},
                        {"consecutive_spawn_failures", w.consecutive_spawn_failures}};
    if (!w.last_spawn_error.empty()) j["last_spawn_error"] = w.last_spawn_error;
    workers.push_back(std::move(j));
  }
  const auto& f = s.failures;
  return {{"name", s.name},
          {"size", s.size},
          {"live", s.live},
          {"waiting", s.waiting},
          {"jobs", s.jobs},
          {"succeeded", s.succeeded},
          {"failures",
           {{"total", f.total()},
            {"handler_error", f.handler_error},
            {"timeout", f.timeout},
            {"cpu_limit", f.cpu_limit},
            {"crashed", f.crashed},
            {"memory", f.memory},
            {"exited", f.exited},
            {"output_too_large", f.output_too_large},
            {"protocol", f.protocol},
            {"queue_full", f.queue_full},
            {"queue_timeout", f.queue_timeout},
            {"unavailable", f.unavailable}}},
          {"restarts", s.restarts},
          {"spawn_failures", s.spawn_failures},
          {"idle_deaths", s.idle_deaths},
          {"workers", std::move(workers)}};
}

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// The channel's number inside a worker ("--fd 3").
constexpr int kWorkerChannelFd = 3;
// Room for the response envelope and error messages around max_output_bytes.
constexpr std::uint64_t kEnvelopeSlack = 64 * kKiB;
// How long a worker whose channel broke gets to finish dying on its own
// before it is killed (its real exit status is what we want to report).
constexpr milliseconds kExitGrace{1000};

struct ExitInfo {
  int status = -1; // wait status; -1 when it could not be collected
  rusage usage{};
};

std::string describe_exit(const ExitInfo& e) {
  if (e.status == -1) return "ended (status unknown: reaped elsewhere; is SIGCHLD ignored?)";
  if (WIFSIGNALED(e.status)) return "was killed by " + describe_signal(WTERMSIG(e.status));
  if (WIFEXITED(e.status)) return "exited with status " + std::to_string(WEXITSTATUS(e.status));
  return "ended with wait status " + std::to_string(e.status);
}

// One worker process: its pid, a pidfd (when the kernel has them) and our end
// of the channel. Each worker leads its own process group so that whatever it
// forked is killed with it. The destructor never leaves a zombie behind.
class Child {
public:
  Child(pid_t pid, Fd pidfd, Fd sock)
      : pid_(pid), pidfd_(std::move(pidfd)), sock_(std::move(sock)) {}
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child() {
    if (!reaped_) reap();
  }

  pid_t pid() const { return pid_; }
  int sock() const { return sock_.get(); }
  int pidfd() const { return pidfd_.get(); }
  void close_channel() { sock_.reset(); }

  void signal_group(int sig) const {
    if (reaped_) return; // an unreaped leader keeps its pid and pgid from being reused
    ::kill(-pid_, sig);
    ::kill(pid_, sig); // in case the job moved the worker to another group
  }

  // True once the worker has exited (it is left unreaped, so its group and
  // status stay valid); false if it is still running after `timeout`.
  bool wait_exited(milliseconds timeout) const {
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

  // Kills whatever is left of the worker's process group and collects the
  // worker's exit status (its real one if it had already died).
  ExitInfo reap() {
    if (reaped_) return exit_;
    signal_group(SIGKILL);
    ExitInfo e;
    int status = 0;
    pid_t r;
    do {
      r = ::wait4(pid_, &status, 0, &e.usage);
    } while (r < 0 && errno == EINTR);
    if (r == pid_) e.status = status;
    reaped_ = true;
    exit_ = e;
    return e;
  }

private:
  pid_t pid_;
  Fd pidfd_;
  Fd sock_;
  bool reaped_ = false;
  ExitInfo exit_;
};

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

Expected<std::unique_ptr<Child>> spawn_worker(const PoolOptions& o) {
  const std::string who = o.name + " worker " + o.worker_path;
  FDO_TRY(SocketPair sp, make_socket_pair());

  std::vector<std::string> args;
  args.push_back(o.worker_path);
  args.insert(args.end(), o.worker_args.begin(), o.worker_args.end());
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

  // The child gets exactly: stdin from /dev/null, our stdout/stderr (the
  // journal), the channel as fd 3, nothing else. closefrom runs in the child
  // after the dup2, so no descriptor of the daemon (listening socket,
  // database, other workers' channels) leaks, CLOEXEC or not.
  FileActions fa;
  int rc = ::posix_spawn_file_actions_adddup2(&fa.fa, sp.second.get(), kWorkerChannelFd);
  if (rc == 0) rc = ::posix_spawn_file_actions_addopen(&fa.fa, 0, "/dev/null", O_RDONLY, 0);
  for (int fd : {1, 2}) {
    bool usable = ::fcntl(fd, F_GETFD) != -1 && fd != sp.first.get() && fd != sp.second.get();
    if (rc == 0 && !usable)
      rc = ::posix_spawn_file_actions_addopen(&fa.fa, fd, "/dev/null", O_WRONLY, 0);
  }
  if (rc == 0) rc = ::posix_spawn_file_actions_addclosefrom_np(&fa.fa, kWorkerChannelFd + 1);
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
  rc = ::posix_spawn(&pid, o.worker_path.c_str(), &fa.fa, &at.attr, argv.data(), envp.data());
  if (rc != 0) return Error::from_errno("start " + who, rc);
  sp.second.reset();

  int raw_pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  auto child =
      std::make_unique<Child>(pid, Fd(raw_pidfd >= 0 ? raw_pidfd : -1), std::move(sp.first));
  const std::string named = who + " (pid " + std::to_string(pid) + ")";

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

struct FatalReport {
  int signal = 0;
  std::uint64_t job_vm_bytes = 0;
};

enum class Failure {
  wall_timeout,     // deadline passed: kill now
  output_too_large, // response over the limit: the stream cannot be resynchronised, kill now
  protocol,         // malformed response: kill now
  broken,           // channel ended or failed: let the worker finish dying, then classify
};

} // namespace

class WorkerPool::Impl {
public:
  explicit Impl(PoolOptions o) : opts(std::move(o)) {}
  ~Impl() { shutdown(); }

  Status start();
  Expected<Message> run(const Message& request, const JobLimits& limits);
  PoolStats stats() const;

  const PoolOptions opts;

private:
  struct Slot {
    WorkerState state = WorkerState::dead;
    std::unique_ptr<Child> child;
    std::uint64_t jobs = 0;
    int consecutive_spawn_failures = 0;
    Clock::time_point next_spawn{};
    std::string last_spawn_error;
    bool ever_started = false;
  };

  void supervise();
  Expected<int> acquire();
  void release(int idx, bool succeeded);
  void retire_idle_worker(int idx, const std::string& why);
  Expected<Message> finish_job(int idx, std::uint64_t id, Deadline deadline,
                               const JobLimits& limits);
  Error fail_worker(int idx, Failure kind, const Error& cause, const JobLimits& limits,
                    const std::optional<FatalReport>& report);
  Error classify(Failure kind, const Error& cause, const JobLimits& limits,
                 const std::optional<FatalReport>& report, const ExitInfo& ended, pid_t pid,
                 bool killed_by_us, std::uint64_t FailureCounts::*& counter) const;
  void shutdown();
  int count_locked(WorkerState s) const;
  bool no_worker_can_come_locked() const;
  std::string last_spawn_error_locked() const;

  mutable std::mutex mu_;
  std::condition_variable cv_free_;  // a slot changed state; waiters re-check
  std::condition_variable cv_super_; // the supervisor has work or must stop
  std::vector<Slot> slots_;
  std::deque<std::uint64_t> waiters_; // FIFO of tickets
  std::uint64_t next_ticket_ = 0;
  bool stopping_ = false;        // no new jobs, no new processes
  bool supervisor_exit_ = false; // set only after every worker is reaped
  bool shut_down_ = false;
  std::uint64_t jobs_ = 0, succeeded_ = 0, restarts_ = 0, spawn_failures_ = 0, idle_deaths_ = 0;
  FailureCounts failures_;
  std::atomic<std::uint64_t> next_job_id_{1};
  std::thread supervisor_;
};

Status WorkerPool::Impl::start() {
  {
    std::lock_guard lk(mu_);
    slots_.resize(static_cast<std::size_t>(opts.size));
    for (auto& s : slots_)
      s.next_spawn = Clock::now();
  }
  // Every process is spawned from this one thread, which lives as long as the
  // pool: PR_SET_PDEATHSIG fires when the *thread* that spawned a worker
  // exits, so spawning from callers' (possibly short-lived) threads would kill
  // workers at random.
  supervisor_ = std::thread([this] { supervise(); });
  std::unique_lock lk(mu_);
  cv_free_.wait(lk, [&] {
    return std::all_of(slots_.begin(), slots_.end(), [](const Slot& s) {
      return s.state == WorkerState::idle || s.consecutive_spawn_failures > 0;
    });
  });
  for (const auto& s : slots_)
    if (s.consecutive_spawn_failures > 0)
      return make_error(Errc::unavailable, "start " + opts.name + " pool: " + s.last_spawn_error);
  return ok();
}

void WorkerPool::Impl::supervise() {
  std::unique_lock lk(mu_);
  // This thread must outlive every worker it spawned (PR_SET_PDEATHSIG), so
  // during shutdown it idles here until the workers are reaped.
  while (!supervisor_exit_) {
    if (stopping_) {
      cv_super_.wait(lk);
      continue;
    }
    auto now = Clock::now();
    Slot* due = nullptr;
    std::optional<Clock::time_point> earliest;
    for (auto& s : slots_) {
      if (s.state != WorkerState::dead) continue;
      if (s.next_spawn <= now) {
        due = &s;
        break;
      }
      if (!earliest || s.next_spawn < *earliest) earliest = s.next_spawn;
    }
    if (due == nullptr) {
      if (earliest)
        cv_super_.wait_until(lk, *earliest);
      else
        cv_super_.wait(lk);
      continue;
    }
    int idx = static_cast<int>(due - slots_.data());
    due->state = WorkerState::starting;
    lk.unlock();
    auto child = spawn_worker(opts);
    lk.lock();
    Slot& s = slots_[static_cast<std::size_t>(idx)];
    if (child) {
      pid_t pid = (*child)->pid();
      if (s.ever_started) {
        ++restarts_;
        log::info(opts.name + " worker pid " + std::to_string(pid) + " started (slot " +
                  std::to_string(idx) + ")");
      }
      s.child = std::move(*child);
      s.state = WorkerState::idle;
      s.jobs = 0;
      s.ever_started = true;
      s.consecutive_spawn_failures = 0;
      s.last_spawn_error.clear();
    } else {
      ++spawn_failures_;
      ++s.consecutive_spawn_failures;
      s.last_spawn_error = child.error().describe();
      s.state = WorkerState::dead;
      auto backoff = opts.respawn_backoff_initial;
      for (int i = 1; i < s.consecutive_spawn_failures && backoff < opts.respawn_backoff_max; ++i)
        backoff *= 2;
      backoff = std::min(backoff, opts.respawn_backoff_max);
      s.next_spawn = Clock::now() + backoff;
      int live = count_locked(WorkerState::idle) + count_locked(WorkerState::busy);
      std::string msg = "starting " + opts.name + " worker (slot " + std::to_string(idx) +
                        ") failed " + std::to_string(s.consecutive_spawn_failures) +
                        " time(s): " + s.last_spawn_error + "; retrying in " +
                        std::to_string(backoff.count()) + " ms";
      if (live == 0 && s.ever_started)
        log::error(msg + "; the " + opts.name + " pool has no live workers");
      else if (s.ever_started)
        log::warning(msg);
    }
    cv_free_.notify_all();
  }
}

int WorkerPool::Impl::count_locked(WorkerState st) const {
  return static_cast<int>(
      std::count_if(slots_.begin(), slots_.end(), [st](const Slot& s) { return s.state == st; }));
}

bool WorkerPool::Impl::no_worker_can_come_locked() const {
  // Nothing running or starting, and the last attempt for every slot failed:
  // waiting would only hide the outage from the caller.
  return std::all_of(slots_.begin(), slots_.end(), [](const Slot& s) {
    return s.state == WorkerState::dead && s.consecutive_spawn_failures > 0;
  });
}

std::string WorkerPool::Impl::last_spawn_error_locked() const {
  for (const auto& s : slots_)
    if (!s.last_spawn_error.empty()) return s.last_spawn_error;
  return "unknown error";
}

Expected<int> WorkerPool::Impl::acquire() {
  std::unique_lock lk(mu_);
  if (stopping_) {
    ++failures_.unavailable;
    return make_error(Errc::unavailable, "the " + opts.name + " pool is shutting down");
  }
  if (waiters_.size() >= opts.max_waiting) {
    ++failures_.queue_full;
    return make_error(Errc::resource_exhausted,
                      "the " + opts.name +
                          " pool's queue is full: " + std::to_string(waiters_.size()) +
                          " callers already waiting for " + std::to_string(opts.size) + " workers");
  }
  std::uint64_t ticket = next_ticket_++;
  waiters_.push_back(ticket);
  auto leave = [&] {
    waiters_.erase(std::find(waiters_.begin(), waiters_.end(), ticket));
    cv_free_.notify_all(); // the head of the queue may have changed
  };
  auto deadline = Clock::now() + opts.queue_timeout;
  for (;;) {
    if (stopping_) {
      leave();
      ++failures_.unavailable;
      return make_error(Errc::unavailable, "the " + opts.name + " pool is shutting down");
    }
    if (waiters_.front() == ticket) {
      for (std::size_t i = 0; i < slots_.size(); ++i) {
        if (slots_[i].state != WorkerState::idle) continue;
        slots_[i].state = WorkerState::busy;
        waiters_.pop_front();
        if (!waiters_.empty()) cv_free_.notify_all(); // another slot may be idle for the next
        return static_cast<int>(i);
      }
    }
    if (no_worker_can_come_locked()) {
      leave();
      ++failures_.unavailable;
      return make_error(Errc::unavailable,
                        "the " + opts.name +
                            " pool has no live workers: starting replacements keeps failing (" +
                            last_spawn_error_locked() + "); retrying in the background");
    }
    if (cv_free_.wait_until(lk, deadline) == std::cv_status::timeout && Clock::now() >= deadline) {
      // One last look: a slot may have become free exactly now.
      if (waiters_.front() == ticket && count_locked(WorkerState::idle) > 0) continue;
      std::size_t waiting = waiters_.size();
      leave();
      ++failures_.queue_timeout;
      return make_error(Errc::timeout, "no " + opts.name + " worker became free within " +
                                           std::to_string(opts.queue_timeout.count()) + " ms (" +
                                           std::to_string(waiting) + " callers waiting for " +
                                           std::to_string(opts.size) + " workers)");
    }
  }
}

void WorkerPool::Impl::release(int idx, bool succeeded) {
  std::lock_guard lk(mu_);
  Slot& s = slots_[static_cast<std::size_t>(idx)];
  s.state = WorkerState::idle;
  ++s.jobs;
  if (succeeded)
    ++succeeded_;
  else
    ++failures_.handler_error;
  cv_free_.notify_all();
}

void WorkerPool::Impl::retire_idle_worker(int idx, const std::string& why) {
  Child& child = *slots_[static_cast<std::size_t>(idx)].child;
  const pid_t pid = child.pid();
  ExitInfo ended = child.reap();
  log::warning(opts.name + " worker pid " + std::to_string(pid) + " " + describe_exit(ended) +
               " while idle (" + why + "); starting a replacement");
  std::lock_guard lk(mu_);
  Slot& s = slots_[static_cast<std::size_t>(idx)];
  s.child.reset();
  s.state = WorkerState::dead;
  s.jobs = 0;
  s.next_spawn = Clock::now();
  ++idle_deaths_;
  cv_super_.notify_all();
  cv_free_.notify_all();
}

Expected<Message> WorkerPool::Impl::run(const Message& request, const JobLimits& limits) {
  FDO_TRY_STATUS(validate(limits));
  nlohmann::json header = {{"id", 0}, {"limits", to_json(limits)}, {"job", request.header}};
  // A worker may have died between jobs (OOM killer, an operator's kill):
  // that is no reason to fail this job, which it never saw. Both retries are
  // bounded, so a pool whose workers keep dying still answers.
  int dead_found = 0, send_retries = 0;
  for (;;) {
    FDO_TRY(int idx, acquire());
    // The slot is ours alone while it is busy.
    Child& child = *slots_[static_cast<std::size_t>(idx)].child;
    if (dead_found <= 2 * opts.size && child.wait_exited(milliseconds(0))) {
      ++dead_found;
      retire_idle_worker(idx, "found dead before a job");
      continue;
    }
    const std::uint64_t id = next_job_id_++;
    header["id"] = id;
    const Deadline deadline = Deadline::after(limits.wall);
    auto st = send_frame(child.sock(), header, request.payload, deadline);
    if (!st && st.error().code() == Errc::unavailable && send_retries < 1) {
      // The request never arrived whole, so the job did not run: safe to retry once.
      ++send_retries;
      retire_idle_worker(idx, st.error().message());
      continue;
    }
    {
      std::lock_guard lk(mu_);
      ++jobs_;
    }
    if (!st) {
      Failure kind = st.error().code() == Errc::timeout ? Failure::wall_timeout : Failure::broken;
      return fail_worker(idx, kind, st.error(), limits, std::nullopt);
    }
    return finish_job(idx, id, deadline, limits);
  }
}

Expected<Message> WorkerPool::Impl::finish_job(int idx, std::uint64_t id, Deadline deadline,
                                               const JobLimits& limits) {
  Child& child = *slots_[static_cast<std::size_t>(idx)].child;

  auto saturating_add = [](std::uint64_t a, std::uint64_t b) {
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
  };
  FrameLimits fl;
  fl.max_header_bytes =
      std::min<std::uint64_t>(limits.max_output_bytes, 16 * kMiB) + kEnvelopeSlack;
  fl.max_payload_bytes = limits.max_output_bytes;
  fl.max_total_bytes = saturating_add(limits.max_output_bytes, kEnvelopeSlack);
  auto response = recv_message(child.sock(), fl, deadline, child.pidfd());
  if (!response) {
    Failure kind = Failure::broken;
    if (response.error().code() == Errc::timeout) kind = Failure::wall_timeout;
    if (response.error().code() == Errc::resource_exhausted) kind = Failure::output_too_large;
    // Garbage from a live worker is a protocol violation; a cut-off message
    // from a worker that is dying is not.
    if (response.error().code() == Errc::corrupt && !child.wait_exited(milliseconds(50)))
      kind = Failure::protocol;
    return fail_worker(idx, kind, response.error(), limits, std::nullopt);
  }

  const auto& h = response->header;
  auto protocol_error = [&](const std::string& what) {
    return fail_worker(idx, Failure::protocol, make_error(Errc::internal, what), limits,
                       std::nullopt);
  };
  if (!h.is_object()) return protocol_error("response header is not an object");
  auto rid = h.find("id");
  if (rid == h.end() || !rid->is_number_unsigned() || rid->get<std::uint64_t>() != id)
    return protocol_error("response does not answer job " + std::to_string(id));
  if (auto fatal = h.find("fatal"); fatal != h.end()) {
    FatalReport report;
    if (fatal->is_object()) {
      report.signal = fatal->value("signal", 0);
      report.job_vm_bytes = fatal->value("job_vm_bytes", std::uint64_t{0});
    }
    return fail_worker(idx, Failure::broken,
                       make_error(Errc::crashed, "worker reported a fatal signal"), limits, report);
  }
  auto okv = h.find("ok");
  if (okv == h.end() || !okv->is_boolean()) return protocol_error("response has no boolean 'ok'");
  if (okv->get<bool>()) {
    auto result = h.find("result");
    if (result == h.end()) return protocol_error("successful response has no 'result'");
    Message out{std::move(*result), std::move(response->payload)};
    release(idx, /*succeeded=*/true);
    return out;
  }
  auto err = h.find("error");
  if (err == h.end()) return protocol_error("failed response has no 'error'");
  Error e = error_from_json(*err);
  release(idx, /*succeeded=*/false);
  return e;
}

Error WorkerPool::Impl::fail_worker(int idx, Failure kind, const Error& cause,
                                    const JobLimits& limits,
                                    const std::optional<FatalReport>& report) {
  Child& child = *slots_[static_cast<std::size_t>(idx)].child;
  const pid_t pid = child.pid();
  bool killed_by_us = true;
  if (kind == Failure::broken) killed_by_us = !child.wait_exited(kExitGrace);
  ExitInfo ended = child.reap();

  std::uint64_t FailureCounts::*counter = &FailureCounts::crashed;
  Error err = classify(kind, cause, limits, report, ended, pid, killed_by_us, counter);
  log::warning(err.describe() + "; starting a replacement");
  {
    std::lock_guard lk(mu_);
    Slot& s = slots_[static_cast<std::size_t>(idx)];
    s.child.reset();
    s.state = WorkerState::dead;
    s.jobs = 0;
    s.next_spawn = Clock::now();
    ++(failures_.*counter);
    // Notified under the lock: once it is released the destructor may run.
    cv_super_.notify_all();
    cv_free_.notify_all();
  }
  return err;
}

Error WorkerPool::Impl::classify(Failure kind, const Error& cause, const JobLimits& limits,
                                 const std::optional<FatalReport>& report, const ExitInfo& ended,
                                 pid_t pid, bool killed_by_us,
                                 std::uint64_t FailureCounts::*& counter) const {
  const std::string who = opts.name + " worker";
  const std::string where = " in the " + who + " (pid " + std::to_string(pid) + ", replaced)";
  const bool signaled = ended.status != -1 && WIFSIGNALED(ended.status);
  const int sig = signaled ? WTERMSIG(ended.status) : 0;

  switch (kind) {
  case Failure::wall_timeout:
    // A worker that died of something else just as the deadline passed is
    // reported for what it died of.
    if (signaled && sig != SIGKILL) break;
    counter = &FailureCounts::timeout;
    return make_error(Errc::timeout, who + " exceeded the wall-time limit of " +
                                         std::to_string(limits.wall.count()) + " ms (killed)");
  case Failure::output_too_large:
    counter = &FailureCounts::output_too_large;
    return make_error(Errc::resource_exhausted, who + " response exceeds the output limit of " +
                                                    format_bytes(limits.max_output_bytes) + " (" +
                                                    cause.message() + "); worker pid " +
                                                    std::to_string(pid) + " killed and replaced");
  case Failure::protocol:
    counter = &FailureCounts::protocol;
    return make_error(Errc::internal, who + " pid " + std::to_string(pid) +
                                          " broke the protocol (" + cause.message() +
                                          "); killed and replaced");
  case Failure::broken:
    break;
  }

  if (kind == Failure::broken && killed_by_us) {
    counter = &FailureCounts::protocol;
    return make_error(Errc::internal, who + " pid " + std::to_string(pid) + " stopped answering (" +
                                          cause.message() + ") and was killed and replaced");
  }
  if (signaled) {
    if (sig == SIGXCPU) {
      counter = &FailureCounts::cpu_limit;
      return make_error(Errc::timeout, who + " exceeded the CPU-time limit of " +
                                           std::to_string(effective_cpu_seconds(limits)) +
                                           " s (SIGXCPU; pid " + std::to_string(pid) +
                                           ", replaced)");
    }
    const bool memory_signal = sig == SIGSEGV || sig == SIGBUS || sig == SIGABRT || sig == SIGILL ||
                               sig == SIGTRAP || sig == SIGKILL;
    // The worker reports, from its fatal-signal handler, how much address
    // space the job had added. Within a quarter of the limit, the likeliest
    // story is an allocation that failed and was not checked.
    if (memory_signal && limits.address_space_bytes != 0 && report &&
        report->job_vm_bytes / 3 >= limits.address_space_bytes / 4) {
      counter = &FailureCounts::memory;
      return make_error(Errc::resource_exhausted, "program exceeded the memory limit of " +
                                                      format_bytes(limits.address_space_bytes) +
                                                      where + ": it had mapped " +
                                                      format_bytes(report->job_vm_bytes) +
                                                      " when it died of " + describe_signal(sig));
    }
    counter = &FailureCounts::crashed;
    std::string msg = "program crashed: " + describe_signal(sig) + where;
    if (sig == SIGKILL)
      msg += "; it was killed from outside the pool, e.g. by the kernel's OOM killer";
    return make_error(Errc::crashed, msg);
  }
  if (ended.status != -1 && WIFEXITED(ended.status)) {
    counter = &FailureCounts::exited;
    return make_error(Errc::crashed, who + " exited unexpectedly with status " +
                                         std::to_string(WEXITSTATUS(ended.status)) +
                                         " during the job (pid " + std::to_string(pid) +
                                         ", replaced)");
  }
  counter = &FailureCounts::crashed;
  return make_error(Errc::crashed, who + " pid " + std::to_string(pid) + " " +
                                       describe_exit(ended) + " during the job (" +
                                       cause.message() + ")");
}

PoolStats WorkerPool::Impl::stats() const {
  std::lock_guard lk(mu_);
  PoolStats s;
  s.name = opts.name;
  s.size = opts.size;
  s.live = count_locked(WorkerState::idle) + count_locked(WorkerState::busy);
  s.waiting = waiters_.size();
  s.jobs = jobs_;
  s.succeeded = succeeded_;
  s.failures = failures_;
  s.restarts = restarts_;
  s.spawn_failures = spawn_failures_;
  s.idle_deaths = idle_deaths_;
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    const Slot& slot = slots_[i];
    WorkerInfo w;
    w.slot = static_cast<int>(i);
    w.pid = slot.child ? slot.child->pid() : 0;
    w.state = slot.state;
    w.jobs = slot.jobs;
    w.consecutive_spawn_failures = slot.consecutive_spawn_failures;
    w.last_spawn_error = slot.last_spawn_error;
    s.workers.push_back(std::move(w));
  }
  return s;
}

void WorkerPool::Impl::shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
  }
  cv_super_.notify_all();
  cv_free_.notify_all();

  std::vector<std::unique_ptr<Child>> children;
  {
    std::unique_lock lk(mu_);
    // In-flight jobs end by their wall limit at the latest, a spawn in
    // progress by startup_timeout; waiters leave on stopping_.
    cv_free_.wait(lk, [&] {
      return count_locked(WorkerState::busy) == 0 && count_locked(WorkerState::starting) == 0 &&
             waiters_.empty();
    });
    for (auto& s : slots_) {
      if (s.child) children.push_back(std::move(s.child));
      s.state = WorkerState::dead;
    }
  }
  // End of stream first: an idle worker exits 0 on its own.
  for (auto& c : children)
    c->close_channel();
  auto polite = Clock::now() + std::min(opts.shutdown_grace, milliseconds(200));
  for (auto& c : children)
    c->wait_exited(
        std::chrono::ceil<milliseconds>(std::max(polite - Clock::now(), Clock::duration::zero())));
  for (auto& c : children)
    if (!c->wait_exited(milliseconds(0))) c->signal_group(SIGTERM);
  auto grace = Clock::now() + opts.shutdown_grace;
  for (auto& c : children)
    c->wait_exited(
        std::chrono::ceil<milliseconds>(std::max(grace - Clock::now(), Clock::duration::zero())));
  for (auto& c : children)
    c->reap(); // SIGKILLs whatever is still there
  {
    std::lock_guard lk(mu_);
    supervisor_exit_ = true;
    cv_super_.notify_all();
  }
  if (supervisor_.joinable()) supervisor_.join();
}

// ---------------------------------------------------------------------------

WorkerPool::WorkerPool(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
WorkerPool::~WorkerPool() = default;

Expected<std::unique_ptr<WorkerPool>> WorkerPool::create(PoolOptions options) {
  if (options.name.empty()) options.name = "worker";
  const std::string what = "create " + options.name + " pool";
  if (options.worker_path.empty())
    return make_error(Errc::invalid_argument, what + ": worker_path is empty");
  if (options.size < 1 || options.size > 256)
    return make_error(Errc::invalid_argument, what + ": size must be between 1 and 256, not " +
                                                  std::to_string(options.size));
  // Absolute, so a later chdir of the daemon cannot change which program runs.
  std::error_code ec;
  if (auto abs = std::filesystem::absolute(options.worker_path, ec); !ec)
    options.worker_path = abs.string();
  if (::access(options.worker_path.c_str(), X_OK) != 0)
    return Error::from_errno(what + ": worker program " + options.worker_path, errno);
  if (auto st = validate(options.defaults); !st)
    return std::move(st).error().context(what + ": default limits");
  if (options.startup_timeout.count() <= 0 || options.queue_timeout.count() <= 0 ||
      options.respawn_backoff_initial.count() <= 0 ||
      options.respawn_backoff_max < options.respawn_backoff_initial ||
      options.shutdown_grace.count() < 0)
    return make_error(Errc::invalid_argument, what + ": timeouts and backoffs must be positive");
  auto impl = std::make_unique<Impl>(std::move(options));
  if (auto st = impl->start(); !st) return std::move(st).error();
  return std::unique_ptr<WorkerPool>(new WorkerPool(std::move(impl)));
}

Expected<Message> WorkerPool::run(const Message& request, const JobLimits& limits) {
  return impl_->run(request, limits);
}

Expected<Message> WorkerPool::run(const Message& request) {
  return impl_->run(request, impl_->opts.defaults);
}

PoolStats WorkerPool::stats() const {
  return impl_->stats();
}

const PoolOptions& WorkerPool::options() const {
  return impl_->opts;
}

} // namespace fdo::daemon
