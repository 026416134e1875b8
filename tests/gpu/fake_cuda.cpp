// libfdo_fake_cuda.so: the fake driver (fake_driver.h) behind the NVIDIA
// driver API's C entry points, so that a real fdod and its GPU workers can be
// tested end to end on a host without a GPU (gpu_driver = this library). It
// runs the test kernels (tests/jit/fixtures/gpu_kernels.cu,
// tests/e2e/fixtures/gpu_faults.ll) as host functions with the same results.
// Configured from the environment the workers inherit:
//   FDO_FAKE_CUDA_SM (90), FDO_FAKE_CUDA_DRIVER (12040), FDO_FAKE_CUDA_DEVICES (1),
//   FDO_FAKE_CUDA_FREE_BYTES (1 GiB: what allocations may take in all),
//   FDO_FAKE_CUDA_BOUNDED_PERCENT (100: kernel time of modules compiled with
//   launch bounds, in percent of the time without), FDO_FAKE_CUDA_CAPPED_PERCENT
//   (100: on top, for bounds that also cap registers, .minnctapersm).
// A driver keeps process-wide state; so does this fake (one per process).
#include "fake_driver.h"

#include <cstdlib>
#include <string>

using namespace fdo::gpu;
using fdo::gpu::test::FakeDriver;
using fdo::gpu::test::FakeLaunch;
using fdo::gpu::test::FakeOutcome;

namespace {

long env_number(const char* name, long fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::strtol(v, nullptr, 10) : fallback;
}

unsigned threads_of(const FakeLaunch& l) {
  return l.grid[0] * l.grid[1] * l.grid[2] * l.block[0] * l.block[1] * l.block[2];
}

FakeOutcome saxpy(const FakeLaunch& l) {
  const int n = l.param<int>(0);
  const float a = l.param<float>(1);
  const float* x = l.memory<float>(2);
  float* y = l.memory<float>(3);
  if (n > 0 && (x == nullptr || y == nullptr)) return {cu::illegal_address};
  for (int i = 0; i < n; ++i)
    y[i] = a * x[i] + y[i];
  return {cu::success, 0.001f * static_cast<float>(n) / 1e4f + 1e3f / threads_of(l)};
}

FakeOutcome reduce_sum(const FakeLaunch& l) {
  const int n = l.param<int>(0);
  const float* x = l.memory<float>(1);
  float* out = l.memory<float>(2);
  if (x == nullptr || out == nullptr) return {cu::illegal_address};
  const long blocks = l.grid[0], threads = long{l.grid[0]} * l.block[0];
  for (long b = 0; b < blocks; ++b) {
    float s = 0;
    for (long t = b * l.block[0]; t < (b + 1) * l.block[0]; ++t)
      for (long i = t; i < n; i += threads)
        s += x[i];
    out[b] = s;
  }
  return {cu::success, 0.05f + 1e3f / static_cast<float>(threads)};
}

FakeOutcome matmul_tiled(const FakeLaunch& l) {
  const int n = l.param<int>(0);
  const float* a = l.memory<float>(1);
  const float* b = l.memory<float>(2);
  float* c = l.memory<float>(3);
  if (a == nullptr || b == nullptr || c == nullptr) return {cu::illegal_address};
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      float acc = 0;
      for (int k = 0; k < n; ++k)
        acc += a[i * n + k] * b[k * n + j];
      c[i * n + j] = acc;
    }
  return {cu::success, 0.2f};
}

FakeDriver& fake() {
  static FakeDriver* d = [] {
    auto* f = new FakeDriver;
    const long sm = env_number("FDO_FAKE_CUDA_SM", 90);
    f->major = static_cast<int>(sm / 10);
    f->minor = static_cast<int>(sm % 10);
    f->version = static_cast<int>(env_number("FDO_FAKE_CUDA_DRIVER", 12040));
    f->devices = static_cast<int>(env_number("FDO_FAKE_CUDA_DEVICES", 1));
    f->free_mem = static_cast<std::size_t>(env_number("FDO_FAKE_CUDA_FREE_BYTES", 1L << 30));
    f->bounded_factor = static_cast<float>(env_number("FDO_FAKE_CUDA_BOUNDED_PERCENT", 100)) / 100;
    f->capped_factor = static_cast<float>(env_number("FDO_FAKE_CUDA_CAPPED_PERCENT", 100)) / 100;
    f->kernels["saxpy"] = saxpy;
    f->kernels["reduce_sum"] = reduce_sum;
    f->kernels["matmul_tiled"] = matmul_tiled;
    f->kernels["wild_store"] = [](const FakeLaunch&) { return FakeOutcome{cu::illegal_address}; };
    f->kernels["spin_forever"] = [](const FakeLaunch&) {
      FakeOutcome o;
      o.hangs = true;
      return o;
    };
    return f;
  }();
  return *d;
}

} // namespace

#define FDO_FAKE_API extern "C" __attribute__((visibility("default"))) CuResult

FDO_FAKE_API cuInit(unsigned flags) {
  return fake().init(flags);
}
FDO_FAKE_API cuDriverGetVersion(int* v) {
  return fake().driver_get_version(v);
}
FDO_FAKE_API cuDeviceGetCount(int* n) {
  return fake().device_get_count(n);
}
FDO_FAKE_API cuDeviceGet(CuDevice* d, int ordinal) {
  return fake().device_get(d, ordinal);
}
FDO_FAKE_API cuDeviceGetName(char* name, int len, CuDevice d) {
  return fake().device_get_name(name, len, d);
}
FDO_FAKE_API cuDeviceGetAttribute(int* v, int a, CuDevice d) {
  return fake().device_get_attribute(v, a, d);
}
FDO_FAKE_API cuDeviceTotalMem_v2(std::size_t* b, CuDevice d) {
  return fake().device_total_mem(b, d);
}
FDO_FAKE_API cuDevicePrimaryCtxRetain(CuContext* c, CuDevice d) {
  return fake().primary_ctx_retain(c, d);
}
FDO_FAKE_API cuDevicePrimaryCtxRelease_v2(CuDevice d) {
  return fake().primary_ctx_release(d);
}
FDO_FAKE_API cuCtxSetCurrent(CuContext c) {
  return fake().ctx_set_current(c);
}
FDO_FAKE_API cuCtxSynchronize() {
  return fake().ctx_synchronize();
}
FDO_FAKE_API cuModuleLoadDataEx(CuModule* m, const void* image, unsigned n, int* o, void** v) {
  return fake().module_load_data_ex(m, image, n, o, v);
}
FDO_FAKE_API cuModuleUnload(CuModule m) {
  return fake().module_unload(m);
}
FDO_FAKE_API cuModuleGetFunction(CuFunction* f, CuModule m, const char* name) {
  return fake().module_get_function(f, m, name);
}
FDO_FAKE_API cuFuncGetAttribute(int* v, int a, CuFunction f) {
  return fake().func_get_attribute(v, a, f);
}
FDO_FAKE_API cuMemAlloc_v2(CuDevicePtr* p, std::size_t n) {
  return fake().mem_alloc(p, n);
}
FDO_FAKE_API cuMemFree_v2(CuDevicePtr p) {
  return fake().mem_free(p);
}
FDO_FAKE_API cuMemcpyHtoD_v2(CuDevicePtr d, const void* s, std::size_t n) {
  return fake().memcpy_htod(d, s, n);
}
FDO_FAKE_API cuMemcpyDtoH_v2(void* d, CuDevicePtr s, std::size_t n) {
  return fake().memcpy_dtoh(d, s, n);
}
FDO_FAKE_API cuLaunchKernel(CuFunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                            unsigned by, unsigned bz, unsigned shared, CuStream s, void** params,
                            void** extra) {
  return fake().launch_kernel(f, gx, gy, gz, bx, by, bz, shared, s, params, extra);
}
FDO_FAKE_API cuEventCreate(CuEvent* e, unsigned flags) {
  return fake().event_create(e, flags);
}
FDO_FAKE_API cuEventRecord(CuEvent e, CuStream s) {
  return fake().event_record(e, s);
}
FDO_FAKE_API cuEventQuery(CuEvent e) {
  return fake().event_query(e);
}
FDO_FAKE_API cuEventSynchronize(CuEvent e) {
  return fake().event_synchronize(e);
}
FDO_FAKE_API cuEventElapsedTime_v2(float* ms, CuEvent a, CuEvent b) {
  return fake().event_elapsed_time(ms, a, b);
}
FDO_FAKE_API cuEventDestroy_v2(CuEvent e) {
  return fake().event_destroy(e);
}
FDO_FAKE_API cuLinkCreate_v2(unsigned n, int* o, void** v, CuLinkState* s) {
  return fake().link_create(n, o, v, s);
}
FDO_FAKE_API cuLinkAddData_v2(CuLinkState s, int type, void* data, std::size_t size,
                              const char* name, unsigned n, int* o, void** v) {
  return fake().link_add_data(s, type, data, size, name, n, o, v);
}
FDO_FAKE_API cuLinkComplete(CuLinkState s, void** cubin, std::size_t* size) {
  return fake().link_complete(s, cubin, size);
}
FDO_FAKE_API cuLinkDestroy(CuLinkState s) {
  return fake().link_destroy(s);
}
FDO_FAKE_API cuGetErrorName(CuResult r, const char** s) {
  *s = fake().error_name(r);
  return *s != nullptr ? cu::success : cu::invalid_value;
}
FDO_FAKE_API cuGetErrorString(CuResult r, const char** s) {
  *s = fake().error_string(r);
  return *s != nullptr ? cu::success : cu::invalid_value;
}
