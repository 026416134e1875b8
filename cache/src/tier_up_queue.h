// Background tier-up compiles: a fixed set of threads running jobs, each for
// the CK it compiles. A CK already queued or running is not queued again, and
// a CK whose job failed is not queued again for `retry_after` (the earlier
// output keeps serving meanwhile; a sync stage still compiles at once).
// stop() (and the destructor) drops queued jobs and waits for running ones.
// Background jobs (compiles no stage is waiting for, e.g. the guard's plain
// build ahead of its trial) run only when no stage's tier-up is queued; a
// stage that asks for a CK queued in the background promotes it.
// Thread-safe.
#pragma once

#include "bounded.h"

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_set>
#include <vector>

namespace fdo::cache::detail {

enum class JobResult { installed, failed };
enum class Scheduled { queued, already_queued, failed_recently, stopped };
enum class JobPriority { stage, background };

class TierUpQueue {
public:
  using Job = std::function<JobResult()>;
  // The threads' name (/proc/PID/task/TID/comm); they run under SCHED_BATCH.
  static constexpr const char* kThreadName = "fdo-tier-up";

  // Starts `threads` threads (at least one). `max_failures_tracked` bounds the
  // memory of failed CKs (least recently failed forgotten first).
  TierUpQueue(unsigned threads, std::chrono::milliseconds retry_after,
              std::size_t max_failures_tracked);
  ~TierUpQueue();
  TierUpQueue(const TierUpQueue&) = delete;
  TierUpQueue& operator=(const TierUpQueue&) = delete;

  // Queues the job `make_job()` returns for `ck`. `make_job` runs only when the
  // CK is accepted, so a stage that finds its CK already queued copies nothing.
  Scheduled schedule(const std::string& ck, const std::function<Job()>& make_job,
                     JobPriority priority = JobPriority::stage);
  // Drops the queued (not running) jobs whose CK starts with `prefix`; returns
  // how many.
  std::size_t drop_prefix(std::string_view prefix);
  // Blocks until no job is queued or running (or the queue is stopped).
  void wait_idle();
  // Drops queued jobs, lets running ones finish and joins the threads. Later
  // calls (and schedule) find the queue stopped. Not to be called from a job.
  void stop();
  // Jobs queued or running now.
  std::size_t pending() const;

private:
  struct Queued {
    std::string ck;
    Job job;
  };
  void worker();

  const std::chrono::milliseconds retry_after_;
  mutable std::mutex mu_;
  std::condition_variable job_cv_, idle_cv_;
  std::deque<Queued> jobs_;                     // stage priority, first in first out
  std::deque<Queued> background_;               // run when jobs_ is empty
  std::unordered_set<std::string> pending_cks_; // queued or running
  BoundedLru<std::chrono::steady_clock::time_point> failed_at_;
  unsigned running_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> threads_; // last: started once everything above exists
};

} // namespace fdo::cache::detail
