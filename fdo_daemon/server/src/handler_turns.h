// Which waiting request gets the next handler thread: uids take turns
// (FairQueue), and one uid holds at most `per_uid_max` threads at once, so a
// tenant with many slow requests in flight (compiles of big programs) cannot
// take every thread while another tenant's request waits behind them. Jobs are
// handed to the Asio pool only when a thread is free for them: the pool's own
// FIFO never holds a backlog. Thread-safe.
#pragma once

#include "fdo/util/fair_queue.h"

#include <boost/asio/thread_pool.hpp>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <sys/types.h>

namespace fdo::daemon {

class HandlerTurns {
public:
  // `threads`: the pool's thread count; `per_uid_max`: threads one uid may
  // hold (clamped to 1..threads).
  HandlerTurns(boost::asio::thread_pool& pool, unsigned threads, unsigned per_uid_max);

  // A move-only job (handlers carry descriptors and leases).
  class Job {
  public:
    Job() = default;
    template <class F> explicit Job(F f) : impl_(std::make_unique<Impl<F>>(std::move(f))) {}
    void operator()() { impl_->run(); }

  private:
    struct Base {
      virtual ~Base() = default;
      virtual void run() = 0;
    };
    template <class F> struct Impl final : Base {
      explicit Impl(F f) : f(std::move(f)) {}
      void run() override { f(); }
      F f;
    };
    std::unique_ptr<Base> impl_;
  };

  // Runs `job` on the pool when it is `uid`'s turn and a thread is free.
  template <class F> void post(uid_t uid, F job) { post_job(uid, Job(std::move(job))); }

  struct Stats {
    std::size_t waiting = 0; // jobs queued for a thread
    std::size_t running = 0; // jobs handed to the pool, not yet returned
    std::size_t uids_waiting = 0;
  };
  Stats stats() const;

private:
  void post_job(uid_t uid, Job job);
  void pump_locked();
  void done(uid_t uid);

  boost::asio::thread_pool& pool_;
  const std::size_t threads_;
  const std::size_t per_uid_max_;
  mutable std::mutex mu_;
  FairQueue<uid_t> queue_;
  std::map<std::uint64_t, Job> jobs_; // ticket -> job
  std::map<uid_t, std::size_t> running_by_uid_;
  std::size_t running_ = 0;
};

} // namespace fdo::daemon
