// The GPU part of a profile document (docs/gpu.md, "Feedback and tuning"):
// per GPU architecture, the launch configurations tuned for a program's
// kernels with the times every candidate took, the launch bounds the guard's
// trials kept (compile-affecting: the PTX is compiled with them), and the
// trials it ran. Keyed by architecture ("sm_90"), so a fleet's hosts with one
// GPU share their tunings through the profile store and a host with another
// GPU tunes for its own.
#pragma once

#include "fdo/util/expected.h"
#include "fdo/util/guard_record.h"

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace fdo {

using GpuDims = std::array<std::uint32_t, 3>; // x, y, z; each >= 1

// One launch configuration and its median kernel time.
struct GpuLaunchTiming {
  GpuDims grid{1, 1, 1};
  GpuDims block{1, 1, 1};
  double median_ms = 0;
  bool operator==(const GpuLaunchTiming&) const = default;
};

// A kernel's launch tuned for a problem size (bookkeeping: a launch does not
// change the code, so the digest leaves it out).
struct GpuLaunchRecord {
  std::string arch; // "sm_90"
  std::string kernel;
  std::uint64_t items = 0;                 // elements the grid-stride kernel covers
  GpuLaunchTiming chosen;                  // the fastest candidate
  std::vector<GpuLaunchTiming> candidates; // the last round's survivors, as timed
  bool operator==(const GpuLaunchRecord&) const = default;
};

// Launch bounds a kernel is compiled with on one architecture (.maxntid and
// .minnctapersm in the PTX): compile-affecting.
struct GpuKernelBounds {
  std::string arch;
  std::string kernel;
  int max_threads = 0;       // 1..1024
  int min_blocks_per_sm = 0; // 0: unset
  bool operator==(const GpuKernelBounds&) const = default;
};

// A finished trial of launch bounds against the build without them.
struct GpuBoundsTrial {
  GpuKernelBounds bounds;
  TrialVerdict verdict = TrialVerdict::no_difference;
  double ratio = 1.0; // candidate time / incumbent time (median of pairs)
  int pairs = 0;
  bool operator==(const GpuBoundsTrial&) const = default;
};

struct GpuProfile {
  std::vector<GpuLaunchRecord> launches;
  std::vector<GpuKernelBounds> launch_bounds;
  std::vector<GpuBoundsTrial> trials;
  bool empty() const { return launches.empty() && launch_bounds.empty() && trials.empty(); }
  bool operator==(const GpuProfile&) const = default;
};

nlohmann::json to_json(const GpuProfile& gpu);
// Validates every field; errors name it ("gpu.launches[0].grid").
Expected<GpuProfile> gpu_profile_from_json(const nlohmann::json& j);
// The compile-affecting part (the launch bounds, in a canonical order) for
// the profile digest; null when there are none, so documents without them
// keep their digest.
nlohmann::json gpu_digest_part(const GpuProfile& gpu);

const GpuLaunchRecord* find_launch(const GpuProfile& gpu, const std::string& arch,
                                   const std::string& kernel, std::uint64_t items);
const GpuKernelBounds* find_bounds(const GpuProfile& gpu, const std::string& arch,
                                   const std::string& kernel);
// The finished trial of exactly these bounds, when there was one.
const GpuBoundsTrial* find_trial(const GpuProfile& gpu, const GpuKernelBounds& bounds);
// Replaces the record for the same (arch, kernel, items), or adds it.
void set_launch(GpuProfile& gpu, GpuLaunchRecord record);
// Replaces the bounds for the same (arch, kernel), or adds them.
void set_bounds(GpuProfile& gpu, GpuKernelBounds bounds);

} // namespace fdo
