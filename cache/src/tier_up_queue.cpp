#include "tier_up_queue.h"

#include "fdo/util/log.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <optional>
#include <pthread.h>
#include <sched.h>

namespace fdo::cache::detail {

using Clock = std::chrono::steady_clock;

TierUpQueue::TierUpQueue(unsigned threads, std::chrono::milliseconds retry_after,
                         std::size_t max_failures_tracked)
    : retry_after_(retry_after), failed_at_(max_failures_tracked) {
  if (threads == 0) threads = 1;
  try {
    for (unsigned i = 0; i < threads; ++i)
      threads_.emplace_back([this] { worker(); });
  } catch (...) {
    // The destructor does not run for a half-built queue; the threads started must not leak.
    stop();
    throw;
  }
}

TierUpQueue::~TierUpQueue() {
  stop();
}

Scheduled TierUpQueue::schedule(const std::string& ck, const std::function<Job()>& make_job,
                                JobPriority priority) {
  std::lock_guard lock(mu_);
  if (stopping_) return Scheduled::stopped;
  if (pending_cks_.count(ck)) {
    // A stage now waits for what was compiling ahead of need: it moves up.
    if (priority == JobPriority::stage) {
      auto it = std::find_if(background_.begin(), background_.end(),
                             [&](const Queued& q) { return q.ck == ck; });
      if (it != background_.end()) {
        jobs_.push_back(std::move(*it));
        background_.erase(it);
      }
    }
    return Scheduled::already_queued;
  }
  if (Clock::time_point* failed = failed_at_.find(ck))
    if (Clock::now() - *failed < retry_after_) return Scheduled::failed_recently;
  (priority == JobPriority::stage ? jobs_ : background_).push_back(Queued{ck, make_job()});
  pending_cks_.insert(ck);
  job_cv_.notify_one();
  return Scheduled::queued;
}

void TierUpQueue::worker() {
  // No stage waits on this thread when it wakes (it sends a background
  // compile to a compile worker, megabytes of IR for a big program): under
  // SCHED_BATCH it does not preempt the request thread that queued the job
  // and is still answering its stage, on a host with fewer CPUs than busy
  // threads. Its share of the CPU is unchanged (nice 0).
  sched_param batch{};
  if (int rc = ::pthread_setschedparam(::pthread_self(), SCHED_BATCH, &batch); rc != 0)
    log::debug(std::string("tier-up thread: SCHED_BATCH refused: ") + std::strerror(rc));
  // Named for `top -H` and /proc/PID/task/TID/comm (tests find them by it).
  ::pthread_setname_np(::pthread_self(), kThreadName);
  std::unique_lock lock(mu_);
  for (;;) {
    job_cv_.wait(lock, [&] { return stopping_ || !jobs_.empty() || !background_.empty(); });
    if (stopping_) return;
    std::deque<Queued>& from = jobs_.empty() ? background_ : jobs_;
    Queued next = std::move(from.front());
    from.pop_front();
    running_++;
    lock.unlock();
    std::optional<JobResult> result;
    try {
      result = next.job();
    } catch (const std::exception& e) {
      // A background thread must not take the daemon down; the next stage
      // that misses schedules the compile again.
      log::error(std::string("cache: background tier-up threw: ") + e.what());
    }
    lock.lock();
    // Noted before the CK leaves the pending set, so no stage can slip in a
    // retry between the two.
    if (result == JobResult::failed) failed_at_.get_or_create(next.ck) = Clock::now();
    running_--;
    pending_cks_.erase(next.ck);
    if (jobs_.empty() && background_.empty() && running_ == 0) idle_cv_.notify_all();
  }
}

std::size_t TierUpQueue::drop_prefix(std::string_view prefix) {
  std::lock_guard lock(mu_);
  std::size_t dropped = 0;
  for (auto* queue : {&jobs_, &background_})
    std::erase_if(*queue, [&](const Queued& q) {
      if (!q.ck.starts_with(prefix)) return false;
      pending_cks_.erase(q.ck);
      dropped++;
      return true;
    });
  if (jobs_.empty() && background_.empty() && running_ == 0) idle_cv_.notify_all();
  return dropped;
}

void TierUpQueue::wait_idle() {
  std::unique_lock lock(mu_);
  idle_cv_.wait(
      lock, [&] { return stopping_ || (jobs_.empty() && background_.empty() && running_ == 0); });
}

std::size_t TierUpQueue::pending() const {
  std::lock_guard lock(mu_);
  return pending_cks_.size();
}

void TierUpQueue::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    for (auto* queue : {&jobs_, &background_}) {
      for (const Queued& q : *queue)
        pending_cks_.erase(q.ck);
      queue->clear();
    }
  }
  job_cv_.notify_all();
  for (std::thread& th : threads_)
    if (th.joinable()) th.join();
  idle_cv_.notify_all();
}

} // namespace fdo::cache::detail
