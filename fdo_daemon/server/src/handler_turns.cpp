#include "handler_turns.h"

#include <algorithm>
#include <boost/asio/post.hpp>

namespace fdo::daemon {

HandlerTurns::HandlerTurns(boost::asio::thread_pool& pool, unsigned threads, unsigned per_uid_max)
    : pool_(pool), threads_(std::max(1u, threads)),
      per_uid_max_(std::clamp<std::size_t>(per_uid_max, 1, std::max(1u, threads))) {}

void HandlerTurns::post_job(uid_t uid, Job job) {
  std::lock_guard lk(mu_);
  jobs_.emplace(queue_.push(uid), std::move(job));
  pump_locked();
}

HandlerTurns::Stats HandlerTurns::stats() const {
  std::lock_guard lk(mu_);
  return {queue_.size(), running_, queue_.tenants()};
}

// Hands jobs to free threads, uids in turn, passing over a uid at its cap.
// Posting never runs the job inline, so holding mu_ here is safe.
void HandlerTurns::pump_locked() {
  auto below_cap = [&](uid_t uid) {
    auto it = running_by_uid_.find(uid);
    return it == running_by_uid_.end() || it->second < per_uid_max_;
  };
  while (running_ < threads_) {
    auto next = queue_.next_where(below_cap);
    if (!next) return;
    queue_.serve(next->id, next->tenant);
    auto it = jobs_.find(next->id);
    Job job = std::move(it->second);
    jobs_.erase(it);
    ++running_;
    ++running_by_uid_[next->tenant];
    boost::asio::post(pool_, [this, uid = next->tenant, job = std::move(job)]() mutable {
      // The turn is given back however the job ends, after the job and what
      // it captured are gone.
      struct Done {
        HandlerTurns* turns;
        uid_t uid;
        ~Done() { turns->done(uid); }
      } done_at_exit{this, uid};
      Job run = std::move(job);
      run();
    });
  }
}

void HandlerTurns::done(uid_t uid) {
  std::lock_guard lk(mu_);
  --running_;
  if (auto it = running_by_uid_.find(uid); it != running_by_uid_.end() && --it->second == 0)
    running_by_uid_.erase(it);
  pump_locked();
}

} // namespace fdo::daemon
