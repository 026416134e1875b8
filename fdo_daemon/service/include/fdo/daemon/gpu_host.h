// The host's GPU as fdod sees it (docs/gpu.md): whether it runs NVPTX
// programs, on which device and driver, and why not when it does not. Found
// once at start-up by a probe in a sandboxed GPU worker (fdod itself never
// loads the driver); part of the compiler identity, so outputs compiled for
// one GPU or driver are never served for another.
#pragma once

#include "fdo/daemon/config.h"
#include "fdo/daemon/ipc.h"
#include "fdo/gpu/session.h"
#include "fdo/jit/nvptx.h"
#include "fdo/util/expected.h"

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace fdo::daemon {

class JobRunner;

struct GpuHost {
  std::vector<gpu::GpuInfo> gpus;       // what the driver reported
  std::optional<jit::GpuTarget> target; // GPU 0's, when fdod runs GPU programs
  std::string identity;                 // jit::gpu_identity(target).canonical(), when it does
  std::string reason;                   // why not, when it does not
  bool usable() const { return target.has_value(); }
};
nlohmann::json to_json(const GpuHost& host);

// Whether `gpu = auto` finds the host worth probing (an NVIDIA device node).
bool gpu_wanted(const Config& c);
JobLimits gpu_job_limits(const Config& c);
// Asks a GPU worker what the driver sees; never fails: what went wrong
// becomes GpuHost::reason.
GpuHost probe_gpu_host(const Config& c, JobRunner& gpu_pool);
// A GpuHost that runs nothing, saying why.
GpuHost no_gpu(std::string reason);

} // namespace fdo::daemon
