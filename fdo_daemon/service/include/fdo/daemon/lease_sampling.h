// Sampling of an in-process runtime's threads (docs/runtimes.md, "Sampling
// in-process code"): fdod opens a perf::Sampler on each thread the runtime
// reports (perf_event_open(tid)), drains them when the lease's feedback
// arrives and attributes the samples to the code ranges the runtime's loader
// mapped for the lease, exactly as an exec worker attributes its own
// (stage_sampling.h), so they feed the same time shares and block tallies.
//
// Trust (docs/security.md): fdod samples only threads of the process at the
// other end of the lease's connection (its SO_PEERCRED pid), only while that
// process is still owned by the connection's uid, and only where the host
// lets fdod watch that uid's threads; every range must name a function of
// the leased output. Nothing read from the rings goes back to the runtime but
// counts.
#pragma once

#include "fdo/daemon/config.h"
#include "fdo/daemon/stage_observation.h"
#include "fdo/jit/compiler.h"
#include "fdo/perf/sampler.h"
#include "fdo/util/expected.h"

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <sys/types.h>
#include <vector>

namespace fdo::daemon {

// What decides whether fdod may sample another process's threads.
struct SamplingAccess {
  uid_t euid = 0;
  bool perfmon = false;        // CAP_PERFMON or CAP_SYS_ADMIN in fdod's effective set
  std::optional<int> paranoid; // kernel.perf_event_paranoid, when readable
};

// The host as in-process sampling sees it, behind one seam so tests can fake
// every answer. real() reads /proc and uses perf::Syscalls::real().
class SamplingHost {
public:
  virtual ~SamplingHost() = default;
  virtual SamplingAccess access() = 0;
  // Whether `tid` is a thread of process `pid` now.
  virtual bool is_thread_of(pid_t pid, pid_t tid) = 0;
  // The effective uid process `pid` runs as, if it exists.
  virtual std::optional<uid_t> owner(pid_t pid) = 0;
  virtual perf::Syscalls& syscalls() = 0;

  static std::shared_ptr<SamplingHost> real();
};

struct SamplingVerdict {
  bool allowed = false;
  std::string reason; // why not, or what it samples with
};

// Whether fdod may sample the threads of `peer_pid` (uid `peer_uid`): the
// kernel lets a process with CAP_PERFMON watch any task, and one without it
// a task of its own uid when perf_event_paranoid <= 2 (fdod samples user
// space only). Sampling off (frequency 0) and an unknown peer pid (a
// transport without SO_PEERCRED) are reasons too.
SamplingVerdict may_sample(const SamplingAccess& host, const SamplingConfig& config, uid_t peer_uid,
                           pid_t peer_pid);

struct LeaseSamplingLimits {
  std::size_t max_threads = 64;  // sampled threads per lease
  std::size_t max_ranges = 4096; // reported code ranges per lease
  std::size_t data_pages = 8;    // per event and thread (locked memory)
};

// The samplers of one lease. Thread-safe (one lock, held while rings are
// opened or drained: no disk or network I/O).
class LeaseSampling {
public:
  LeaseSampling(std::shared_ptr<SamplingHost> host, pid_t pid, uid_t uid, SamplingConfig config,
                const jit::CompileResult& metadata, LeaseSamplingLimits limits = {});

  // The leased code's address ranges in the runtime, [{name, start, size}]:
  // each name a function (or entry thunk) of the leased output, no overlaps,
  // at most max_ranges. Replaces earlier ranges. invalid_argument names the
  // bad one; nothing changes then.
  Status set_ranges(const nlohmann::json& ranges);
  // Starts sampling the threads of `tids` not sampled yet. Each must be a
  // thread of the lease's process, which must still belong to its uid
  // (permission_denied otherwise, nothing opened). Past max_threads the rest
  // are counted as refused in state().
  Status add_threads(const nlohmann::json& tids);
  // {"available", "reason", "threads", "threads_refused", "events":[...],
  //  "frequency_hz", "ranges"}: what is sampled now.
  nlohmann::json state() const;
  // The samples since the last drain, attributed to the ranges: an
  // observation with only its samples and function ranges set, as an exec
  // worker's would have them (stage_observation.h); none when no thread is
  // sampled or no ranges are known. Threads that have ended are dropped.
  std::optional<StageObservation> drain();

private:
  std::shared_ptr<SamplingHost> host_;
  pid_t pid_;
  uid_t uid_;
  SamplingConfig config_;
  LeaseSamplingLimits limits_;
  std::set<std::string> known_names_;
  std::vector<jit::FunctionBlocks> blocks_; // the output's block map

  mutable std::mutex mu_;
  std::vector<jit::FunctionRange> ranges_; // sorted by start, with blocks
  std::map<pid_t, perf::Sampler> samplers_;
  std::vector<perf::SamplerEvent> events_; // as the newest sampler opened them
  std::size_t refused_ = 0;
  std::string last_error_;
};

} // namespace fdo::daemon
