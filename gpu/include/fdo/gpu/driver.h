// The seam between fdo and the NVIDIA driver API (libcuda.so.1), as perf/'s
// syscall seam is for perf_event_open: every call fdo makes to the driver
// goes through a `Driver`, which is the real library loaded with dlopen at
// run time (there is no CUDA build dependency) or, in tests, a fake that
// keeps "device memory" in host memory and runs registered host functions as
// kernels. Only the calls and constants fdo uses are declared here, with the
// driver ABI's values; the handle types are opaque pointers.
#pragma once

#include "fdo/util/expected.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace fdo::gpu {

using CuResult = int;
using CuDevice = int;
using CuDevicePtr = std::uint64_t;
struct CuContextOpaque;
struct CuModuleOpaque;
struct CuFunctionOpaque;
struct CuEventOpaque;
struct CuStreamOpaque;
struct CuLinkStateOpaque;
using CuContext = CuContextOpaque*;
using CuModule = CuModuleOpaque*;
using CuFunction = CuFunctionOpaque*;
using CuEvent = CuEventOpaque*;
using CuStream = CuStreamOpaque*;
using CuLinkState = CuLinkStateOpaque*;

// Driver API result codes fdo tells apart (the rest are reported by name).
namespace cu {
inline constexpr CuResult success = 0;
inline constexpr CuResult invalid_value = 1;
inline constexpr CuResult out_of_memory = 2;
inline constexpr CuResult not_initialized = 3;
inline constexpr CuResult deinitialized = 4;
inline constexpr CuResult stub_library = 34;
inline constexpr CuResult insufficient_driver = 35;
inline constexpr CuResult no_device = 100;
inline constexpr CuResult invalid_device = 101;
inline constexpr CuResult invalid_image = 200;
inline constexpr CuResult invalid_context = 201;
inline constexpr CuResult no_binary_for_gpu = 209;
inline constexpr CuResult jit_compiler_not_found = 221;
inline constexpr CuResult invalid_ptx = 218;
inline constexpr CuResult unsupported_ptx_version = 222;
inline constexpr CuResult not_found = 500;
inline constexpr CuResult not_ready = 600;
inline constexpr CuResult illegal_address = 700;
inline constexpr CuResult launch_out_of_resources = 701;
inline constexpr CuResult launch_timeout = 702;
inline constexpr CuResult hardware_stack_error = 714;
inline constexpr CuResult illegal_instruction = 715;
inline constexpr CuResult misaligned_address = 716;
inline constexpr CuResult invalid_address_space = 717;
inline constexpr CuResult invalid_pc = 718;
inline constexpr CuResult launch_failed = 719;
inline constexpr CuResult system_driver_mismatch = 803;
inline constexpr CuResult unknown = 999;

// CUdevice_attribute
inline constexpr int attr_max_threads_per_block = 1;
inline constexpr int attr_max_shared_memory_per_block = 8;
inline constexpr int attr_multiprocessor_count = 16;
inline constexpr int attr_compute_capability_major = 75;
inline constexpr int attr_compute_capability_minor = 76;
// CUfunction_attribute
inline constexpr int func_max_threads_per_block = 0;
inline constexpr int func_shared_size_bytes = 1;
inline constexpr int func_local_size_bytes = 3;
inline constexpr int func_num_regs = 4;
// CUjit_option
inline constexpr int jit_info_log_buffer = 3;
inline constexpr int jit_info_log_buffer_size_bytes = 4;
inline constexpr int jit_error_log_buffer = 5;
inline constexpr int jit_error_log_buffer_size_bytes = 6;
// CUjitInputType
inline constexpr int jit_input_cubin = 0;
inline constexpr int jit_input_ptx = 1;
} // namespace cu

// The driver calls fdo makes, named after the driver API's (cuInit, ...) and
// with its argument order; each returns the driver's CuResult. The versioned
// entry points (cuMemAlloc_v2, ...) are the ones the real driver binds.
class Driver {
public:
  virtual ~Driver() = default;
  virtual CuResult init(unsigned flags) = 0;
  virtual CuResult driver_get_version(int* version) = 0;
  virtual CuResult device_get_count(int* count) = 0;
  virtual CuResult device_get(CuDevice* device, int ordinal) = 0;
  virtual CuResult device_get_name(char* name, int len, CuDevice device) = 0;
  virtual CuResult device_get_attribute(int* value, int attribute, CuDevice device) = 0;
  virtual CuResult device_total_mem(std::size_t* bytes, CuDevice device) = 0;
  virtual CuResult primary_ctx_retain(CuContext* ctx, CuDevice device) = 0;
  virtual CuResult primary_ctx_release(CuDevice device) = 0;
  virtual CuResult ctx_set_current(CuContext ctx) = 0;
  virtual CuResult ctx_synchronize() = 0;
  virtual CuResult module_load_data_ex(CuModule* module, const void* image, unsigned num_options,
                                       int* options, void** values) = 0;
  virtual CuResult module_unload(CuModule module) = 0;
  virtual CuResult module_get_function(CuFunction* fn, CuModule module, const char* name) = 0;
  virtual CuResult func_get_attribute(int* value, int attribute, CuFunction fn) = 0;
  virtual CuResult mem_alloc(CuDevicePtr* ptr, std::size_t bytes) = 0;
  virtual CuResult mem_free(CuDevicePtr ptr) = 0;
  virtual CuResult memcpy_htod(CuDevicePtr dst, const void* src, std::size_t bytes) = 0;
  virtual CuResult memcpy_dtoh(void* dst, CuDevicePtr src, std::size_t bytes) = 0;
  virtual CuResult launch_kernel(CuFunction fn, unsigned grid_x, unsigned grid_y, unsigned grid_z,
                                 unsigned block_x, unsigned block_y, unsigned block_z,
                                 unsigned shared_bytes, CuStream stream, void** params,
                                 void** extra) = 0;
  virtual CuResult event_create(CuEvent* event, unsigned flags) = 0;
  virtual CuResult event_record(CuEvent event, CuStream stream) = 0;
  virtual CuResult event_query(CuEvent event) = 0;
  virtual CuResult event_synchronize(CuEvent event) = 0;
  virtual CuResult event_elapsed_time(float* ms, CuEvent start, CuEvent end) = 0;
  virtual CuResult event_destroy(CuEvent event) = 0;
  virtual CuResult link_create(unsigned num_options, int* options, void** values,
                               CuLinkState* state) = 0;
  virtual CuResult link_add_data(CuLinkState state, int type, void* data, std::size_t size,
                                 const char* name, unsigned num_options, int* options,
                                 void** values) = 0;
  virtual CuResult link_complete(CuLinkState state, void** cubin, std::size_t* size) = 0;
  virtual CuResult link_destroy(CuLinkState state) = 0;
  // The driver's name for a result ("CUDA_ERROR_ILLEGAL_ADDRESS") and its
  // text; nullptr when it does not know the code.
  virtual const char* error_name(CuResult result) = 0;
  virtual const char* error_string(CuResult result) = 0;
};

// What a driver call's failure means for fdo.
enum class GpuErrc {
  no_driver,        // no libcuda, a stub library, or a driver/kernel-module mismatch
  no_device,        // no GPU, or not this ordinal
  out_of_memory,    // device memory exhausted
  invalid_program,  // the driver rejected the PTX or cubin (its log says why)
  not_found,        // no such kernel in the module
  launch_resources, // the launch asks for more threads, registers or shared memory than fit
  invalid_argument, // a bad grid, block or argument
  illegal_address,  // the kernel touched memory it does not own
  kernel_fault,     // another fault in the kernel (illegal instruction, misaligned, trap)
  launch_timeout,   // the kernel ran past the display watchdog or fdo's time limit
  other,
};
std::string_view to_string(GpuErrc e);

// The class of a driver result (never success).
GpuErrc classify(CuResult result);
// Whether a failure leaves the context unusable: after a kernel fault every
// later call in the process fails, so the worker that met it is replaced.
bool loses_context(GpuErrc e);
// The project error for a failed call: "cuLaunchKernel: CUDA_ERROR_ILLEGAL_ADDRESS
// (700): an illegal memory access was encountered", with the Errc of its class.
Error driver_error(Driver& driver, std::string_view call, CuResult result);
fdo::Errc errc_of(GpuErrc e);

// The real driver: dlopen(`path`) (libcuda.so.1 by default, found the way the
// dynamic loader finds it) and every entry point bound. Errc::unsupported
// naming the library and dlerror() when it is not there or lacks an entry point.
Expected<std::unique_ptr<Driver>> load_cuda_driver(const std::string& path = "libcuda.so.1");

} // namespace fdo::gpu
