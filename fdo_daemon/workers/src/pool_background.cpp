// Background jobs on a pool (WorkerPool::Impl, worker_pool_impl.h;
// job_runner.h, JobPriority): a job's start and end on its slot, stopping and
// continuing background jobs while foreground ones run, promoting one (its
// caller raised its urgency, or it was stopped too long) and preempting one
// for a foreground waiter. docs/workers.md, "Background jobs".
#include "fdo/util/log.h"
#include "worker_pool_impl.h"

#include <algorithm>
#include <csignal>
#include <iterator>

namespace fdo::daemon {

using detail::Clock;

void WorkerPool::Impl::begin_job_locked(Slot& s, JobPriority priority, const Urgency* urgency) {
  s.job_id = next_job_id_++;
  s.job_active = true;
  s.job_priority = priority;
  s.urgency = priority == JobPriority::background ? urgency : nullptr;
  s.stopped = false;
  if (priority == JobPriority::foreground) {
    s.pauses.reset();
    for (Slot& other : slots_)
      stop_background_locked(other);
    return;
  }
  s.pauses = std::make_shared<PauseClock>();
  if (foreground_jobs_locked() > 0) stop_background_locked(s);
}

void WorkerPool::Impl::end_job_locked(Slot& s) {
  if (!s.job_active) return;
  s.job_active = false;
  continue_background_locked(s); // a background job's own process, if stopped
  s.pauses.reset();
  s.urgency = nullptr;
  if (s.job_priority == JobPriority::foreground && foreground_jobs_locked() == 0)
    for (Slot& other : slots_)
      continue_background_locked(other);
}

WorkerPool::Impl::JobEnd WorkerPool::Impl::end_job(int idx) {
  std::lock_guard lk(mu_);
  Slot& s = slots_[static_cast<std::size_t>(idx)];
  end_job_locked(s);
  return s.preempted_job == s.job_id ? JobEnd::preempted : JobEnd::ended;
}

std::size_t WorkerPool::Impl::foreground_jobs_locked() const {
  return static_cast<std::size_t>(std::count_if(slots_.begin(), slots_.end(), [](const Slot& s) {
    return s.job_active && s.job_priority == JobPriority::foreground;
  }));
}

void WorkerPool::Impl::stop_background_locked(Slot& s) {
  if (!s.job_active || s.job_priority != JobPriority::background || s.stopped || !s.child) return;
  s.pauses->pause();
  s.child->signal_group(SIGSTOP);
  s.stopped = true;
  ++background_stops_;
  if (opts.background_max_stopped.count() > 0) cv_super_.notify_all(); // it times the stop
}

void WorkerPool::Impl::continue_background_locked(Slot& s) {
  if (!s.stopped) return;
  if (s.child) s.child->signal_group(SIGCONT);
  s.pauses->resume();
  s.stopped = false;
}

std::optional<Clock::time_point> WorkerPool::Impl::promote_overdue_locked(Clock::time_point now) {
  if (opts.background_max_stopped.count() <= 0) return std::nullopt;
  std::optional<Clock::time_point> next;
  for (Slot& s : slots_) {
    if (!s.stopped) continue;
    const Clock::duration left = opts.background_max_stopped - s.pauses->paused();
    if (left > Clock::duration::zero()) {
      if (!next || now + left < *next) next = now + left;
      continue;
    }
    promote_locked(s, "stopped for " + std::to_string(opts.background_max_stopped.count()) +
                          " ms in all");
  }
  return next;
}

void WorkerPool::Impl::raise_locked(const Urgency* urgency) {
  for (auto it = background_waiters_.begin(); it != background_waiters_.end();)
    it = it->second == urgency ? background_waiters_.erase(it) : std::next(it);
  for (Slot& s : slots_)
    if (s.job_active && s.job_priority == JobPriority::background && s.urgency == urgency)
      promote_locked(s, "a caller waits for it");
  cv_free_.notify_all();
}

void WorkerPool::Impl::promote_locked(Slot& s, const std::string& why) {
  // Its deadline keeps following the pauses it had (the clock stays).
  continue_background_locked(s);
  s.job_priority = JobPriority::foreground;
  s.urgency = nullptr;
  ++promotions_;
  for (Slot& other : slots_)
    stop_background_locked(other); // a foreground job runs now
  log::info(opts.name + " worker pid " + std::to_string(s.child ? s.child->pid() : 0) +
            ": a background job runs on as a foreground one (" + why + ")");
}

bool WorkerPool::Impl::preempt_background_locked(std::uint64_t ticket, const std::string& tenant) {
  for (Slot& s : slots_) {
    if (!s.job_active || s.job_priority != JobPriority::background || !s.child ||
        s.preempted_job == s.job_id)
      continue;
    s.preempted_job = s.job_id;
    s.preempted_for = std::make_pair(ticket, tenant);
    s.child->signal_group(SIGKILL); // a stopped process dies too (logged by fail_worker)
    ++preemptions_;
    return true;
  }
  return false;
}

bool WorkerPool::Impl::was_preempted(int idx, std::uint64_t id) {
  std::lock_guard lk(mu_);
  return slots_[static_cast<std::size_t>(idx)].preempted_job == id;
}

} // namespace fdo::daemon
