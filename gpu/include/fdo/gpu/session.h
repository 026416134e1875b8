// One process's use of one GPU through a Driver (driver.h): probe the
// devices, load PTX (the driver JIT-compiles it, its log on failure) or a
// cubin, turn PTX into a cubin to cache, and launch a kernel on host buffers
// copied in and out, timed with driver events. A kernel fault leaves the
// context unusable: the session says so (broken()) and its process is the one
// to replace. See docs/gpu.md.
#pragma once

#include "fdo/gpu/driver.h"
#include "fdo/util/expected.h"

#include <chrono>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fdo::gpu {

struct GpuInfo {
  int ordinal = 0;
  std::string name;
  int sm = 0;             // compute capability major*10 + minor
  int driver_version = 0; // cuDriverGetVersion
  std::uint64_t memory_bytes = 0;
  int multiprocessors = 0;
  int max_threads_per_block = 0;
  int max_shared_bytes_per_block = 0;
  bool operator==(const GpuInfo&) const = default;
};
nlohmann::json to_json(const GpuInfo& info);

// cuInit and every device's facts. GpuErrc no_driver / no_device come as
// Errc::unsupported errors naming the driver's result.
Expected<std::vector<GpuInfo>> probe(Driver& driver);

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
  std::uint64_t count() const { return std::uint64_t{x} * y * z; }
  bool operator==(const Dim3&) const = default;
};

// A kernel argument: a scalar's bytes (1..8, little-endian in `bits`) or a
// device buffer, by index into the launch's buffers.
struct KernelArg {
  enum class Kind { scalar, buffer };
  Kind kind = Kind::scalar;
  std::uint64_t bits = 0;
  std::uint32_t size = 0;   // scalar bytes
  std::uint32_t buffer = 0; // buffer index
  static KernelArg i32(std::int32_t v);
  static KernelArg i64(std::int64_t v);
  static KernelArg f32(float v);
  static KernelArg f64(double v);
  static KernelArg buf(std::uint32_t index);
  bool operator==(const KernelArg&) const = default;
};

enum class ImageKind { ptx, cubin };

struct LaunchSpec {
  std::string kernel;
  Dim3 grid, block;
  unsigned shared_bytes = 0; // dynamic shared memory
  std::vector<KernelArg> args;
  // Launches timed one by one on the same buffers (copied in once, out once
  // after the last): a kernel that updates its buffers sees its own output.
  int repeats = 1;
  // A launch not finished by then is a launch_timeout: the kernel cannot be
  // stopped, so the session is broken and its process must end.
  std::chrono::milliseconds time_limit{10'000};
};

// What ptxas made of a kernel (cuFuncGetAttribute).
struct KernelAttributes {
  int registers = 0;
  int local_bytes = 0; // spills and stack per thread
  int static_shared_bytes = 0;
  int max_threads_per_block = 0; // the most this kernel can be launched with
  bool operator==(const KernelAttributes&) const = default;
};

struct LaunchResult {
  std::vector<double> kernel_ms; // per launch, from events around it
  std::uint64_t copy_in_ns = 0;
  std::uint64_t copy_out_ns = 0;
  KernelAttributes attributes;
};

class Session;

// Device memory holding a launch's buffers, freed on destruction; kept on the
// device across launches (a tuner times many launches on one upload).
class DeviceBuffers {
public:
  DeviceBuffers() = default;
  ~DeviceBuffers();
  DeviceBuffers(DeviceBuffers&& o) noexcept
      : driver_(o.driver_), broken_(o.broken_), pointers_(std::move(o.pointers_)),
        sizes_(std::move(o.sizes_)) {
    o.pointers_.clear();
  }
  DeviceBuffers& operator=(DeviceBuffers&& o) noexcept;
  DeviceBuffers(const DeviceBuffers&) = delete;
  DeviceBuffers& operator=(const DeviceBuffers&) = delete;
  std::size_t size() const { return pointers_.size(); }

private:
  friend class Session;
  Driver* driver_ = nullptr;
  // The session's: once it is broken nothing is freed (cuMemFree waits for
  // the device, and a kernel that never ends would hold it forever).
  const bool* broken_ = nullptr;
  std::vector<CuDevicePtr> pointers_;
  std::vector<std::size_t> sizes_;
};

// A loaded module; unloaded when the last reference goes.
class Module {
public:
  ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  // The driver's info log from loading it (ptxas's notes for PTX).
  const std::string& log() const { return log_; }
  ImageKind kind() const { return kind_; }

private:
  friend class Session;
  Module(Session& s, CuModule m, ImageKind kind, std::string log)
      : session_(s), module_(m), kind_(kind), log_(std::move(log)) {}
  Session& session_;
  CuModule module_;
  ImageKind kind_;
  std::string log_;
};

class Session {
public:
  // Initialises the driver and makes the device's primary context current on
  // this thread.
  static Expected<std::unique_ptr<Session>> open(Driver& driver, int ordinal = 0);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  const GpuInfo& info() const { return info_; }
  Driver& driver() { return driver_; }

  // Errc::compile with the driver's error log when it rejects the image.
  Expected<std::shared_ptr<Module>> load(std::string_view image, ImageKind kind);
  // The device code the driver JIT-compiles PTX into, as a cubin to cache and
  // load later without compiling again; `info_log`, when given, gets ptxas's
  // notes (what loading the PTX would have logged).
  Expected<std::string> link_cubin(std::string_view ptx, std::string* info_log = nullptr);
  // Copies `buffers` in, launches spec.repeats times, copies them back.
  Expected<LaunchResult> launch(Module& module, const LaunchSpec& spec,
                                std::vector<std::string>& buffers);
  // The same in steps: buffers copied to the device once, launched on as
  // often as wanted, copied back when asked.
  Expected<DeviceBuffers> upload(const std::vector<std::string>& buffers);
  Expected<LaunchResult> launch(Module& module, const LaunchSpec& spec, DeviceBuffers& buffers);
  Status download(const DeviceBuffers& device, std::vector<std::string>& buffers);

  // A call failed in a way that leaves the context unusable (a kernel fault,
  // a launch that never finished): every later call fails; end the process.
  bool broken() const { return broken_; }
  // The class of the last failed driver call.
  std::optional<GpuErrc> last_error() const { return last_error_; }

private:
  friend class Module;
  Session(Driver& d, GpuInfo info, CuDevice device, CuContext ctx)
      : driver_(d), info_(std::move(info)), device_(device), ctx_(ctx) {}
  Error fail(std::string_view call, CuResult r);
  Status check(std::string_view call, CuResult r);

  Driver& driver_;
  GpuInfo info_;
  CuDevice device_;
  CuContext ctx_;
  bool broken_ = false;
  std::optional<GpuErrc> last_error_;
};

} // namespace fdo::gpu
