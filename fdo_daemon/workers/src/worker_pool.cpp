#include "fdo/daemon/worker_pool.h"

#include "fair_queue.h"
#include "fdo/util/enum_names.h"
#include "fdo/util/log.h"
#include "worker_failure.h"
#include "worker_process.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <deque>
#include <fcntl.h>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <poll.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace fdo::daemon {

namespace {

using detail::Child;
using detail::Clock;
using detail::describe_exit;
using detail::EndedBy;
using detail::ExitInfo;
using detail::Failure;
using detail::FatalReport;
using detail::kExitGrace;
using std::chrono::milliseconds;

// Room for the response envelope and error messages around max_output_bytes.
constexpr std::uint64_t kEnvelopeSlack = 64 * kKiB;

} // namespace

class WorkerPool::Impl {
public:
  explicit Impl(PoolOptions o) : opts(std::move(o)) {}
  ~Impl() { shutdown(); }

  Status start();
  Expected<Message> run(const Message& request, const JobOptions& options, JobOutput* output);
  PoolStats stats() const;
  void set_max_waiting_per_tenant(std::size_t n) {
    std::lock_guard lk(mu_);
    max_waiting_per_tenant_ = n;
  }

  const PoolOptions opts;

private:
  struct Slot {
    WorkerState state = WorkerState::dead;
    std::unique_ptr<Child> child;
    // A process taken out of service (recycled for another tenant): the
    // supervisor reaps it before starting the slot's next process.
    std::unique_ptr<Child> retiring;
    std::uint64_t jobs = 0;
    // The tenant the process is bound to; none until its first job binds it
    // (the daemon's own jobs have the empty tenant, which is bound too).
    std::optional<std::string> tenant;
    // The waiter this slot's next process is started for (a recycle).
    std::optional<std::uint64_t> reserved_for;
    int consecutive_spawn_failures = 0;
    Clock::time_point next_spawn{};
    std::string last_spawn_error;
    bool ever_started = false;
  };

  void supervise();
  Expected<int> acquire(const std::string& tenant);
  void dispatch_locked();
  int usable_slot_locked(const std::string& tenant) const;
  int recyclable_slot_locked(const std::string& tenant) const;
  void release(int idx, bool succeeded, const std::string& retire);
  void give_back_unused(int idx);
  void retire_busy_worker(int idx, const std::string& why);
  void retire_idle_worker(int idx, const std::string& why);
  // The slot's worker is gone (reaped): mark it for the supervisor to
  // replace at once and wake everyone waiting on the pool. Called under mu_.
  void replace_worker_locked(Slot& s);
  Expected<Message> finish_job(int idx, std::uint64_t id, Deadline deadline,
                               const JobLimits& limits, const std::function<void()>& collect_output,
                               const std::string& retire_after);
  detail::SpawnOptions spawn_options() const {
    return {opts.name,
            opts.worker_path,
            opts.worker_args,
            opts.startup_timeout,
            opts.capture_output_bytes,
            opts.cgroups};
  }
  Expected<Message> fail_worker(int idx, Failure kind, const Error& cause, const JobLimits& limits,
                                const std::optional<FatalReport>& report);
  void shutdown();
  int count_locked(WorkerState s) const;
  bool no_worker_can_come_locked() const;
  std::string last_spawn_error_locked() const;

  mutable std::mutex mu_;
  std::condition_variable cv_free_;  // a slot changed state; waiters re-check
  std::condition_variable cv_super_; // the supervisor has work or must stop
  std::vector<Slot> slots_;
  detail::FairQueue queue_;               // callers waiting for a worker
  std::map<std::uint64_t, int> assigned_; // ticket -> slot handed to it
  std::size_t max_waiting_per_tenant_ = 0;
  bool stopping_ = false;        // no new jobs, no new processes
  bool supervisor_exit_ = false; // set only after every worker is reaped
  bool shut_down_ = false;
  std::uint64_t jobs_ = 0, succeeded_ = 0, restarts_ = 0, spawn_failures_ = 0, idle_deaths_ = 0;
  std::uint64_t retired_ = 0, recycled_ = 0, program_exits_ = 0;
  FailureCounts failures_;
  std::atomic<std::uint64_t> next_job_id_{1};
  std::thread supervisor_;
};

Status WorkerPool::Impl::start() {
  {
    std::lock_guard lk(mu_);
    max_waiting_per_tenant_ = opts.max_waiting_per_tenant;
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
    std::unique_ptr<Child> retiring = std::move(due->retiring);
    lk.unlock();
    if (retiring) retiring->reap();
    retiring.reset();
    auto child = detail::spawn_worker(spawn_options());
    lk.lock();
    Slot& s = slots_[static_cast<std::size_t>(idx)];
    s.tenant.reset();
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
      s.reserved_for.reset(); // its waiter is served by whichever slot frees first
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

// A slot `tenant` can use now: idle, not reserved for another waiter, and
// bound to this tenant (preferred) or to none. -1 if there is none.
int WorkerPool::Impl::usable_slot_locked(const std::string& tenant) const {
  int unbound = -1;
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    const Slot& s = slots_[i];
    if (s.state != WorkerState::idle || s.reserved_for) continue;
    if (!opts.bind_spec || s.tenant == tenant) return static_cast<int>(i);
    if (!s.tenant && unbound < 0) unbound = static_cast<int>(i);
  }
  return unbound;
}

// An idle worker bound to another tenant, to be replaced by a fresh one for
// `tenant`: the one of the tenant holding the most idle workers.
int WorkerPool::Impl::recyclable_slot_locked(const std::string& tenant) const {
  if (!opts.bind_spec) return -1;
  std::map<std::string, int> idle_per_tenant;
  for (const Slot& s : slots_)
    if (s.state == WorkerState::idle && !s.reserved_for && s.tenant) ++idle_per_tenant[*s.tenant];
  int best = -1, best_idle = 0;
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    const Slot& s = slots_[i];
    if (s.state != WorkerState::idle || s.reserved_for || !s.tenant || *s.tenant == tenant)
      continue;
    if (idle_per_tenant[*s.tenant] > best_idle) {
      best = static_cast<int>(i);
      best_idle = idle_per_tenant[*s.tenant];
    }
  }
  return best;
}

// Hands free workers to waiters, tenants taking turns (fair_queue.h). A
// waiter whose tenant has no usable worker gets an idle worker of another
// tenant replaced for it, and waits for that one alone.
void WorkerPool::Impl::dispatch_locked() {
  bool changed = false;
  // Workers started for a particular waiter go to it first.
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    Slot& s = slots_[i];
    if (s.state != WorkerState::idle || !s.reserved_for) continue;
    std::uint64_t ticket = *s.reserved_for;
    s.reserved_for.reset();
    s.state = WorkerState::busy;
    assigned_[ticket] = static_cast<int>(i);
    changed = true;
  }
  for (std::size_t guard = 0; guard <= slots_.size() + queue_.size(); ++guard) {
    auto next = queue_.next();
    if (!next) break;
    if (assigned_.count(next->id)) {
      queue_.remove(next->id, next->tenant);
      continue;
    }
    bool reserved = std::any_of(slots_.begin(), slots_.end(), [&](const Slot& s) {
      return s.reserved_for && *s.reserved_for == next->id;
    });
    if (reserved) break; // its worker is starting; the next turns wait for it
    int idx = usable_slot_locked(next->tenant);
    if (idx >= 0) {
      slots_[static_cast<std::size_t>(idx)].state = WorkerState::busy;
      assigned_[next->id] = idx;
      queue_.remove(next->id, next->tenant);
      changed = true;
      continue;
    }
    int victim = recyclable_slot_locked(next->tenant);
    if (victim >= 0) {
      Slot& v = slots_[static_cast<std::size_t>(victim)];
      v.retiring = std::move(v.child);
      v.state = WorkerState::dead;
      v.next_spawn = Clock::now();
      v.reserved_for = next->id;
      v.jobs = 0;
      ++recycled_;
      cv_super_.notify_all();
    }
    break;
  }
  if (changed) cv_free_.notify_all();
}

Expected<int> WorkerPool::Impl::acquire(const std::string& tenant) {
  std::unique_lock lk(mu_);
  if (stopping_) {
    ++failures_.unavailable;
    return make_error(Errc::unavailable, "the " + opts.name + " pool is shutting down");
  }
  if (queue_.size() >= opts.max_waiting) {
    ++failures_.queue_full;
    return make_error(Errc::resource_exhausted,
                      "the " + opts.name +
                          " pool's queue is full: " + std::to_string(queue_.size()) +
                          " callers already waiting for " + std::to_string(opts.size) + " workers");
  }
  if (queue_.waiting(tenant) >= max_waiting_per_tenant_) {
    ++failures_.queue_full;
    return make_error(Errc::resource_exhausted,
                      "too many jobs waiting for a " + opts.name + " worker for this tenant (" +
                          std::to_string(queue_.waiting(tenant)) + ", limit " +
                          std::to_string(max_waiting_per_tenant_) +
                          ": max_queued_jobs_per_uid); retry when earlier ones finish");
  }
  const std::uint64_t ticket = queue_.push(tenant);
  auto leave = [&] {
    queue_.remove(ticket, tenant);
    for (Slot& s : slots_)
      if (s.reserved_for && *s.reserved_for == ticket) s.reserved_for.reset();
    if (auto it = assigned_.find(ticket); it != assigned_.end()) {
      // Handed a worker just as it gave up: give the worker back.
      slots_[static_cast<std::size_t>(it->second)].state = WorkerState::idle;
      assigned_.erase(it);
    }
    cv_free_.notify_all(); // the turn may have passed to someone else
  };
  auto deadline = Clock::now() + opts.queue_timeout;
  for (;;) {
    if (stopping_) {
      leave();
      ++failures_.unavailable;
      return make_error(Errc::unavailable, "the " + opts.name + " pool is shutting down");
    }
    dispatch_locked();
    if (auto it = assigned_.find(ticket); it != assigned_.end()) {
      int idx = it->second;
      assigned_.erase(it);
      Slot& s = slots_[static_cast<std::size_t>(idx)];
      // Bound now, so no other tenant is ever handed this process.
      if (opts.bind_spec && !s.tenant) s.tenant = tenant;
      return idx;
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
      dispatch_locked(); // one last look: a worker may have become free exactly now
      if (assigned_.count(ticket)) continue;
      std::size_t waiting = queue_.size();
      leave();
      ++failures_.queue_timeout;
      return make_error(Errc::timeout, "no " + opts.name + " worker became free within " +
                                           std::to_string(opts.queue_timeout.count()) + " ms (" +
                                           std::to_string(waiting) + " callers waiting for " +
                                           std::to_string(opts.size) + " workers)");
    }
  }
}

// A worker handed out for a job that was never sent: idle again, no job
// counted, and unbound again if this job was to bind it.
void WorkerPool::Impl::give_back_unused(int idx) {
  std::lock_guard lk(mu_);
  Slot& s = slots_[static_cast<std::size_t>(idx)];
  ++failures_.handler_error;
  if (s.jobs == 0) s.tenant.reset();
  s.state = WorkerState::idle;
  cv_free_.notify_all();
}

void WorkerPool::Impl::release(int idx, bool succeeded, const std::string& retire) {
  {
    std::lock_guard lk(mu_);
    Slot& s = slots_[static_cast<std::size_t>(idx)];
    ++s.jobs;
    if (succeeded)
      ++succeeded_;
    else
      ++failures_.handler_error;
    if (retire.empty()) {
      s.state = WorkerState::idle;
      cv_free_.notify_all();
      return;
    }
  }
  retire_busy_worker(idx, retire);
}

// A worker that answered its job but must not take another (it left a thread
// or memory behind, or could not bind): killed with all it started, replaced.
void WorkerPool::Impl::retire_busy_worker(int idx, const std::string& why) {
  std::unique_ptr<Child> child;
  {
    std::lock_guard lk(mu_);
    child = std::move(slots_[static_cast<std::size_t>(idx)].child);
  }
  const pid_t pid = child->pid();
  child->reap();
  log::info(opts.name + " worker pid " + std::to_string(pid) + " retired after its job (" + why +
            "); starting a replacement");
  std::lock_guard lk(mu_);
  ++retired_;
  replace_worker_locked(slots_[static_cast<std::size_t>(idx)]);
}

void WorkerPool::Impl::replace_worker_locked(Slot& s) {
  s.child.reset();
  s.state = WorkerState::dead;
  s.jobs = 0;
  s.tenant.reset();
  s.next_spawn = Clock::now();
  // Notified under the lock: once it is released the destructor may run.
  cv_super_.notify_all();
  cv_free_.notify_all();
}

void WorkerPool::Impl::retire_idle_worker(int idx, const std::string& why) {
  Child& child = *slots_[static_cast<std::size_t>(idx)].child;
  const pid_t pid = child.pid();
  ExitInfo ended = child.reap();
  log::warning(opts.name + " worker pid " + std::to_string(pid) + " " + describe_exit(ended) +
               " while idle (" + why + "); starting a replacement");
  std::lock_guard lk(mu_);
  ++idle_deaths_;
  replace_worker_locked(slots_[static_cast<std::size_t>(idx)]);
}

Expected<Message> WorkerPool::Impl::run(const Message& request, const JobOptions& options,
                                        JobOutput* output) {
  const JobLimits& limits = options.limits;
  FDO_TRY_STATUS(validate(limits));
  nlohmann::json header = {{"id", 0}, {"limits", to_json(limits)}, {"job", request.header}};
  // A worker may have died between jobs (OOM killer, an operator's kill):
  // that is no reason to fail this job, which it never saw. Both retries are
  // bounded, so a pool whose workers keep dying still answers.
  int dead_found = 0, send_retries = 0;
  for (;;) {
    FDO_TRY(int idx, acquire(options.tenant));
    // The slot is ours alone while it is busy.
    Slot& slot = slots_[static_cast<std::size_t>(idx)];
    Child& child = *slot.child;
    if (dead_found <= 2 * opts.size && child.wait_exited(milliseconds(0))) {
      ++dead_found;
      retire_idle_worker(idx, "found dead before a job");
      continue;
    }
    header.erase("bind");
    if (opts.bind_spec && slot.jobs == 0) {
      auto bind = opts.bind_spec(options.tenant);
      if (!bind) {
        // The process never saw a job and is still clean: back idle and
        // unbound, so whichever job takes it next sends the bind (counting a
        // job here would let this tenant's next job run without a sandbox).
        give_back_unused(idx);
        return std::move(bind).error().context("sandbox for " + opts.name + " jobs");
      }
      header["bind"] = std::move(*bind);
    }
    if (slot.jobs == 0 && child.cgroup() != nullptr) {
      // The job's limits, on the group: the job cannot raise these.
      CgroupLimits cl;
      if (limits.address_space_bytes != 0)
        cl.memory_max_bytes = child.cgroup()->memory_current() + limits.address_space_bytes;
      cl.pids_max = opts.cgroup_pids_max;
      if (auto st = child.cgroup()->limit(cl); !st) {
        retire_idle_worker(idx, "its cgroup limits could not be set: " + st.error().message());
        return std::move(st).error().context("cgroup of a fresh " + opts.name + " worker");
      }
    }
    child.reset_output();
    const std::uint64_t id = next_job_id_++;
    header["id"] = id;
    const Deadline deadline = Deadline::after(limits.wall);
    auto st = send_frame(child.sock(), header, request.payload, deadline, request.fds);
    if (!st && st.error().code() == Errc::invalid_argument) {
      // Refused before a byte was written (a header too deep to encode, too
      // many descriptors): the request is at fault, the worker is fine. It goes
      // back idle without counting a job, so its next job still binds it
      // (counted as a failure, as the bind-spec failure above is).
      give_back_unused(idx);
      return std::move(st).error().context("send a job to an " + opts.name + " worker");
    }
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
    // What the job printed is read before the slot can change hands.
    auto collect = [&] {
      if (output != nullptr && child.captures_output())
        *output = child.read_output(opts.capture_output_bytes);
    };
    if (!st) {
      collect();
      Failure kind = st.error().code() == Errc::timeout ? Failure::wall_timeout : Failure::broken;
      return fail_worker(idx, kind, st.error(), limits, std::nullopt);
    }
    return finish_job(idx, id, deadline, limits, collect,
                      options.after == AfterJob::retire ? "a one-off job of the daemon's" : "");
  }
}

Expected<Message> WorkerPool::Impl::finish_job(int idx, std::uint64_t id, Deadline deadline,
                                               const JobLimits& limits,
                                               const std::function<void()>& collect_output,
                                               const std::string& retire_after) {
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
  collect_output();
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
  std::string retire = retire_after;
  if (auto r = h.find("retire"); r != h.end() && r->is_string()) retire = r->get<std::string>();
  if (auto b = h.find("bound"); b != h.end())
    log::debug(opts.name + " worker pid " + std::to_string(child.pid()) + " bound: " + b->dump());
  if (okv->get<bool>()) {
    auto result = h.find("result");
    if (result == h.end()) return protocol_error("successful response has no 'result'");
    Message out{std::move(*result), std::move(response->payload)};
    release(idx, /*succeeded=*/true, retire);
    return out;
  }
  auto err = h.find("error");
  if (err == h.end()) return protocol_error("failed response has no 'error'");
  Error e = error_from_json(*err);
  release(idx, /*succeeded=*/false, retire);
  return e;
}

Expected<Message> WorkerPool::Impl::fail_worker(int idx, Failure kind, const Error& cause,
                                                const JobLimits& limits,
                                                const std::optional<FatalReport>& report) {
  Child& child = *slots_[static_cast<std::size_t>(idx)].child;
  const pid_t pid = child.pid();
  EndedBy ended_by = EndedBy::pool;
  if (kind == Failure::broken && child.wait_exited(kExitGrace)) ended_by = EndedBy::itself;
  ExitInfo ended = child.reap();

  // A program that calls exit(n) ends the worker: for an exec pool that is
  // how the job ended, not a failure.
  if (opts.exit_outcome == ExitOutcome::result && kind == Failure::broken &&
      ended_by == EndedBy::itself && !report && ended.status != -1 && WIFEXITED(ended.status)) {
    const int code = WEXITSTATUS(ended.status);
    log::info(opts.name + " worker pid " + std::to_string(pid) +
              ": the program exited with status " + std::to_string(code) +
              "; starting a replacement");
    std::lock_guard lk(mu_);
    ++program_exits_;
    ++failures_.exited;
    replace_worker_locked(slots_[static_cast<std::size_t>(idx)]);
    return Message{{{"exited", {{"status", code}}}}, {}};
  }

  detail::ClassifiedFailure failed =
      detail::classify_failure({opts.name, kind, cause, limits, report, ended, pid, ended_by});
  const Error& err = failed.error;
  log::warning(err.describe() + "; starting a replacement");
  {
    std::lock_guard lk(mu_);
    ++(failures_.*failed.counter);
    replace_worker_locked(slots_[static_cast<std::size_t>(idx)]);
  }
  return err;
}

PoolStats WorkerPool::Impl::stats() const {
  std::lock_guard lk(mu_);
  PoolStats s;
  s.name = opts.name;
  s.size = opts.size;
  s.live = count_locked(WorkerState::idle) + count_locked(WorkerState::busy);
  s.waiting = queue_.size();
  s.jobs = jobs_;
  s.succeeded = succeeded_;
  s.failures = failures_;
  s.restarts = restarts_;
  s.spawn_failures = spawn_failures_;
  s.idle_deaths = idle_deaths_;
  s.retired = retired_;
  s.recycled = recycled_;
  s.program_exits = program_exits_;
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    const Slot& slot = slots_[i];
    WorkerInfo w;
    w.slot = static_cast<int>(i);
    w.pid = slot.child ? slot.child->pid() : 0;
    w.state = slot.state;
    w.jobs = slot.jobs;
    w.bound = slot.tenant.has_value();
    w.tenant = slot.tenant.value_or("");
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
             queue_.size() == 0;
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

Expected<Message> WorkerPool::run(const Message& request, const JobOptions& options,
                                  JobOutput* output) {
  return impl_->run(request, options, output);
}

Expected<Message> WorkerPool::run(const Message& request, const JobLimits& limits) {
  return impl_->run(request, JobOptions{limits, {}}, nullptr);
}

Expected<Message> WorkerPool::run(const Message& request) {
  return impl_->run(request, JobOptions{impl_->opts.defaults, {}}, nullptr);
}

void WorkerPool::set_max_waiting_per_tenant(std::size_t n) {
  impl_->set_max_waiting_per_tenant(n);
}

PoolStats WorkerPool::stats() const {
  return impl_->stats();
}

const PoolOptions& WorkerPool::options() const {
  return impl_->opts;
}

} // namespace fdo::daemon
