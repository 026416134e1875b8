// A fake NVIDIA driver behind fdo's seam (gpu/driver.h), for hosts without a
// GPU: "device memory" is host memory at fake device addresses, a module is
// PTX text whose `.entry NAME` lines name its kernels, and a kernel is a host
// function registered under its name that reads its parameters as the real
// driver passes them (an array of pointers to each value). Like the real
// driver, a kernel fault is sticky: every later call fails with it.
#pragma once

#include "fdo/gpu/driver.h"

#include <cstring>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

namespace fdo::gpu::test {

class FakeDriver;

// What a fake kernel sees of its launch.
struct FakeLaunch {
  FakeDriver& driver;
  unsigned grid[3];
  unsigned block[3];
  void** params;
  template <class T> T param(std::size_t i) const {
    T v;
    std::memcpy(&v, params[i], sizeof v);
    return v;
  }
  // The host bytes behind a device pointer parameter (nullptr: not allocated).
  template <class T> T* memory(std::size_t i) const;
};

// What a fake kernel did: finished in `ms`, faulted, or never ends.
struct FakeOutcome {
  CuResult fault = cu::success;
  float ms = 0.5f;
  bool hangs = false;
};

using FakeKernel = std::function<FakeOutcome(const FakeLaunch&)>;

class FakeDriver final : public Driver {
public:
  // Facts the fake reports.
  CuResult init_result = cu::success;
  int version = 12040;
  int devices = 1;
  int major = 9, minor = 0;
  std::size_t total_mem = std::size_t{80} << 30;
  std::size_t free_mem = std::size_t{1} << 30; // what mem_alloc can hand out in all
  int kernel_max_threads = 1024;
  int kernel_registers = 32;
  // Kernel times of modules whose PTX gives launch bounds (.maxntid) are
  // scaled by this: a launch-bound trial's candidate is this much faster (< 1)
  // or slower (> 1) than the build without them.
  float bounded_factor = 1.0f;
  // And by this on top when the PTX also caps registers (.minnctapersm).
  float capped_factor = 1.0f;
  std::map<std::string, FakeKernel> kernels;
  // The cubin link_cubin returns for PTX (the fake's "SASS").
  static std::string cubin_of(const std::string& ptx) { return "FAKECUBIN\n" + ptx; }

  // Observations.
  int launches = 0;
  int module_loads = 0;
  int live_modules = 0;
  int retained_contexts = 0;
  // Calls that would block on a real GPU while a kernel never ends.
  int waits_on_running_kernel = 0;
  std::size_t live_bytes() const {
    std::size_t n = 0;
    for (const auto& [p, m] : memory_)
      n += m.size();
    return n;
  }

  std::vector<char>* find(CuDevicePtr p) {
    auto it = memory_.find(p);
    return it == memory_.end() ? nullptr : &it->second;
  }

  CuResult init(unsigned) override { return init_result; }
  CuResult driver_get_version(int* v) override {
    *v = version;
    return cu::success;
  }
  CuResult device_get_count(int* n) override {
    *n = devices;
    return sticky();
  }
  CuResult device_get(CuDevice* d, int ordinal) override {
    if (ordinal < 0 || ordinal >= devices) return cu::invalid_device;
    *d = ordinal;
    return cu::success;
  }
  CuResult device_get_name(char* name, int len, CuDevice d) override {
    std::snprintf(name, static_cast<std::size_t>(len), "Fake GPU %d", d);
    return cu::success;
  }
  CuResult device_get_attribute(int* v, int a, CuDevice) override {
    switch (a) {
    case cu::attr_compute_capability_major:
      *v = major;
      break;
    case cu::attr_compute_capability_minor:
      *v = minor;
      break;
    case cu::attr_multiprocessor_count:
      *v = 132;
      break;
    case cu::attr_max_threads_per_block:
      *v = 1024;
      break;
    case cu::attr_max_shared_memory_per_block:
      *v = 48 * 1024;
      break;
    default:
      return cu::invalid_value;
    }
    return cu::success;
  }
  CuResult device_total_mem(std::size_t* b, CuDevice) override {
    *b = total_mem;
    return cu::success;
  }
  CuResult primary_ctx_retain(CuContext* c, CuDevice) override {
    ++retained_contexts;
    *c = reinterpret_cast<CuContext>(this);
    return cu::success;
  }
  CuResult primary_ctx_release(CuDevice) override {
    if (hanging_) ++waits_on_running_kernel;
    --retained_contexts;
    return cu::success;
  }
  CuResult ctx_set_current(CuContext) override { return cu::success; }
  CuResult ctx_synchronize() override { return sticky(); }
  CuResult module_load_data_ex(CuModule* m, const void* image, unsigned n, int* options,
                               void** values) override {
    if (CuResult r = sticky(); r != cu::success) return r;
    const std::string text(static_cast<const char*>(image));
    std::string body = text.rfind("FAKECUBIN\n", 0) == 0 ? text.substr(10) : text;
    if (body.find(".version") == std::string::npos) {
      write_log(n, options, values, cu::jit_error_log_buffer,
                "ptxas fatal   : fake: no .version directive");
      return cu::invalid_ptx;
    }
    std::set<std::string> entries;
    static const std::regex entry(R"(\.entry\s+([A-Za-z_][A-Za-z0-9_$]*))");
    for (auto it = std::sregex_iterator(body.begin(), body.end(), entry);
         it != std::sregex_iterator(); ++it)
      entries.insert((*it)[1].str());
    write_log(n, options, values, cu::jit_info_log_buffer, "ptxas info    : fake: compiled");
    modules_.push_back(std::move(entries));
    float factor = body.find(".maxntid") != std::string::npos ? bounded_factor : 1.0f;
    if (body.find(".minnctapersm") != std::string::npos) factor *= capped_factor;
    module_factor_.push_back(factor);
    *m = reinterpret_cast<CuModule>(modules_.size());
    ++module_loads;
    ++live_modules;
    return cu::success;
  }
  CuResult module_unload(CuModule) override {
    if (hanging_) ++waits_on_running_kernel;
    --live_modules;
    return cu::success;
  }
  CuResult module_get_function(CuFunction* f, CuModule m, const char* name) override {
    if (CuResult r = sticky(); r != cu::success) return r;
    const auto& entries = modules_.at(reinterpret_cast<std::size_t>(m) - 1);
    if (!entries.count(name) || !kernels.count(name)) return cu::not_found;
    functions_.push_back(name);
    function_factor_.push_back(module_factor_.at(reinterpret_cast<std::size_t>(m) - 1));
    *f = reinterpret_cast<CuFunction>(functions_.size());
    return cu::success;
  }
  CuResult func_get_attribute(int* v, int a, CuFunction) override {
    switch (a) {
    case cu::func_num_regs:
      *v = kernel_registers;
      break;
    case cu::func_max_threads_per_block:
      *v = kernel_max_threads;
      break;
    default:
      *v = 0;
    }
    return sticky();
  }
  CuResult mem_alloc(CuDevicePtr* p, std::size_t n) override {
    if (CuResult r = sticky(); r != cu::success) return r;
    if (n > free_mem - std::min(free_mem, live_bytes())) return cu::out_of_memory;
    next_ += (n + 255) / 256 * 256 + 256;
    *p = next_;
    memory_[next_].assign(n, 0);
    return cu::success;
  }
  CuResult mem_free(CuDevicePtr p) override {
    if (hanging_) ++waits_on_running_kernel;
    memory_.erase(p);
    return cu::success;
  }
  CuResult memcpy_htod(CuDevicePtr d, const void* s, std::size_t n) override {
    if (CuResult r = sticky(); r != cu::success) return r;
    std::vector<char>* m = find(d);
    if (m == nullptr || m->size() < n) return cu::invalid_value;
    std::memcpy(m->data(), s, n);
    return cu::success;
  }
  CuResult memcpy_dtoh(void* d, CuDevicePtr s, std::size_t n) override {
    if (CuResult r = sticky(); r != cu::success) return r;
    std::vector<char>* m = find(s);
    if (m == nullptr || m->size() < n) return cu::invalid_value;
    std::memcpy(d, m->data(), n);
    return cu::success;
  }
  CuResult launch_kernel(CuFunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                         unsigned by, unsigned bz, unsigned, CuStream, void** params,
                         void**) override {
    if (CuResult r = sticky(); r != cu::success) return r;
    if (std::uint64_t{bx} * by * bz > static_cast<std::uint64_t>(kernel_max_threads))
      return cu::launch_out_of_resources;
    ++launches;
    const std::string& name = functions_.at(reinterpret_cast<std::size_t>(f) - 1);
    FakeLaunch launch{*this, {gx, gy, gz}, {bx, by, bz}, params};
    FakeOutcome out = kernels.at(name)(launch);
    pending_fault_ = out.fault;
    hanging_ = out.hangs;
    last_ms_ = out.ms * function_factor_.at(reinterpret_cast<std::size_t>(f) - 1);
    return cu::success; // faults surface at the next synchronising call, as on a GPU
  }
  CuResult event_create(CuEvent* e, unsigned) override {
    *e = reinterpret_cast<CuEvent>(++events_);
    return cu::success;
  }
  CuResult event_record(CuEvent, CuStream) override { return sticky(); }
  CuResult event_query(CuEvent) override {
    if (pending_fault_ != cu::success) {
      fault_ = pending_fault_;
      pending_fault_ = cu::success;
    }
    if (CuResult r = sticky(); r != cu::success) return r;
    return hanging_ ? cu::not_ready : cu::success;
  }
  CuResult event_synchronize(CuEvent e) override { return event_query(e); }
  CuResult event_elapsed_time(float* ms, CuEvent, CuEvent) override {
    *ms = last_ms_;
    return sticky();
  }
  CuResult event_destroy(CuEvent) override { return cu::success; }
  CuResult link_create(unsigned, int*, void**, CuLinkState* s) override {
    *s = reinterpret_cast<CuLinkState>(1);
    link_input_.clear();
    return sticky();
  }
  CuResult link_add_data(CuLinkState, int type, void* data, std::size_t size, const char*, unsigned,
                         int*, void**) override {
    if (type != cu::jit_input_ptx) return cu::invalid_value;
    link_input_.assign(static_cast<const char*>(data),
                       strnlen(static_cast<const char*>(data), size));
    return link_input_.find(".version") == std::string::npos ? cu::invalid_ptx : cu::success;
  }
  CuResult link_complete(CuLinkState, void** cubin, std::size_t* size) override {
    link_output_ = cubin_of(link_input_);
    *cubin = link_output_.data();
    *size = link_output_.size();
    return cu::success;
  }
  CuResult link_destroy(CuLinkState) override {
    link_output_ = "destroyed"; // what a caller still pointing at it would read
    return cu::success;
  }
  const char* error_name(CuResult r) override {
    switch (r) {
    case cu::out_of_memory:
      return "CUDA_ERROR_OUT_OF_MEMORY";
    case cu::no_device:
      return "CUDA_ERROR_NO_DEVICE";
    case cu::illegal_address:
      return "CUDA_ERROR_ILLEGAL_ADDRESS";
    case cu::invalid_ptx:
      return "CUDA_ERROR_INVALID_PTX";
    case cu::not_found:
      return "CUDA_ERROR_NOT_FOUND";
    case cu::launch_out_of_resources:
      return "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES";
    case cu::stub_library:
      return "CUDA_ERROR_STUB_LIBRARY";
    default:
      return nullptr;
    }
  }
  const char* error_string(CuResult r) override {
    return r == cu::illegal_address ? "an illegal memory access was encountered" : nullptr;
  }

private:
  CuResult sticky() const { return fault_; }
  static void write_log(unsigned n, int* options, void** values, int which, const char* text) {
    for (unsigned i = 0; i < n; ++i)
      if (options[i] == which) {
        std::size_t cap = 0;
        for (unsigned k = 0; k < n; ++k)
          if (options[k] == which + 1) cap = reinterpret_cast<std::size_t>(values[k]);
        std::snprintf(static_cast<char*>(values[i]), cap, "%s", text);
      }
  }

  std::map<CuDevicePtr, std::vector<char>> memory_;
  CuDevicePtr next_ = 0x7f0000000000;
  std::vector<std::set<std::string>> modules_;
  std::vector<std::string> functions_;
  std::vector<float> module_factor_, function_factor_; // kernel time factors
  CuResult fault_ = cu::success, pending_fault_ = cu::success;
  bool hanging_ = false;
  float last_ms_ = 0;
  std::size_t events_ = 0;
  std::string link_input_, link_output_;
};

template <class T> T* FakeLaunch::memory(std::size_t i) const {
  std::vector<char>* m = driver.find(param<CuDevicePtr>(i));
  return m == nullptr ? nullptr : reinterpret_cast<T*>(m->data());
}

} // namespace fdo::gpu::test
