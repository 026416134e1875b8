// The pool's life (WorkerPool::Impl, worker_pool_impl.h): starting and
// supervising its processes, choosing a slot for a tenant's job (fair
// queue, recycling), release and retirement, stats and shutdown; the
// public WorkerPool over it. One job on a worker is pool_job.cpp, background
// jobs (stops, promotions, preemption) pool_background.cpp.
#include "fdo/daemon/worker_pool.h"

#include "fdo/util/enum_names.h"
#include "fdo/util/log.h"
#include "worker_pool_impl.h"

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
using detail::ExitInfo;
using std::chrono::milliseconds;

} // namespace

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
    if (auto promote_at = promote_overdue_locked(now))
      if (!earliest || *promote_at < *earliest) earliest = promote_at;
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

std::size_t WorkerPool::Impl::running_locked(const std::string& tenant, Jobs which) const {
  return static_cast<std::size_t>(std::count_if(slots_.begin(), slots_.end(), [&](const Slot& s) {
    if (which == Jobs::foreground && s.job_active && s.job_priority == JobPriority::background)
      return false;
    return (s.state == WorkerState::busy || s.reserved_for) && s.job_tenant == tenant;
  }));
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
    queue_.serve(ticket, s.job_tenant);
    changed = true;
  }
  // A tenant with max_running_per_tenant jobs running is passed over (it
  // keeps its place in the rotation): the rest of the pool stays for others.
  const std::size_t cap = opts.max_running_per_tenant;
  auto below_cap = [&](const std::string& t) { return cap == 0 || running_locked(t) < cap; };
  // A foreground waiter whose tenant is at its cap only through background
  // jobs (stopped while it runs: JobPriority) is not held back by them, nor
  // by its tenant's background waiters; it comes after every waiter below
  // its cap.
  auto foreground_waiter = [&](const std::string& t) {
    return queue_.oldest_where(t, [&](std::uint64_t id) { return !background_waiters_.count(id); });
  };
  auto held_by_background = [&](const std::string& t) {
    return cap != 0 && running_locked(t, Jobs::foreground) < cap && foreground_waiter(t);
  };
  for (std::size_t guard = 0; guard <= slots_.size() + queue_.size(); ++guard) {
    auto next = queue_.next_where(below_cap);
    if (!next) {
      next = queue_.next_where(held_by_background);
      if (next) next->id = *foreground_waiter(next->tenant);
    }
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
      slots_[static_cast<std::size_t>(idx)].job_tenant = next->tenant;
      assigned_[next->id] = idx;
      queue_.serve(next->id, next->tenant);
      changed = true;
      continue;
    }
    int victim = recyclable_slot_locked(next->tenant);
    if (victim < 0 && !background_waiters_.count(next->id) &&
        count_locked(WorkerState::busy) == opts.size) {
      // Every worker busy: a foreground waiter takes a background job's.
      preempt_background_locked(next->id, next->tenant);
      break;
    }
    if (victim >= 0) {
      Slot& v = slots_[static_cast<std::size_t>(victim)];
      v.retiring = std::move(v.child);
      v.state = WorkerState::dead;
      v.next_spawn = Clock::now();
      v.reserved_for = next->id;
      v.job_tenant = next->tenant;
      v.jobs = 0;
      ++recycled_;
      cv_super_.notify_all();
    }
    break;
  }
  if (changed) cv_free_.notify_all();
}

Expected<int> WorkerPool::Impl::acquire(const std::string& tenant, JobPriority priority,
                                        const Urgency* urgency) {
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
  // Raised before it got here: its hook found nothing to raise yet.
  if (urgency != nullptr && urgency->raised()) priority = JobPriority::foreground;
  if (priority == JobPriority::background) background_waiters_.emplace(ticket, urgency);
  auto leave = [&] {
    background_waiters_.erase(ticket);
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
      // Still a background job unless raised while it waited.
      const JobPriority runs_as = background_waiters_.erase(ticket) != 0 ? JobPriority::background
                                                                         : JobPriority::foreground;
      queue_.remove(ticket, tenant); // gone already unless served out of turn
      Slot& s = slots_[static_cast<std::size_t>(idx)];
      // Bound now, so no other tenant is ever handed this process.
      if (opts.bind_spec && !s.tenant) s.tenant = tenant;
      begin_job_locked(s, runs_as, urgency);
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
  end_job_locked(s);
  ++failures_.handler_error;
  if (s.jobs == 0) s.tenant.reset();
  s.state = WorkerState::idle;
  cv_free_.notify_all();
}

void WorkerPool::Impl::release(int idx, bool succeeded, const std::string& retire) {
  {
    std::lock_guard lk(mu_);
    Slot& s = slots_[static_cast<std::size_t>(idx)];
    end_job_locked(s);
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
  // A worker killed for a foreground waiter: its replacement is that
  // waiter's, while it still waits.
  if (auto waiter = std::exchange(s.preempted_for, std::nullopt)) {
    const auto& [ticket, tenant] = *waiter;
    if (queue_.oldest_where(tenant, [&](std::uint64_t id) { return id == ticket; })) {
      s.reserved_for = ticket;
      s.job_tenant = tenant;
    }
  }
  // Notified under the lock: once it is released the destructor may run.
  cv_super_.notify_all();
  cv_free_.notify_all();
}

void WorkerPool::Impl::retire_idle_worker(int idx, const std::string& why) {
  end_job(idx);
  Child& child = *slots_[static_cast<std::size_t>(idx)].child;
  const pid_t pid = child.pid();
  ExitInfo ended = child.reap();
  log::warning(opts.name + " worker pid " + std::to_string(pid) + " " + describe_exit(ended) +
               " while idle (" + why + "); starting a replacement");
  std::lock_guard lk(mu_);
  ++idle_deaths_;
  replace_worker_locked(slots_[static_cast<std::size_t>(idx)]);
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
  s.background_stops = background_stops_;
  s.preemptions = preemptions_;
  s.promotions = promotions_;
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
