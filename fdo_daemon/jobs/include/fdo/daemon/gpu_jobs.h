// What a GPU worker (`fdo-worker --role gpu`) does: probe the host's GPUs,
// and launch a kernel of a compiled NVPTX program on buffers, timed with
// driver events (gpu/session.h), optionally tuning its launch configuration
// first (gpu/tune.h). A GPU worker runs no client code on the host: the
// driver JIT-compiles the client's PTX and the GPU runs it. See docs/gpu.md.
//
// Wire protocol (ipc.h messages; the typed job and reply travel as the
// header, to_json/from_json below, with the bulk bytes in the payload):
//   {"op":"gpu_probe","driver":path}  -> {"gpus":[GpuInfo...]} | error
//   {"op":"gpu_launch", GpuLaunchJob...}  payload: the image (PTX or a cubin,
//                                          when attached), then each buffer
//     -> GpuLaunchReply                   payload: the cubin (when asked for
//                                          and made), then the buffers (when asked)
//   The worker keeps up to `cache_entries` loaded modules by storage key; a
//   job sent by key to a worker that does not hold it is answered with
//   outcome "missing_image" and sent again with the image: a cubin fdod
//   cached, or the PTX, which the worker then links to a cubin for fdod to
//   cache (`want_cubin`), so a new worker or a restarted fdod loads device
//   code without the driver compiling the PTX again. A kernel fault or a
//   launch past its time limit loses the GPU context: the reply carries the
//   error and the loop retires the worker (its replacement starts clean).
#pragma once

#include "fdo/daemon/ipc.h"
#include "fdo/gpu/session.h"
#include "fdo/gpu/tune.h"
#include "fdo/util/expected.h"

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace fdo::daemon {

struct GpuLaunchJob {
  std::string driver = "libcuda.so.1"; // the library a worker loads on its first job
  std::string key;                     // storage key of the compiled PTX
  std::string kernel;
  gpu::Dim3 grid, block;
  unsigned shared_bytes = 0;
  std::vector<gpu::KernelArg> args;
  std::vector<std::uint64_t> buffer_sizes;
  bool return_buffers = false;
  int repeats = 1;
  std::uint64_t time_limit_ms = 10'000;
  std::uint64_t cache_entries = 16;
  // Set when the PTX, or a cubin, leads the payload (never both).
  std::optional<std::uint64_t> ptx_size;
  std::optional<std::uint64_t> cubin_size;
  // With the PTX: link it to a cubin, load that, and send it back.
  bool want_cubin = false;
  // With tune_items: the most threads a candidate block may have (the
  // kernel's launch bounds); 0: the device's limit.
  int tune_max_threads = 0;
  // Tune first: grid-stride candidates over this many items (the grid and
  // block above are then ignored); the launch runs with the tuned config.
  std::optional<std::uint64_t> tune_items;
  bool operator==(const GpuLaunchJob&) const = default;
};

enum class GpuOutcome { ran, missing_image };

struct GpuLaunchReply {
  GpuOutcome outcome = GpuOutcome::ran;
  std::vector<double> kernel_ms;
  std::uint64_t copy_in_ns = 0, copy_out_ns = 0;
  gpu::KernelAttributes attributes;
  bool module_loaded = false;                 // this job loaded the module
  gpu::ImageKind image = gpu::ImageKind::ptx; // what it loaded (ptx: the driver compiled it)
  std::uint64_t cubin_size = 0;               // the cubin leading the payload (want_cubin)
  double load_ms = 0;
  std::string jit_log;
  gpu::LaunchConfig ran; // the configuration launched
  // With tune_items: every candidate's median and the launches spent.
  std::vector<std::pair<gpu::LaunchConfig, double>> tuned;
  int tune_launches = 0;
  std::vector<std::uint64_t> buffer_sizes; // of the returned buffers
};

// [x], [x, y] or [x, y, z], each 1..2^31-1; `what` names it in errors.
Expected<gpu::Dim3> dims_from_json(const nlohmann::json& j, const char* what);

nlohmann::json to_json(const GpuLaunchJob& job);
Expected<GpuLaunchJob> gpu_launch_job_from_json(const nlohmann::json& j);
nlohmann::json to_json(const GpuLaunchReply& reply);
// The reply comes from a process that ran the driver on client PTX: checked
// as hostile input (every field's type and range).
Expected<GpuLaunchReply> gpu_launch_reply_from_json(const nlohmann::json& j);

using DriverLoader = std::function<Expected<std::unique_ptr<gpu::Driver>>(const std::string&)>;

class GpuJobs {
public:
  // `load` opens the driver on the first job that needs it (the real
  // gpu::load_cuda_driver in fdo-worker).
  explicit GpuJobs(DriverLoader load);
  ~GpuJobs();
  GpuJobs(const GpuJobs&) = delete;
  GpuJobs& operator=(const GpuJobs&) = delete;
  Expected<Message> handle(const Message& request);
  // The GPU context is lost: the worker must be replaced.
  bool broken() const;

private:
  struct State;
  std::unique_ptr<State> state_;
};

} // namespace fdo::daemon
