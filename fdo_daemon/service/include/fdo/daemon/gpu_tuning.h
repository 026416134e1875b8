// Feedback and tuning of GPU programs (docs/gpu.md, "Feedback and tuning"),
// kept in the program's profile document (util/gpu_profile.h), so they are
// versioned, survive restarts and are shared by a fleet's hosts through the
// profile store, per GPU architecture:
//
// - Tuned launches: a stage that tunes a kernel's launch for a problem size
//   writes the chosen configuration and every candidate's median kernel time
//   into the profile; later stages (on any host with the same architecture)
//   launch with it.
// - Launch-bound trials: a kernel launched with blocks of T threads is
//   compiled a second time with launch bounds of T (ptxas may then give each
//   thread more registers, or fewer spills), and the guard's sequential test
//   (trial.h: randomized blocks, bounded error rates) times the two builds on
//   the program's own comparable stages, by their kernel times; then with a
//   register cap that fits two blocks per multiprocessor (T, 2 blocks/SM)
//   against whichever build won. A kept bound is compile-affecting in the
//   profile, so every later compile of the program uses it; the verdict,
//   kept or not, is recorded, so each candidate is tried once per
//   architecture. A stage launched with more threads than a kept bound
//   allows runs a build without that bound.
//
// Concurrency: one trial per profile key at a time, in memory (a restart
// starts an unfinished trial over); the table's lock is held only to plan or
// record a stage, never across the store's writes.
#pragma once

#include "fdo/cache/interfaces.h"
#include "fdo/daemon/feedback_loop.h"
#include "fdo/daemon/guard_config.h"
#include "fdo/daemon/trial.h"
#include "fdo/gpu/session.h"
#include "fdo/util/gpu_profile.h"
#include "fdo/util/profile.h"

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace fdo::daemon {

// What makes two GPU stages' kernel times comparable.
struct GpuStageShape {
  std::string kernel;
  gpu::Dim3 grid, block;
  unsigned shared_bytes = 0;
  std::vector<std::uint64_t> buffer_sizes;
  std::vector<std::uint64_t> scalars; // the scalar arguments' bits (sizes, strides)
  bool operator==(const GpuStageShape&) const = default;
};

// Which build a GPU stage runs.
enum class GpuBuild {
  current,   // the current profile's
  candidate, // the trial's: the current profile plus the bounds on trial
  unbounded, // the current profile without a kept bound the launch exceeds
};
std::string_view to_string(GpuBuild b);

struct GpuStagePlan {
  GpuBuild build = GpuBuild::current;
  // The document to compile when build != current (its own digest and key).
  std::optional<cache::ProfileRef> variant;
  // The trial this stage is part of (arm: which side it timed), when one is.
  std::optional<std::uint64_t> trial;
  Arm arm = Arm::incumbent;
  GpuKernelBounds bounds; // the bounds on trial, or the kept bound left out
  // A trial would start but the program has no profile to derive its
  // candidate from: call start_profile after the stage.
  bool wants_profile = false;
};

// Who a profile write is made for (the stage's program and tenant).
struct GpuWriter {
  std::int64_t owner = 0;
  std::int64_t stage = 0;
  std::string program; // IK
};

// A trial's state after a stage was recorded.
struct GpuTrialProgress {
  std::uint64_t trial = 0;
  TrialResult result;
  bool decided = false;
  std::int64_t written_version = 0; // the version recording the verdict (0: none written)
};

class GpuTuner {
public:
  GpuTuner(FeedbackStore& store, std::string host);

  // The plan for a stage of `shape` on `arch` under the current profile
  // (`current` null: none yet; `version` its version). Starts a trial when the
  // guard is on, none runs for `pk`, a candidate for this launch (bounds of
  // its block, then with two blocks per multiprocessor) was never tried and
  // no bound for another block size is kept, and the same shape ran more
  // than guard.min_stages stages in a row. `comparable`:
  // false for a stage whose kernel time is not the launch's alone (one that
  // tuned its launch); it never joins a trial.
  GpuStagePlan plan(const std::string& pk, const ProfileDoc* current, std::int64_t version,
                    const std::string& arch, const GpuStageShape& shape, bool comparable,
                    const GuardConfig& config);
  // A trial stage's median kernel time. On a verdict the trial ends and the
  // verdict (and a kept bound) is written into the profile.
  Expected<GpuTrialProgress> record(const std::string& pk, const GpuStagePlan& plan,
                                    double median_ms, const GuardConfig& config,
                                    const GpuWriter& who);
  // Keeps a tuned launch in the profile: a new version (bookkeeping only, so
  // the program's outputs keep their keys). Returns it.
  Expected<std::int64_t> remember_launch(const std::string& pk, GpuLaunchRecord record,
                                         const GpuWriter& who);

  // The program's first profile version, an empty document (a trial's
  // candidate is derived from it), unless it has one; returns the current
  // version. Its digest differs from "no profile", so the program's current
  // build compiles once more under the new key.
  Expected<std::int64_t> start_profile(const std::string& pk, const GpuWriter& who);

  std::size_t running() const;

private:
  // Per profile key: the shape being watched (stages of it in a row) until a
  // trial starts on it, then the trial.
  struct Running {
    GpuStageShape shape;
    int seen = 0;
    std::uint64_t id = 0;
    GpuKernelBounds bounds;
    std::optional<Trial> trial;
    int other_stages = 0; // stages of other shapes since the trial's last one
  };
  // Reads the current profile, applies `change`, writes it as the next
  // version; retried when another writer was first.
  Expected<std::int64_t> rewrite(const std::string& pk, const std::string& reason,
                                 const GpuWriter& who,
                                 const std::function<void(ProfileDoc&)>& change);

  FeedbackStore& store_;
  std::string host_;
  mutable std::mutex mu_;
  std::map<std::string, Running> running_; // by profile key
  std::uint64_t next_id_ = 1;
};

// "launch bounds 256" / "launch bounds 256, 2 blocks/SM".
std::string describe(const GpuKernelBounds& b);

} // namespace fdo::daemon
