// The in-process engine (docs/runtimes.md, "In-process execution"): leases a
// program's compiled output from fdod (program.lease: metadata plus the
// object as a sealed memfd), links it into this process with the project's
// ORC loader, and calls its entries natively. Calls are counted per entry (one
// in `time_every` is also timed); a flush — on a background thread or
// explicit — reads the instrumentation counters and submits what changed
// since the last flush (feedback.submit). When fdod says the profile moved on
// (stale), the engine leases the new output, links it as a new generation and
// swaps it in; a call holds a reference on the generation it entered, so the
// old one is unloaded when its last caller returns.
//
// Internal to libfdo (the C API in fdo/fdo.h wraps it); not installed.
#pragma once

#include "fdo/jit/loader.h"
#include "fdo/util/expected.h"
#include "fdo/util/fd.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <thread>
#include <vector>

namespace fdo::inprocess {

// A reply with the descriptors that came with it (SCM_RIGHTS).
struct LinkReply {
  nlohmann::json result;
  std::vector<Fd> fds;
};

// The engine's connection to fdod. The engine makes one call at a time
// (under its own lock); an implementation shared with other users must
// serialise with them itself. Leases belong to the connection: it must stay
// open as long as the engine.
class DaemonLink {
public:
  virtual ~DaemonLink() = default;
  virtual Expected<LinkReply> call(std::string_view method, const nlohmann::json& params) = 0;
};

enum class Flushing {
  background, // a thread flushes every flush_interval
  manual,     // only Engine::flush() (and the engine's destructor)
};

// Whether the engine's leases are planned by fdod's guard (docs/runtimes.md,
// "Guarded leases"): each lease is then one stage of the program's lifecycle
// (an arm of a running trial, the incumbent), timed in this process, and the
// engine leases again when fdod says the next stage may run other code.
enum class Guarding {
  guarded,   // program.lease with guard: true; a trial's arms stay linked (kKeptArms)
  unguarded, // the current profile's build, as it is
};

struct EngineOptions {
  std::string program;              // program id (IK) from program.register
  std::vector<std::string> entries; // the entries to call, by name
  Flushing flushing = Flushing::background;
  std::chrono::milliseconds flush_interval{200};
  // One call in this many (per thread) is timed: two clock reads cost more
  // than a small entry, so the rest are estimated from the timed ones.
  std::uint32_t time_every = 64;
  // A thread behind a swap for longer than this is logged (once per epoch):
  // it keeps the older code linked (CallerThread, LagReport).
  std::chrono::milliseconds lag_warning{1000};
  Guarding guarding = Guarding::guarded;
};

class Generation;
struct LoaderBox;
class Engine;

// Where a thread with native entries (CallerThread) stands, for the engine's
// lag report: the epoch it last announced at a quiescent point.
struct ThreadMark {
  std::atomic<std::uint64_t> seen{0};
  std::atomic<bool> closed{false};
};

// Threads whose native entries still point into code older than the current
// generation's (they have not passed a quiescent point since a swap): that
// code stays linked until they do.
struct LagReport {
  std::size_t threads = 0;             // open threads behind the current epoch
  std::size_t generations_held = 0;    // older generations still linked (any holder; a
                                       // guarded trial's kept arms are not counted)
  std::chrono::milliseconds oldest{0}; // the longest any of them has been behind
};

// A hold on the generation current when it was taken, for a run of calls
// from one thread (a query, a batch, an interpreter's trace): its calls skip
// the per-call generation reference and count into the hold, which hands its
// counts to the generation when it is released. A swap does not reach a
// hold: newer code runs from the next hold on, so release holds at the
// runtime's safe points. Not thread-safe; movable.
class Hold {
public:
  Hold(Hold&&) noexcept = default;
  Hold& operator=(Hold&& other) noexcept;
  ~Hold();

  // As Engine::call, for entry < the engine's entry_count().
  void call(std::size_t entry, std::uint64_t* args, std::uint64_t* ret);
  std::uint64_t generation() const;

private:
  friend class Engine;
  Hold(std::shared_ptr<Generation> g, std::uint32_t time_every);
  void hand_over();

  std::shared_ptr<Generation> g_;
  std::uint32_t time_every_ = 1;
  std::vector<std::uint64_t> calls_, timed_calls_, timed_ns_;
};

struct FlushResult {
  std::size_t batches = 0; // batches submitted (0: no calls since the last flush)
  bool stale = false;      // fdod has a newer profile than the running code's
  bool swapped = false;    // a new generation was linked and swapped in
  std::uint64_t generation = 0;
  std::int64_t profile_version = 0; // the profile's version as fdod last reported it
  bool renewed = false;             // a guarded lease was renewed (the next stage's plan taken)
  LagReport lagging;                // after the flush (and its swap)
};

// One thread's native entries (docs/runtimes.md, "Native entries"): real
// function pointers of each entry's own C signature, into the generation the
// thread saw at its last quiescent point. No reference count or shared atomic
// per call: the thread holds its generation between quiescent points, and
// announces each one; a swap's old code is unloaded once every thread that
// held it has passed one. Calls are counted per thread and handed to the
// generation at quiescent points (and every kHandOverCalls calls of next()).
// Not thread-safe: one per thread, closed (destroyed) before the engine.
class CallerThread {
public:
  static constexpr std::uint64_t kHandOverCalls = 4096;
  ~CallerThread();
  CallerThread(const CallerThread&) = delete;
  CallerThread& operator=(const CallerThread&) = delete;

  // The entry's native address in this thread's generation (entry <
  // entry_count()); null when the object has no native symbol for it.
  void* entry(std::size_t entry) const { return natives_[entry]; }
  // A quiescent point: the thread runs none of the code and keeps no
  // pointer it got before. Hands its counts over and takes the current
  // generation; true when that changed the entries' addresses.
  bool quiescent();
  // The per-call form: a quiescent point when the engine has swapped since
  // the last one (one relaxed load otherwise), counts one call of `entry`,
  // returns its address.
  void* next(std::size_t entry) {
    if (epoch_->load(std::memory_order_acquire) != seen_) quiescent();
    ++calls_[entry];
    if (++pending_ >= kHandOverCalls) hand_over();
    return natives_[entry];
  }
  // Calls made through entry() addresses, and the time of those timed.
  void count(std::size_t entry, std::uint64_t calls, std::uint64_t timed_calls,
             std::uint64_t timed_ns);
  // Calls `entry` through its thunk (the uniform slot ABI), as next() does.
  void call(std::size_t entry, std::uint64_t* args, std::uint64_t* ret);

  std::size_t entry_count() const { return natives_.size(); }
  std::uint64_t generation() const;
  std::string mode() const;
  std::int64_t profile_version() const;

private:
  friend class Engine;
  CallerThread(const Engine& engine, std::shared_ptr<ThreadMark> mark);
  void take(std::shared_ptr<Generation> g, std::uint64_t epoch);
  void hand_over();

  const Engine& engine_;
  const std::atomic<std::uint64_t>* epoch_;
  std::shared_ptr<ThreadMark> mark_;
  std::shared_ptr<Generation> g_;
  std::uint64_t seen_ = 0;
  std::vector<void*> natives_;
  std::vector<std::uint64_t> calls_, timed_calls_, timed_ns_;
  std::uint64_t pending_ = 0;
  std::uint32_t time_every_ = 1;
};

class Engine {
public:
  // Leases and links the current output. Errors: the daemon's (program not
  // found, entry unknown, ...), link errors naming the symbol, corrupt when
  // the lease reply does not carry exactly one object fd.
  static Expected<std::unique_ptr<Engine>> open(std::shared_ptr<DaemonLink> link,
                                                EngineOptions options);
  // Stops the flusher, submits what is left, releases the lease (best
  // effort: errors are logged). No call may be running or start.
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Index of an entry named in the options, or nullopt.
  std::optional<std::size_t> entry_index(std::string_view name) const;
  std::size_t entry_count() const { return entry_names_.size(); }
  // The entry's ABI (parameter and return types, docs/jit.md "Thunk ABI").
  const jit::EntryInfo& entry_info(std::size_t entry) const { return entry_info_[entry]; }

  // Calls entry `entry` (< entry_count()) with one 8-byte slot per parameter;
  // the result goes to *ret (may be null for void entries). Thread-safe; holds
  // the current generation for the duration of the call.
  void call(std::size_t entry, std::uint64_t* args, std::uint64_t* ret) const;
  // A hold on the current generation (see Hold): the cheapest way to make
  // many calls.
  Hold hold() const;

  // Native entries for the calling thread (CallerThread). Fails when an
  // entry has no native symbol in the object.
  Expected<std::unique_ptr<CallerThread>> attach() const;
  // Threads behind the current generation and the code they keep linked.
  LagReport lagging() const;

  // Submits the counts and times since the last flush; swaps in newer code
  // when fdod reports it. Thread-safe (flushes are serialised).
  Expected<FlushResult> flush();

  std::uint64_t generation() const;
  // Generations whose code is linked now: the current one, a guarded trial's
  // kept arms, and any older one an unfinished call or thread still holds.
  int generations_loaded() const;
  std::uint64_t lease() const;
  std::string storage_key() const;
  // The running code's compile mode ("instrumented", "optimized", "plain")
  // and the profile version it was compiled with.
  std::string mode() const;
  std::int64_t profile_version() const;
  // The variant the current lease runs and why, as fdod planned it:
  // {"guarded": true, "role", "name", "reason", "renew"} (role
  // incumbent/candidate/current), with what the guard made of the last
  // stage submitted: "counted" (it went into a trial) and "trial" (the
  // trial's progress or verdict, or null); {"guarded": false} for unguarded
  // leases.
  nlohmann::json variant() const;
  // Generations linked but not running: a guarded trial's other arm, kept to
  // switch back to without linking again (at most kKeptArms).
  static constexpr std::size_t kKeptArms = 2;
  std::size_t arms_kept() const { return kept_count_.load(std::memory_order_relaxed); }
  // Whether and how fdod samples this process's threads in the running
  // code (docs/runtimes.md, "Sampling in-process code"): {"available",
  // "reason", ...what program.sample last said, "last_submit": the samples
  // fdod folded with the last flush (or null)}.
  nlohmann::json sampling() const;
  // Calls fdod has been told of (feedback.submit), all generations.
  std::uint64_t calls_submitted() const { return calls_submitted_.load(); }
  // The background flusher's most recent error ("" when its last flush worked).
  std::string last_error() const;

private:
  friend class CallerThread;
  Engine(std::shared_ptr<DaemonLink> link, EngineOptions options);
  // Makes `next` current and starts a new epoch (flush_mu_).
  void publish(std::shared_ptr<Generation> next);
  // The flush's lag report (out.lagging); logs threads behind a swap for
  // longer than options_.lag_warning, once per epoch.
  void note_lagging(FlushResult& out);
  // The current generation with the epoch it belongs to.
  std::pair<std::shared_ptr<Generation>, std::uint64_t> current_with_epoch() const;
  // A flush, and whether a lease that fdod says is stale or to renew is
  // taken again (not at the engine's end).
  enum class AfterSubmit { lease_again, stop };
  Expected<FlushResult> flush_then(AfterSubmit then);
  // One program.lease: a newly linked generation, or (fresh null) the lease
  // of an object named in `loaded` (guarded), or no lease (unguarded, the
  // object unchanged).
  struct Leased {
    std::shared_ptr<Generation> fresh;
    std::uint64_t lease = 0;
    std::string storage_key;
    nlohmann::json variant;
    bool renew = false;
    bool sampled = false; // fdod samples this lease's threads (program.sample)
  };
  Expected<Leased> lease_object(const std::vector<std::string>& loaded);
  // Gives a lease back (0: none); failures only logged.
  void give_back(std::uint64_t lease);
  // A guarded lease renewed or the profile moved on: the new lease's code
  // runs from now on (flush_mu_).
  Status take_lease(std::shared_ptr<Generation> g, FlushResult& out);
  // The current lease's variant (program.lease's `variant` and `renew`).
  void set_variant(const nlohmann::json& variant, bool renew);
  Expected<std::optional<nlohmann::json>> submit(Generation& g);
  void flusher_loop(std::stop_token stop);
  // Remembers the calling thread for sampling (first call on it, then once
  // per timed call); cheap when it is known.
  void note_thread() const;
  // Tells fdod the threads and (with Ranges::send) the code ranges of `g`
  // when fdod samples its lease (program.sample); failures only noted.
  enum class Ranges { send, omit };
  void report_sampling(Generation& g, Ranges ranges);

  std::shared_ptr<DaemonLink> link_;
  EngineOptions options_;
  std::vector<std::string> entry_names_;
  std::vector<jit::EntryInfo> entry_info_;
  std::shared_ptr<LoaderBox> loader_;

  std::atomic<std::shared_ptr<Generation>> current_;
  // +1 at every swap, after current_ changed: a thread whose last quiescent
  // point saw an older epoch may still run older code.
  std::atomic<std::uint64_t> epoch_{1};
  mutable std::mutex marks_mu_;
  mutable std::vector<std::shared_ptr<ThreadMark>> marks_;
  mutable std::map<std::uint64_t, std::chrono::steady_clock::time_point> epoch_began_; // marks_mu_
  std::uint64_t lag_warned_epoch_ = 0;                                                 // marks_mu_
  std::atomic<std::uint64_t> calls_submitted_{0};

  std::mutex flush_mu_; // one flush (and so one daemon call) at a time
  // Linked generations that do not run now, most recently run first
  // (guarded: a trial's other arm); flush_mu_.
  std::vector<std::shared_ptr<Generation>> kept_;
  std::atomic<std::size_t> kept_count_{0};
  std::uint64_t generations_made_ = 0;
  std::int64_t last_profile_version_ = 0;

  mutable std::mutex error_mu_;
  std::string last_error_;
  nlohmann::json sampling_; // error_mu_
  nlohmann::json variant_;  // error_mu_

  // Threads that called the code (note_thread); new_threads_ when one was
  // added since fdod was last told.
  const pid_t pid_;
  mutable std::mutex threads_mu_;
  mutable std::vector<pid_t> threads_;
  mutable std::atomic<bool> new_threads_{false};
  // Some lease of this engine is sampled by fdod: only then are threads noted.
  std::atomic<bool> sampling_wanted_{false};

  std::mutex wake_mu_;
  std::condition_variable_any wake_;
  std::jthread flusher_; // last: stopped and joined first
};

} // namespace fdo::inprocess
