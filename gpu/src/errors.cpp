// Driver results: their class, what they cost the context, the error fdo reports.
#include "fdo/gpu/driver.h"

namespace fdo::gpu {

std::string_view to_string(GpuErrc e) {
  switch (e) {
  case GpuErrc::no_driver:
    return "no_driver";
  case GpuErrc::no_device:
    return "no_device";
  case GpuErrc::out_of_memory:
    return "out_of_memory";
  case GpuErrc::invalid_program:
    return "invalid_program";
  case GpuErrc::not_found:
    return "not_found";
  case GpuErrc::launch_resources:
    return "launch_resources";
  case GpuErrc::invalid_argument:
    return "invalid_argument";
  case GpuErrc::illegal_address:
    return "illegal_address";
  case GpuErrc::kernel_fault:
    return "kernel_fault";
  case GpuErrc::launch_timeout:
    return "launch_timeout";
  case GpuErrc::other:
    return "other";
  }
  return "other";
}

GpuErrc classify(CuResult r) {
  switch (r) {
  case cu::stub_library:
  case cu::insufficient_driver:
  case cu::not_initialized:
  case cu::deinitialized:
  case cu::system_driver_mismatch:
    return GpuErrc::no_driver;
  case cu::no_device:
  case cu::invalid_device:
    return GpuErrc::no_device;
  case cu::out_of_memory:
    return GpuErrc::out_of_memory;
  case cu::invalid_image:
  case cu::invalid_ptx:
  case cu::unsupported_ptx_version:
  case cu::no_binary_for_gpu:
  case cu::jit_compiler_not_found:
    return GpuErrc::invalid_program;
  case cu::not_found:
    return GpuErrc::not_found;
  case cu::launch_out_of_resources:
    return GpuErrc::launch_resources;
  case cu::invalid_value:
    return GpuErrc::invalid_argument;
  case cu::illegal_address:
    return GpuErrc::illegal_address;
  case cu::hardware_stack_error:
  case cu::illegal_instruction:
  case cu::misaligned_address:
  case cu::invalid_address_space:
  case cu::invalid_pc:
  case cu::launch_failed:
    return GpuErrc::kernel_fault;
  case cu::launch_timeout:
    return GpuErrc::launch_timeout;
  default:
    return GpuErrc::other;
  }
}

bool loses_context(GpuErrc e) {
  return e == GpuErrc::illegal_address || e == GpuErrc::kernel_fault ||
         e == GpuErrc::launch_timeout;
}

fdo::Errc errc_of(GpuErrc e) {
  switch (e) {
  case GpuErrc::no_driver:
  case GpuErrc::no_device:
    return Errc::unsupported;
  case GpuErrc::out_of_memory:
    return Errc::resource_exhausted;
  case GpuErrc::invalid_program:
    return Errc::compile;
  case GpuErrc::not_found:
    return Errc::not_found;
  case GpuErrc::launch_resources:
  case GpuErrc::invalid_argument:
    return Errc::invalid_argument;
  case GpuErrc::illegal_address:
  case GpuErrc::kernel_fault:
    return Errc::crashed;
  case GpuErrc::launch_timeout:
    return Errc::timeout;
  case GpuErrc::other:
    return Errc::internal;
  }
  return Errc::internal;
}

Error driver_error(Driver& driver, std::string_view call, CuResult result) {
  const char* name = driver.error_name(result);
  const char* text = driver.error_string(result);
  std::string msg = std::string(call) + ": " + (name != nullptr ? name : "CUDA error") + " (" +
                    std::to_string(result) + ")";
  if (text != nullptr) msg += ": " + std::string(text);
  return Error(errc_of(classify(result)), std::move(msg));
}

} // namespace fdo::gpu
