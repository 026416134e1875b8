// The GPU side of the JIT: programs whose module targets nvptx64-nvidia-cuda
// (kernels marked as NVVM kernels: the ptx_kernel calling convention or a
// "kernel" entry in !nvvm.annotations, as Triton, XLA and Numba emit them)
// are compiled to PTX text for one compute capability. The NVIDIA driver
// turns the PTX into device code (gpu/driver.h). See docs/gpu.md.
//
// Like compiler.h, call these only in a worker process; each call is
// self-contained and thread-safe.
#pragma once

#include "fdo/jit/compiler.h"
#include "fdo/jit/types.h"
#include "fdo/util/expected.h"

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fdo::jit {

inline constexpr std::string_view kNvptxTriple = "nvptx64-nvidia-cuda";

// What a GPU compile is for: the device's compute capability and its
// driver (which decides the newest PTX ISA it can load).
struct GpuTarget {
  int sm = 0;             // compute capability as major*10 + minor: 90 for sm_90
  int driver_version = 0; // cuDriverGetVersion: 12040 for CUDA 12.4
  bool operator==(const GpuTarget&) const = default;
};

// "sm_90".
std::string sm_name(int sm);
// The PTX ISA version (major*10 + minor) that fdo's LLVM emits for `sm`, or
// Errc::unsupported when LLVM 16's NVPTX back end does not know the
// architecture (newer than sm_90, or older than sm_35).
Expected<int> ptx_isa_for(int sm);
// The newest PTX ISA a driver of this version loads (CUDA 11.0 loads 7.0, 12.4
// loads 8.4, ...).
int max_ptx_isa_of_driver(int driver_version);
// The PTX ISA for `target`: Errc::unsupported when the driver is too old for
// the ISA the architecture needs.
Expected<int> ptx_isa_for(const GpuTarget& target);

// The compiler identity for a GPU target: triple nvptx64-nvidia-cuda, cpu
// "sm_NN", features "+ptxNN", and the driver's version, so two GPUs (or two
// drivers) never share a cached output.
Expected<CompilerIdentity> gpu_identity(const GpuTarget& target);

// Whether the bytes are a module that targets NVPTX (its target triple starts
// with "nvptx"). Cheap for IR text (a scan for the triple line); bitcode is
// parsed lazily.
bool is_nvptx_program(std::string_view program_bytes);

struct GpuKernel {
  std::string name;
  // Per parameter, the ABI type (types.h's parse_abi_type spelling: "ptr",
  // "i32", "i64", "f32", "f64", ...). A pointer is a device buffer.
  std::vector<std::string> param_types;
  bool operator==(const GpuKernel&) const = default;
};

struct GpuAnalysis {
  std::string profile_key; // 64 lower hex over the module with its debug info stripped
  std::vector<GpuKernel> kernels;
};

// Parse, verify and list the kernels. Errc::invalid_argument when the module
// does not target NVPTX or has no kernel; the parser's and verifier's errors
// otherwise.
Expected<GpuAnalysis> analyze_gpu(std::string_view program_bytes, const Limits& limits = {});

// Launch bounds a compile gives a kernel (.maxntid / .minnctapersm in the
// PTX): ptxas then caps the kernel's registers so that `max_threads` threads
// per block (and `min_blocks_per_sm` blocks) fit.
struct LaunchBounds {
  int max_threads = 0;       // > 0
  int min_blocks_per_sm = 0; // 0: unset
  bool operator==(const LaunchBounds&) const = default;
};

struct GpuCompileRequest {
  GpuTarget target;
  // 0..3: the O-level pipeline (3 by default, as nvcc).
  int opt_level = 3;
  // Per kernel name. A kernel not named keeps what the module says.
  std::map<std::string, LaunchBounds> launch_bounds;
  Limits limits;
};

struct GpuCompileResult {
  std::string profile_key;
  std::string ptx; // the module's PTX text, NUL-free
  std::vector<GpuKernel> kernels;
  std::string sm;   // "sm_90"
  int ptx_isa = 0;  // 78 for PTX ISA 7.8
  PhaseTimes times; // parse, optimize, codegen
  std::vector<std::string> diagnostics;
};

Expected<GpuCompileResult> compile_gpu(std::string_view program_bytes,
                                       const GpuCompileRequest& request);

} // namespace fdo::jit
