// WorkerPool's state (WorkerPool::Impl): its slots, the fair queue of
// callers waiting for a worker, the supervisor thread and the counters.
// Private to the workers library: worker_pool.cpp has the pool's life
// (start, supervision, slots, acquire and release, shutdown), pool_job.cpp
// one job on a worker (send, await, the reply or the worker's failure).
// pool_background.cpp background jobs (stops, promotions, preemption).
#pragma once

#include "fdo/daemon/worker_pool.h"
#include "fdo/util/fair_queue.h"
#include "worker_failure.h"
#include "worker_process.h"

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace fdo::daemon {

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
    std::unique_ptr<detail::Child> child;
    // A process taken out of service (recycled for another tenant): the
    // supervisor reaps it before starting the slot's next process.
    std::unique_ptr<detail::Child> retiring;
    std::uint64_t jobs = 0;
    // The tenant the process is bound to; none until its first job binds it
    // (the daemon's own jobs have the empty tenant, which is bound too).
    std::optional<std::string> tenant;
    // The tenant of the job a busy slot runs (or is starting for): what
    // max_running_per_tenant counts. Meaningful only while busy or reserved.
    std::string job_tenant;
    // The waiter this slot's next process is started for (a recycle).
    std::optional<std::uint64_t> reserved_for;
    // The job the slot runs, from acquire() until the job ends (released,
    // given back, or its worker failed or retired): its priority, and for a
    // background one the clock of the time it spent stopped and whether it
    // is stopped now.
    bool job_active = false;
    JobPriority job_priority = JobPriority::foreground;
    const Urgency* urgency = nullptr; // a background job's (JobOptions), for raise_locked
    std::shared_ptr<PauseClock> pauses;
    bool stopped = false;
    // The job's id (set when it begins); the id of a background job whose
    // process was killed to free its worker for a foreground waiter, and that
    // waiter, which the replacement process is reserved for.
    std::uint64_t job_id = 0;
    std::uint64_t preempted_job = 0;
    std::optional<std::pair<std::uint64_t, std::string>> preempted_for;
    int consecutive_spawn_failures = 0;
    detail::Clock::time_point next_spawn{};
    std::string last_spawn_error;
    bool ever_started = false;
  };

  void supervise();
  Expected<int> acquire(const std::string& tenant, JobPriority priority, const Urgency* urgency);
  // A job's start and end on a slot, under mu_ (job_runner.h, JobPriority):
  // the first foreground job stops every background one, the last continues
  // them; a background job that starts while a foreground one runs starts
  // stopped. end_job_locked is idempotent and comes before anything reaps the
  // slot's process, so no signal goes to a process already reaped.
  void begin_job_locked(Slot& s, JobPriority priority, const Urgency* urgency);
  void end_job_locked(Slot& s);
  // end_job_locked under mu_; says whether the job was preempted.
  enum class JobEnd { ended, preempted };
  JobEnd end_job(int idx);
  std::size_t foreground_jobs_locked() const;
  void stop_background_locked(Slot& s);
  void continue_background_locked(Slot& s);
  // Background jobs stopped for opts.background_max_stopped in all run on as
  // foreground ones (continued, never stopped or preempted again); returns
  // when the next stopped one is due, if any. Called by the supervisor.
  std::optional<detail::Clock::time_point> promote_overdue_locked(detail::Clock::time_point now);
  // A background job (waiting or running) whose caller now waits for it:
  // foreground from now on. The hook of its Urgency.
  void raise_locked(const Urgency* urgency);
  void promote_locked(Slot& s, const std::string& why);
  // A foreground waiter with no worker free and none to recycle: kills a
  // background job's process (its run() sends the job again later) and
  // reserves the replacement for the waiter. False when there is none.
  bool preempt_background_locked(std::uint64_t ticket, const std::string& tenant);
  // Whether job `id` on slot `idx` was preempted (its run() retries it).
  bool was_preempted(int idx, std::uint64_t id);
  void dispatch_locked();
  int usable_slot_locked(const std::string& tenant) const;
  // Jobs of `tenant` running or about to (busy slots, workers starting for it);
  // with Jobs::foreground, not counting its background jobs.
  enum class Jobs { all, foreground };
  std::size_t running_locked(const std::string& tenant, Jobs which = Jobs::all) const;
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
                               const std::string& retire_after,
                               const std::function<Status(const Message&)>& check_reply);
  detail::SpawnOptions spawn_options() const {
    return {opts.name,
            opts.worker_path,
            opts.worker_args,
            opts.startup_timeout,
            opts.capture_output_bytes,
            opts.cgroups};
  }
  Expected<Message> fail_worker(int idx, detail::Failure kind, const Error& cause,
                                const JobLimits& limits,
                                const std::optional<detail::FatalReport>& report);
  void shutdown();
  int count_locked(WorkerState s) const;
  bool no_worker_can_come_locked() const;
  std::string last_spawn_error_locked() const;

  mutable std::mutex mu_;
  std::condition_variable cv_free_;  // a slot changed state; waiters re-check
  std::condition_variable cv_super_; // the supervisor has work or must stop
  std::vector<Slot> slots_;
  FairQueue<> queue_;                     // callers waiting for a worker
  std::map<std::uint64_t, int> assigned_; // ticket -> slot handed to it
  std::size_t max_waiting_per_tenant_ = 0;
  bool stopping_ = false;        // no new jobs, no new processes
  bool supervisor_exit_ = false; // set only after every worker is reaped
  bool shut_down_ = false;
  std::uint64_t jobs_ = 0, succeeded_ = 0, restarts_ = 0, spawn_failures_ = 0, idle_deaths_ = 0;
  std::uint64_t retired_ = 0, recycled_ = 0, program_exits_ = 0;
  // Tickets of waiting background jobs, with their Urgency (or null).
  std::map<std::uint64_t, const Urgency*> background_waiters_;
  std::uint64_t background_stops_ = 0, preemptions_ = 0, promotions_ = 0;
  FailureCounts failures_;
  std::uint64_t next_job_id_ = 1; // under mu_
  std::thread supervisor_;
};

} // namespace fdo::daemon
