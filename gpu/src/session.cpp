// A process's session on one GPU (session.h).
#include "fdo/gpu/session.h"

#include <cstring>
#include <thread>

namespace fdo::gpu {

namespace {

using Clock = std::chrono::steady_clock;

std::uint64_t nanos_since(Clock::time_point t) {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t).count());
}

Expected<GpuInfo> device_info(Driver& d, int ordinal, int driver_version) {
  GpuInfo info;
  info.ordinal = ordinal;
  info.driver_version = driver_version;
  CuDevice dev = 0;
  if (CuResult r = d.device_get(&dev, ordinal); r != cu::success)
    return driver_error(d, "cuDeviceGet", r);
  char name[256] = {};
  if (CuResult r = d.device_get_name(name, sizeof name - 1, dev); r != cu::success)
    return driver_error(d, "cuDeviceGetName", r);
  info.name = name;
  int major = 0, minor = 0;
  struct Attr {
    int id;
    int* out;
  };
  for (Attr a : {Attr{cu::attr_compute_capability_major, &major},
                 Attr{cu::attr_compute_capability_minor, &minor},
                 Attr{cu::attr_multiprocessor_count, &info.multiprocessors},
                 Attr{cu::attr_max_threads_per_block, &info.max_threads_per_block},
                 Attr{cu::attr_max_shared_memory_per_block, &info.max_shared_bytes_per_block}})
    if (CuResult r = d.device_get_attribute(a.out, a.id, dev); r != cu::success)
      return driver_error(d, "cuDeviceGetAttribute", r);
  info.sm = major * 10 + minor;
  std::size_t bytes = 0;
  if (CuResult r = d.device_total_mem(&bytes, dev); r != cu::success)
    return driver_error(d, "cuDeviceTotalMem", r);
  info.memory_bytes = bytes;
  return info;
}

Expected<int> init_driver(Driver& d) {
  if (CuResult r = d.init(0); r != cu::success) {
    Error e = driver_error(d, "cuInit", r);
    return Error(e.code(), "the NVIDIA driver cannot start: " + e.message());
  }
  int version = 0;
  if (CuResult r = d.driver_get_version(&version); r != cu::success)
    return driver_error(d, "cuDriverGetVersion", r);
  return version;
}

class Event {
public:
  explicit Event(Driver& d) : d_(d) {}
  ~Event() {
    if (e_ != nullptr) d_.event_destroy(e_);
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  CuEvent* out() { return &e_; }
  CuEvent get() const { return e_; }

private:
  Driver& d_;
  CuEvent e_ = nullptr;
};

class LinkState {
public:
  explicit LinkState(Driver& d) : d_(d) {}
  ~LinkState() {
    if (s_ != nullptr) d_.link_destroy(s_);
  }
  LinkState(const LinkState&) = delete;
  LinkState& operator=(const LinkState&) = delete;
  CuLinkState* out() { return &s_; }
  CuLinkState get() const { return s_; }

private:
  Driver& d_;
  CuLinkState s_ = nullptr;
};

// JIT options asking for the driver's info and error logs.
struct JitLogs {
  static constexpr std::size_t kBytes = 16 * 1024;
  char info[kBytes] = {};
  char error[kBytes] = {};
  int options[4] = {cu::jit_info_log_buffer, cu::jit_info_log_buffer_size_bytes,
                    cu::jit_error_log_buffer, cu::jit_error_log_buffer_size_bytes};
  void* values[4] = {info, reinterpret_cast<void*>(kBytes - 1), error,
                     reinterpret_cast<void*>(kBytes - 1)};
  std::string info_text() const { return std::string(info, strnlen(info, kBytes)); }
  std::string error_text() const { return std::string(error, strnlen(error, kBytes)); }
};

} // namespace

nlohmann::json to_json(const GpuInfo& g) {
  return {{"ordinal", g.ordinal},
          {"name", g.name},
          {"sm", g.sm},
          {"arch", "sm_" + std::to_string(g.sm)},
          {"driver_version", g.driver_version},
          {"memory_bytes", g.memory_bytes},
          {"multiprocessors", g.multiprocessors},
          {"max_threads_per_block", g.max_threads_per_block},
          {"max_shared_bytes_per_block", g.max_shared_bytes_per_block}};
}

Expected<std::vector<GpuInfo>> probe(Driver& d) {
  FDO_TRY(int version, init_driver(d));
  int count = 0;
  if (CuResult r = d.device_get_count(&count); r != cu::success)
    return driver_error(d, "cuDeviceGetCount", r);
  std::vector<GpuInfo> out;
  for (int i = 0; i < count; ++i) {
    FDO_TRY(GpuInfo g, device_info(d, i, version));
    out.push_back(std::move(g));
  }
  return out;
}

KernelArg KernelArg::i32(std::int32_t v) {
  return {Kind::scalar, static_cast<std::uint32_t>(v), 4, 0};
}
KernelArg KernelArg::i64(std::int64_t v) {
  return {Kind::scalar, static_cast<std::uint64_t>(v), 8, 0};
}
KernelArg KernelArg::f32(float v) {
  std::uint32_t bits = 0;
  std::memcpy(&bits, &v, 4);
  return {Kind::scalar, bits, 4, 0};
}
KernelArg KernelArg::f64(double v) {
  std::uint64_t bits = 0;
  std::memcpy(&bits, &v, 8);
  return {Kind::scalar, bits, 8, 0};
}
KernelArg KernelArg::buf(std::uint32_t index) {
  return {Kind::buffer, 0, 8, index};
}

Expected<std::unique_ptr<Session>> Session::open(Driver& d, int ordinal) {
  FDO_TRY(int version, init_driver(d));
  int count = 0;
  if (CuResult r = d.device_get_count(&count); r != cu::success)
    return driver_error(d, "cuDeviceGetCount", r);
  if (ordinal < 0 || ordinal >= count)
    return make_error(Errc::unsupported, "no GPU " + std::to_string(ordinal) +
                                             ": the driver sees " + std::to_string(count));
  FDO_TRY(GpuInfo info, device_info(d, ordinal, version));
  CuDevice dev = 0;
  if (CuResult r = d.device_get(&dev, ordinal); r != cu::success)
    return driver_error(d, "cuDeviceGet", r);
  CuContext ctx = nullptr;
  if (CuResult r = d.primary_ctx_retain(&ctx, dev); r != cu::success)
    return driver_error(d, "cuDevicePrimaryCtxRetain", r);
  // From here the session owns the context reference.
  std::unique_ptr<Session> s(new Session(d, std::move(info), dev, ctx));
  if (CuResult r = d.ctx_set_current(ctx); r != cu::success) return s->fail("cuCtxSetCurrent", r);
  return s;
}

// After a fault or a kernel that never ended, nothing is released: the
// driver would wait for the device (forever, for a kernel still running);
// the process is about to be replaced, and its end frees it all.
Session::~Session() {
  if (!broken_) driver_.primary_ctx_release(device_);
}

Error Session::fail(std::string_view call, CuResult r) {
  const GpuErrc e = classify(r);
  last_error_ = e;
  if (loses_context(e)) broken_ = true;
  return driver_error(driver_, call, r);
}

Status Session::check(std::string_view call, CuResult r) {
  if (r == cu::success) return ok();
  return fail(call, r);
}

Module::~Module() {
  if (!session_.broken_) session_.driver_.module_unload(module_);
}

Expected<std::shared_ptr<Module>> Session::load(std::string_view image, ImageKind kind) {
  if (broken_) return make_error(Errc::unavailable, "the GPU context was lost to an earlier fault");
  // The driver reads PTX as a NUL-terminated string; a cubin by its ELF header.
  std::string owned(image);
  if (kind == ImageKind::ptx && owned.find('\0') != std::string::npos)
    return make_error(Errc::invalid_argument, "PTX text holds a NUL byte");
  JitLogs logs;
  CuModule m = nullptr;
  CuResult r = driver_.module_load_data_ex(&m, owned.c_str(), 4, logs.options, logs.values);
  if (r != cu::success) {
    Error e = fail("cuModuleLoadDataEx", r);
    std::string log = logs.error_text();
    return Error(e.code(), e.message() + (log.empty() ? "" : "\n" + log));
  }
  return std::shared_ptr<Module>(new Module(*this, m, kind, logs.info_text()));
}

Expected<std::string> Session::link_cubin(std::string_view ptx, std::string* info_log) {
  if (broken_) return make_error(Errc::unavailable, "the GPU context was lost to an earlier fault");
  JitLogs logs;
  LinkState state(driver_);
  FDO_TRY_STATUS(
      check("cuLinkCreate", driver_.link_create(4, logs.options, logs.values, state.out())));
  std::string text(ptx);
  CuResult r = driver_.link_add_data(state.get(), cu::jit_input_ptx, text.data(), text.size() + 1,
                                     "fdo.ptx", 0, nullptr, nullptr);
  if (r != cu::success) {
    Error e = fail("cuLinkAddData", r);
    std::string log = logs.error_text();
    return Error(e.code(), e.message() + (log.empty() ? "" : "\n" + log));
  }
  void* cubin = nullptr;
  std::size_t size = 0;
  FDO_TRY_STATUS(check("cuLinkComplete", driver_.link_complete(state.get(), &cubin, &size)));
  if (info_log != nullptr) *info_log = logs.info_text();
  // The cubin belongs to the link state: copied before it is destroyed.
  return std::string(static_cast<const char*>(cubin), size);
}

DeviceBuffers::~DeviceBuffers() {
  if (broken_ != nullptr && *broken_) return;
  for (CuDevicePtr p : pointers_)
    driver_->mem_free(p);
}

DeviceBuffers& DeviceBuffers::operator=(DeviceBuffers&& o) noexcept {
  if (this != &o) {
    if (broken_ == nullptr || !*broken_)
      for (CuDevicePtr p : pointers_)
        driver_->mem_free(p);
    driver_ = o.driver_;
    broken_ = o.broken_;
    pointers_ = std::move(o.pointers_);
    sizes_ = std::move(o.sizes_);
    o.pointers_.clear();
  }
  return *this;
}

Expected<DeviceBuffers> Session::upload(const std::vector<std::string>& buffers) {
  if (broken_) return make_error(Errc::unavailable, "the GPU context was lost to an earlier fault");
  DeviceBuffers device;
  device.driver_ = &driver_;
  device.broken_ = &broken_;
  for (const std::string& b : buffers) {
    CuDevicePtr p = 0;
    FDO_TRY_STATUS(check("cuMemAlloc", driver_.mem_alloc(&p, b.empty() ? 1 : b.size())));
    device.pointers_.push_back(p);
    device.sizes_.push_back(b.size());
    if (!b.empty())
      FDO_TRY_STATUS(check("cuMemcpyHtoD", driver_.memcpy_htod(p, b.data(), b.size())));
  }
  return device;
}

Status Session::download(const DeviceBuffers& device, std::vector<std::string>& buffers) {
  if (broken_) return make_error(Errc::unavailable, "the GPU context was lost to an earlier fault");
  if (buffers.size() != device.size())
    return make_error(Errc::invalid_argument, "download into " + std::to_string(buffers.size()) +
                                                  " buffers of " + std::to_string(device.size()));
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    buffers[i].resize(device.sizes_[i]);
    if (!buffers[i].empty())
      FDO_TRY_STATUS(
          check("cuMemcpyDtoH",
                driver_.memcpy_dtoh(buffers[i].data(), device.pointers_[i], buffers[i].size())));
  }
  return ok();
}

Expected<LaunchResult> Session::launch(Module& module, const LaunchSpec& spec,
                                       std::vector<std::string>& buffers) {
  auto t = Clock::now();
  FDO_TRY(DeviceBuffers device, upload(buffers));
  const std::uint64_t copy_in = nanos_since(t);
  FDO_TRY(LaunchResult result, launch(module, spec, device));
  t = Clock::now();
  FDO_TRY_STATUS(download(device, buffers));
  result.copy_in_ns = copy_in;
  result.copy_out_ns = nanos_since(t);
  return result;
}

Expected<LaunchResult> Session::launch(Module& module, const LaunchSpec& spec,
                                       DeviceBuffers& buffers) {
  if (broken_) return make_error(Errc::unavailable, "the GPU context was lost to an earlier fault");
  if (spec.repeats < 1) return make_error(Errc::invalid_argument, "repeats must be at least 1");
  if (spec.grid.count() == 0 || spec.block.count() == 0)
    return make_error(Errc::invalid_argument, "grid and block dimensions must be at least 1");
  for (const KernelArg& a : spec.args) {
    if (a.kind == KernelArg::Kind::buffer && a.buffer >= buffers.size())
      return make_error(Errc::invalid_argument, "kernel argument names buffer " +
                                                    std::to_string(a.buffer) + " of " +
                                                    std::to_string(buffers.size()));
    if (a.kind == KernelArg::Kind::scalar && (a.size == 0 || a.size > 8))
      return make_error(Errc::invalid_argument, "a scalar argument is 1 to 8 bytes");
  }
  CuFunction fn = nullptr;
  if (CuResult r = driver_.module_get_function(&fn, module.module_, spec.kernel.c_str());
      r != cu::success) {
    Error e = fail("cuModuleGetFunction", r);
    return Error(e.code(), "no kernel '" + spec.kernel + "' in the module: " + e.message());
  }
  LaunchResult result;
  KernelAttributes& at = result.attributes;
  struct Attr {
    int id;
    int* out;
  };
  for (Attr a :
       {Attr{cu::func_num_regs, &at.registers}, Attr{cu::func_local_size_bytes, &at.local_bytes},
        Attr{cu::func_shared_size_bytes, &at.static_shared_bytes},
        Attr{cu::func_max_threads_per_block, &at.max_threads_per_block}})
    FDO_TRY_STATUS(check("cuFuncGetAttribute", driver_.func_get_attribute(a.out, a.id, fn)));
  if (spec.block.count() > static_cast<std::uint64_t>(at.max_threads_per_block))
    return make_error(Errc::invalid_argument,
                      "a block of " + std::to_string(spec.block.count()) +
                          " threads is more than " + spec.kernel + " can run with (" +
                          std::to_string(at.max_threads_per_block) + " at " +
                          std::to_string(at.registers) + " registers a thread)");

  // The driver reads each parameter through a pointer to its value.
  std::vector<std::uint64_t> values(spec.args.size());
  std::vector<void*> params(spec.args.size());
  for (std::size_t i = 0; i < spec.args.size(); ++i) {
    const KernelArg& a = spec.args[i];
    values[i] = a.kind == KernelArg::Kind::buffer ? buffers.pointers_[a.buffer] : a.bits;
    params[i] = &values[i];
  }
  Event start(driver_), end(driver_);
  FDO_TRY_STATUS(check("cuEventCreate", driver_.event_create(start.out(), 0)));
  FDO_TRY_STATUS(check("cuEventCreate", driver_.event_create(end.out(), 0)));
  for (int k = 0; k < spec.repeats; ++k) {
    FDO_TRY_STATUS(check("cuEventRecord", driver_.event_record(start.get(), nullptr)));
    FDO_TRY_STATUS(check(
        "cuLaunchKernel",
        driver_.launch_kernel(fn, spec.grid.x, spec.grid.y, spec.grid.z, spec.block.x, spec.block.y,
                              spec.block.z, spec.shared_bytes, nullptr, params.data(), nullptr)));
    FDO_TRY_STATUS(check("cuEventRecord", driver_.event_record(end.get(), nullptr)));
    // Polled, not waited on: a kernel that never ends must not hang us.
    const auto deadline = Clock::now() + spec.time_limit;
    for (;;) {
      CuResult q = driver_.event_query(end.get());
      if (q == cu::success) break;
      if (q != cu::not_ready) return fail("cuEventQuery", q);
      if (Clock::now() >= deadline) {
        last_error_ = GpuErrc::launch_timeout;
        broken_ = true;
        return make_error(Errc::timeout, spec.kernel + " did not finish within " +
                                             std::to_string(spec.time_limit.count()) +
                                             " ms; the GPU context is abandoned");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    float ms = 0;
    FDO_TRY_STATUS(
        check("cuEventElapsedTime", driver_.event_elapsed_time(&ms, start.get(), end.get())));
    result.kernel_ms.push_back(ms);
  }
  return result;
}

} // namespace fdo::gpu
