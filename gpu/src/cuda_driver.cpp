// The real driver: libcuda.so.1 loaded with dlopen, its entry points bound
// once. Nothing here runs unless a GPU host asks for it.
#include "fdo/gpu/driver.h"

#include <dlfcn.h>

namespace fdo::gpu {

namespace {

// Owns a dlopen handle.
class Library {
public:
  explicit Library(void* handle) : handle_(handle) {}
  ~Library() {
    if (handle_ != nullptr) dlclose(handle_);
  }
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;
  void* get() const { return handle_; }

private:
  void* handle_;
};

class CudaDriver final : public Driver {
public:
  explicit CudaDriver(std::unique_ptr<Library> lib) : lib_(std::move(lib)) {}

  // Binds every entry point; the first missing one is named.
  Status bind() {
    FDO_TRY_STATUS(sym(init_, "cuInit"));
    FDO_TRY_STATUS(sym(driver_get_version_, "cuDriverGetVersion"));
    FDO_TRY_STATUS(sym(device_get_count_, "cuDeviceGetCount"));
    FDO_TRY_STATUS(sym(device_get_, "cuDeviceGet"));
    FDO_TRY_STATUS(sym(device_get_name_, "cuDeviceGetName"));
    FDO_TRY_STATUS(sym(device_get_attribute_, "cuDeviceGetAttribute"));
    FDO_TRY_STATUS(sym(device_total_mem_, "cuDeviceTotalMem_v2"));
    FDO_TRY_STATUS(sym(primary_ctx_retain_, "cuDevicePrimaryCtxRetain"));
    FDO_TRY_STATUS(sym(primary_ctx_release_, "cuDevicePrimaryCtxRelease_v2"));
    FDO_TRY_STATUS(sym(ctx_set_current_, "cuCtxSetCurrent"));
    FDO_TRY_STATUS(sym(ctx_synchronize_, "cuCtxSynchronize"));
    FDO_TRY_STATUS(sym(module_load_data_ex_, "cuModuleLoadDataEx"));
    FDO_TRY_STATUS(sym(module_unload_, "cuModuleUnload"));
    FDO_TRY_STATUS(sym(module_get_function_, "cuModuleGetFunction"));
    FDO_TRY_STATUS(sym(func_get_attribute_, "cuFuncGetAttribute"));
    FDO_TRY_STATUS(sym(mem_alloc_, "cuMemAlloc_v2"));
    FDO_TRY_STATUS(sym(mem_free_, "cuMemFree_v2"));
    FDO_TRY_STATUS(sym(memcpy_htod_, "cuMemcpyHtoD_v2"));
    FDO_TRY_STATUS(sym(memcpy_dtoh_, "cuMemcpyDtoH_v2"));
    FDO_TRY_STATUS(sym(launch_kernel_, "cuLaunchKernel"));
    FDO_TRY_STATUS(sym(event_create_, "cuEventCreate"));
    FDO_TRY_STATUS(sym(event_record_, "cuEventRecord"));
    FDO_TRY_STATUS(sym(event_query_, "cuEventQuery"));
    FDO_TRY_STATUS(sym(event_synchronize_, "cuEventSynchronize"));
    // CUDA 12.8 added the _v2 (defined on events of any flags); older
    // drivers have only the first.
    if (!sym(event_elapsed_time_, "cuEventElapsedTime_v2"))
      FDO_TRY_STATUS(sym(event_elapsed_time_, "cuEventElapsedTime"));
    FDO_TRY_STATUS(sym(event_destroy_, "cuEventDestroy_v2"));
    FDO_TRY_STATUS(sym(link_create_, "cuLinkCreate_v2"));
    FDO_TRY_STATUS(sym(link_add_data_, "cuLinkAddData_v2"));
    FDO_TRY_STATUS(sym(link_complete_, "cuLinkComplete"));
    FDO_TRY_STATUS(sym(link_destroy_, "cuLinkDestroy"));
    FDO_TRY_STATUS(sym(get_error_name_, "cuGetErrorName"));
    FDO_TRY_STATUS(sym(get_error_string_, "cuGetErrorString"));
    return ok();
  }

  CuResult init(unsigned flags) override { return init_(flags); }
  CuResult driver_get_version(int* v) override { return driver_get_version_(v); }
  CuResult device_get_count(int* n) override { return device_get_count_(n); }
  CuResult device_get(CuDevice* d, int ordinal) override { return device_get_(d, ordinal); }
  CuResult device_get_name(char* name, int len, CuDevice d) override {
    return device_get_name_(name, len, d);
  }
  CuResult device_get_attribute(int* v, int a, CuDevice d) override {
    return device_get_attribute_(v, a, d);
  }
  CuResult device_total_mem(std::size_t* b, CuDevice d) override { return device_total_mem_(b, d); }
  CuResult primary_ctx_retain(CuContext* c, CuDevice d) override {
    return primary_ctx_retain_(c, d);
  }
  CuResult primary_ctx_release(CuDevice d) override { return primary_ctx_release_(d); }
  CuResult ctx_set_current(CuContext c) override { return ctx_set_current_(c); }
  CuResult ctx_synchronize() override { return ctx_synchronize_(); }
  CuResult module_load_data_ex(CuModule* m, const void* image, unsigned n, int* options,
                               void** values) override {
    return module_load_data_ex_(m, image, n, options, values);
  }
  CuResult module_unload(CuModule m) override { return module_unload_(m); }
  CuResult module_get_function(CuFunction* f, CuModule m, const char* name) override {
    return module_get_function_(f, m, name);
  }
  CuResult func_get_attribute(int* v, int a, CuFunction f) override {
    return func_get_attribute_(v, a, f);
  }
  CuResult mem_alloc(CuDevicePtr* p, std::size_t n) override { return mem_alloc_(p, n); }
  CuResult mem_free(CuDevicePtr p) override { return mem_free_(p); }
  CuResult memcpy_htod(CuDevicePtr d, const void* s, std::size_t n) override {
    return memcpy_htod_(d, s, n);
  }
  CuResult memcpy_dtoh(void* d, CuDevicePtr s, std::size_t n) override {
    return memcpy_dtoh_(d, s, n);
  }
  CuResult launch_kernel(CuFunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                         unsigned by, unsigned bz, unsigned shared, CuStream s, void** params,
                         void** extra) override {
    return launch_kernel_(f, gx, gy, gz, bx, by, bz, shared, s, params, extra);
  }
  CuResult event_create(CuEvent* e, unsigned flags) override { return event_create_(e, flags); }
  CuResult event_record(CuEvent e, CuStream s) override { return event_record_(e, s); }
  CuResult event_query(CuEvent e) override { return event_query_(e); }
  CuResult event_synchronize(CuEvent e) override { return event_synchronize_(e); }
  CuResult event_elapsed_time(float* ms, CuEvent a, CuEvent b) override {
    return event_elapsed_time_(ms, a, b);
  }
  CuResult event_destroy(CuEvent e) override { return event_destroy_(e); }
  CuResult link_create(unsigned n, int* o, void** v, CuLinkState* s) override {
    return link_create_(n, o, v, s);
  }
  CuResult link_add_data(CuLinkState s, int type, void* data, std::size_t size, const char* name,
                         unsigned n, int* o, void** v) override {
    return link_add_data_(s, type, data, size, name, n, o, v);
  }
  CuResult link_complete(CuLinkState s, void** cubin, std::size_t* size) override {
    return link_complete_(s, cubin, size);
  }
  CuResult link_destroy(CuLinkState s) override { return link_destroy_(s); }
  const char* error_name(CuResult r) override {
    const char* s = nullptr;
    return get_error_name_(r, &s) == cu::success ? s : nullptr;
  }
  const char* error_string(CuResult r) override {
    const char* s = nullptr;
    return get_error_string_(r, &s) == cu::success ? s : nullptr;
  }

private:
  template <class F> Status sym(F*& out, const char* name) {
    void* p = dlsym(lib_->get(), name);
    if (p == nullptr)
      return make_error(Errc::unsupported, std::string("the NVIDIA driver library lacks ") + name +
                                               " (a driver older than CUDA 11?)");
    out = reinterpret_cast<F*>(p);
    return ok();
  }

  std::unique_ptr<Library> lib_;
  CuResult (*init_)(unsigned) = nullptr;
  CuResult (*driver_get_version_)(int*) = nullptr;
  CuResult (*device_get_count_)(int*) = nullptr;
  CuResult (*device_get_)(CuDevice*, int) = nullptr;
  CuResult (*device_get_name_)(char*, int, CuDevice) = nullptr;
  CuResult (*device_get_attribute_)(int*, int, CuDevice) = nullptr;
  CuResult (*device_total_mem_)(std::size_t*, CuDevice) = nullptr;
  CuResult (*primary_ctx_retain_)(CuContext*, CuDevice) = nullptr;
  CuResult (*primary_ctx_release_)(CuDevice) = nullptr;
  CuResult (*ctx_set_current_)(CuContext) = nullptr;
  CuResult (*ctx_synchronize_)() = nullptr;
  CuResult (*module_load_data_ex_)(CuModule*, const void*, unsigned, int*, void**) = nullptr;
  CuResult (*module_unload_)(CuModule) = nullptr;
  CuResult (*module_get_function_)(CuFunction*, CuModule, const char*) = nullptr;
  CuResult (*func_get_attribute_)(int*, int, CuFunction) = nullptr;
  CuResult (*mem_alloc_)(CuDevicePtr*, std::size_t) = nullptr;
  CuResult (*mem_free_)(CuDevicePtr) = nullptr;
  CuResult (*memcpy_htod_)(CuDevicePtr, const void*, std::size_t) = nullptr;
  CuResult (*memcpy_dtoh_)(void*, CuDevicePtr, std::size_t) = nullptr;
  CuResult (*launch_kernel_)(CuFunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, CuStream, void**, void**) = nullptr;
  CuResult (*event_create_)(CuEvent*, unsigned) = nullptr;
  CuResult (*event_record_)(CuEvent, CuStream) = nullptr;
  CuResult (*event_query_)(CuEvent) = nullptr;
  CuResult (*event_synchronize_)(CuEvent) = nullptr;
  CuResult (*event_elapsed_time_)(float*, CuEvent, CuEvent) = nullptr;
  CuResult (*event_destroy_)(CuEvent) = nullptr;
  CuResult (*link_create_)(unsigned, int*, void**, CuLinkState*) = nullptr;
  CuResult (*link_add_data_)(CuLinkState, int, void*, std::size_t, const char*, unsigned, int*,
                             void**) = nullptr;
  CuResult (*link_complete_)(CuLinkState, void**, std::size_t*) = nullptr;
  CuResult (*link_destroy_)(CuLinkState) = nullptr;
  CuResult (*get_error_name_)(CuResult, const char**) = nullptr;
  CuResult (*get_error_string_)(CuResult, const char**) = nullptr;
};

} // namespace

Expected<std::unique_ptr<Driver>> load_cuda_driver(const std::string& path) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return make_error(Errc::unsupported, "no NVIDIA driver: cannot load " + path + ": " +
                                             (why != nullptr ? why : "unknown error"));
  }
  auto driver = std::make_unique<CudaDriver>(std::make_unique<Library>(handle));
  FDO_TRY_STATUS(driver->bind());
  return std::unique_ptr<Driver>(std::move(driver));
}

} // namespace fdo::gpu
