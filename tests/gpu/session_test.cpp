// The GPU session (gpu/session.h) against the fake driver: probe, load with
// the driver's log, launch with copies and event timing, every error class,
// the context lost to a fault, a kernel that never ends, nothing leaked.
#include "fake_driver.h"
#include "fdo/gpu/session.h"
#include "support/skip.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>

using namespace fdo;
using namespace fdo::gpu;
using fdo::gpu::test::FakeDriver;
using fdo::gpu::test::FakeLaunch;
using fdo::gpu::test::FakeOutcome;

namespace {

const std::string kPtx = ".version 7.8\n.target sm_90\n.visible .entry saxpy(\n)\n{\n}\n"
                         ".visible .entry wild()\n{\n}\n";

// The fake's saxpy: what the real kernel computes, over the launch's threads.
FakeOutcome saxpy(const FakeLaunch& l) {
  const int n = l.param<int>(0);
  const float a = l.param<float>(1);
  const float* x = l.memory<float>(2);
  float* y = l.memory<float>(3);
  if (x == nullptr || y == nullptr) return {cu::illegal_address};
  const long threads = long{l.grid[0]} * l.block[0];
  for (long t = 0; t < threads; ++t)
    for (long i = t; i < n; i += threads)
      y[i] = a * x[i] + y[i];
  return {cu::success, 0.25f + 0.001f * static_cast<float>(l.block[0])};
}

template <class T> std::string bytes_of(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}
template <class T> std::vector<T> values_of(const std::string& b) {
  std::vector<T> v(b.size() / sizeof(T));
  std::memcpy(v.data(), b.data(), v.size() * sizeof(T));
  return v;
}

LaunchSpec saxpy_spec(int n, unsigned block) {
  LaunchSpec s;
  s.kernel = "saxpy";
  s.grid = {8};
  s.block = {block};
  s.args = {KernelArg::i32(n), KernelArg::f32(2.0f), KernelArg::buf(0), KernelArg::buf(1)};
  return s;
}

} // namespace

TEST_CASE("gpu session: probe reports each device", "[gpu]") {
  FakeDriver d;
  d.devices = 2;
  d.major = 8;
  d.minor = 6;
  auto gpus = probe(d);
  REQUIRE(gpus);
  REQUIRE(gpus->size() == 2);
  CHECK((*gpus)[1].ordinal == 1);
  CHECK((*gpus)[1].name == "Fake GPU 1");
  CHECK((*gpus)[0].sm == 86);
  CHECK((*gpus)[0].driver_version == 12040);
  CHECK((*gpus)[0].multiprocessors == 132);
  CHECK(to_json((*gpus)[0])["arch"] == "sm_86");
}

TEST_CASE("gpu session: no driver and no device are clear errors", "[gpu]") {
  FakeDriver stub;
  stub.init_result = cu::stub_library;
  auto none = probe(stub);
  REQUIRE_FALSE(none);
  CHECK(none.error().code() == Errc::unsupported);
  CHECK_THAT(none.error().message(), Catch::Contains("CUDA_ERROR_STUB_LIBRARY"));
  CHECK(classify(cu::stub_library) == GpuErrc::no_driver);

  FakeDriver empty;
  empty.devices = 0;
  auto gpus = probe(empty);
  REQUIRE(gpus);
  CHECK(gpus->empty());
  auto s = Session::open(empty, 0);
  REQUIRE_FALSE(s);
  CHECK(s.error().code() == Errc::unsupported);
  CHECK_THAT(s.error().message(), Catch::Contains("the driver sees 0"));
}

TEST_CASE("gpu session: a launch computes, is timed per repeat, and copies back", "[gpu]") {
  FakeDriver d;
  d.kernels["saxpy"] = saxpy;
  {
    auto s = Session::open(d);
    REQUIRE(s);
    CHECK(d.retained_contexts == 1);
    auto m = (*s)->load(kPtx, ImageKind::ptx);
    REQUIRE(m);
    CHECK_THAT((*m)->log(), Catch::Contains("ptxas info"));
    const int n = 1000;
    std::vector<float> x(n), y(n);
    for (int i = 0; i < n; ++i) {
      x[i] = static_cast<float>(i);
      y[i] = 1.0f;
    }
    std::vector<std::string> buffers{bytes_of(x), bytes_of(y)};
    LaunchSpec spec = saxpy_spec(n, 128);
    spec.repeats = 3;
    auto r = (*s)->launch(**m, spec, buffers);
    REQUIRE(r);
    REQUIRE(r->kernel_ms.size() == 3);
    CHECK(r->kernel_ms[0] == Approx(0.25 + 0.128));
    CHECK(r->attributes.registers == 32);
    CHECK(d.launches == 3);
    // Three launches on the same buffers: y = 1 + 3 * 2x.
    const auto out = values_of<float>(buffers[1]);
    for (int i = 0; i < n; ++i)
      REQUIRE(out[i] == Approx(1.0f + 6.0f * static_cast<float>(i)));
    CHECK(values_of<float>(buffers[0]) == x);
    CHECK(d.live_bytes() == 0); // device memory freed after the launch
  }
  CHECK(d.live_modules == 0);
  CHECK(d.retained_contexts == 0);
}

TEST_CASE("gpu session: rejected PTX comes back with the driver's log", "[gpu]") {
  FakeDriver d;
  auto s = Session::open(d);
  REQUIRE(s);
  auto m = (*s)->load("garbage", ImageKind::ptx);
  REQUIRE_FALSE(m);
  CHECK(m.error().code() == Errc::compile);
  CHECK_THAT(m.error().message(), Catch::Contains("CUDA_ERROR_INVALID_PTX"));
  CHECK_THAT(m.error().message(), Catch::Contains("no .version directive"));
  CHECK((*s)->last_error() == GpuErrc::invalid_program);
  CHECK_FALSE((*s)->broken());
  auto nul = (*s)->load(std::string("x\0y", 3), ImageKind::ptx);
  REQUIRE_FALSE(nul);
  CHECK(nul.error().code() == Errc::invalid_argument);
}

TEST_CASE("gpu session: PTX turned into a cubin loads without the JIT", "[gpu]") {
  FakeDriver d;
  d.kernels["saxpy"] = saxpy;
  auto s = Session::open(d);
  REQUIRE(s);
  auto cubin = (*s)->link_cubin(kPtx);
  REQUIRE(cubin);
  // Copied out before the link state is destroyed.
  CHECK(*cubin == FakeDriver::cubin_of(kPtx));
  auto m = (*s)->load(*cubin, ImageKind::cubin);
  REQUIRE(m);
  std::vector<std::string> buffers{bytes_of(std::vector<float>(16, 1.0f)),
                                   bytes_of(std::vector<float>(16, 0.0f))};
  REQUIRE((*s)->launch(**m, saxpy_spec(16, 32), buffers));
  CHECK(values_of<float>(buffers[1]) == std::vector<float>(16, 2.0f));
  auto bad = (*s)->link_cubin("not ptx");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().code() == Errc::compile);
}

TEST_CASE("gpu session: errors that leave the context usable", "[gpu]") {
  FakeDriver d;
  d.kernels["saxpy"] = saxpy;
  auto s = Session::open(d);
  REQUIRE(s);
  auto m = (*s)->load(kPtx, ImageKind::ptx);
  REQUIRE(m);
  std::vector<std::string> buffers{bytes_of(std::vector<float>(64, 1.0f)),
                                   bytes_of(std::vector<float>(64, 0.0f))};

  SECTION("no such kernel") {
    LaunchSpec spec = saxpy_spec(64, 32);
    spec.kernel = "nope";
    auto r = (*s)->launch(**m, spec, buffers);
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::not_found);
    CHECK_THAT(r.error().message(), Catch::Contains("no kernel 'nope'"));
  }
  SECTION("out of device memory") {
    d.free_mem = 128;
    auto r = (*s)->launch(**m, saxpy_spec(64, 32), buffers);
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::resource_exhausted);
    CHECK_THAT(r.error().message(), Catch::Contains("CUDA_ERROR_OUT_OF_MEMORY"));
    CHECK((*s)->last_error() == GpuErrc::out_of_memory);
    CHECK(d.live_bytes() == 0); // the first buffer, allocated, was freed
  }
  SECTION("a block larger than the kernel can run with") {
    d.kernel_max_threads = 256;
    auto r = (*s)->launch(**m, saxpy_spec(64, 512), buffers);
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::invalid_argument);
    CHECK_THAT(r.error().message(), Catch::Contains("more than saxpy can run with (256"));
  }
  SECTION("bad arguments") {
    LaunchSpec spec = saxpy_spec(64, 32);
    spec.args[3] = KernelArg::buf(7);
    CHECK_FALSE((*s)->launch(**m, spec, buffers));
    spec = saxpy_spec(64, 32);
    spec.grid = {0};
    CHECK_FALSE((*s)->launch(**m, spec, buffers));
    spec = saxpy_spec(64, 32);
    spec.repeats = 0;
    CHECK_FALSE((*s)->launch(**m, spec, buffers));
  }
  CHECK_FALSE((*s)->broken());
  // The session goes on.
  buffers = {bytes_of(std::vector<float>(64, 1.0f)), bytes_of(std::vector<float>(64, 0.0f))};
  d.free_mem = std::size_t{1} << 30;
  d.kernel_max_threads = 1024;
  REQUIRE((*s)->launch(**m, saxpy_spec(64, 32), buffers));
  CHECK(values_of<float>(buffers[1]) == std::vector<float>(64, 2.0f));
}

TEST_CASE("gpu session: a kernel fault loses the context for good", "[gpu]") {
  FakeDriver d;
  d.kernels["saxpy"] = saxpy;
  d.kernels["wild"] = [](const FakeLaunch&) { return FakeOutcome{cu::illegal_address}; };
  auto s = Session::open(d);
  REQUIRE(s);
  auto m = (*s)->load(kPtx, ImageKind::ptx);
  REQUIRE(m);
  std::vector<std::string> none;
  LaunchSpec wild;
  wild.kernel = "wild";
  auto r = (*s)->launch(**m, wild, none);
  REQUIRE_FALSE(r);
  CHECK(r.error().code() == Errc::crashed);
  CHECK_THAT(r.error().message(),
             Catch::Contains("CUDA_ERROR_ILLEGAL_ADDRESS (700): an illegal memory access"));
  CHECK((*s)->broken());
  CHECK((*s)->last_error() == GpuErrc::illegal_address);
  std::vector<std::string> buffers{bytes_of(std::vector<float>(4, 1.0f)),
                                   bytes_of(std::vector<float>(4, 0.0f))};
  auto after = (*s)->launch(**m, saxpy_spec(4, 32), buffers);
  REQUIRE_FALSE(after);
  CHECK(after.error().code() == Errc::unavailable);
  CHECK_FALSE((*s)->load(kPtx, ImageKind::ptx));
  for (GpuErrc e : {GpuErrc::illegal_address, GpuErrc::kernel_fault, GpuErrc::launch_timeout})
    CHECK(loses_context(e));
  for (GpuErrc e : {GpuErrc::out_of_memory, GpuErrc::invalid_program, GpuErrc::not_found,
                    GpuErrc::launch_resources})
    CHECK_FALSE(loses_context(e));
}

TEST_CASE("gpu session: a kernel that never ends is abandoned at its time limit", "[gpu]") {
  FakeDriver d;
  d.kernels["saxpy"] = saxpy;
  d.kernels["wild"] = [](const FakeLaunch&) {
    FakeOutcome o;
    o.hangs = true;
    return o;
  };
  auto s = Session::open(d);
  REQUIRE(s);
  auto m = (*s)->load(kPtx, ImageKind::ptx);
  REQUIRE(m);
  std::vector<std::string> flag{bytes_of(std::vector<int>(1, 0))};
  LaunchSpec spec;
  spec.kernel = "wild";
  spec.args = {KernelArg::buf(0)};
  spec.time_limit = std::chrono::milliseconds(50);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = (*s)->launch(**m, spec, flag);
  REQUIRE_FALSE(r);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
  CHECK(r.error().code() == Errc::timeout);
  CHECK_THAT(r.error().message(), Catch::Contains("did not finish within 50 ms"));
  CHECK((*s)->broken());
  CHECK((*s)->last_error() == GpuErrc::launch_timeout);
  // Nothing waits on the running kernel afterwards: not the launch's
  // buffers, not the module, not the session (on an H200 a cuMemFree here
  // held the worker until the pool's wall limit killed it).
  m->reset();
  s->reset();
  CHECK(d.waits_on_running_kernel == 0);
}

TEST_CASE("gpu driver: the real loader names what is missing", "[gpu]") {
  auto missing = load_cuda_driver("/nonexistent/libcuda.so.1");
  REQUIRE_FALSE(missing);
  CHECK(missing.error().code() == Errc::unsupported);
  CHECK_THAT(missing.error().message(), Catch::Contains("no NVIDIA driver: cannot load"));
  // A library without the driver API's entry points.
  auto wrong = load_cuda_driver("libm.so.6");
  REQUIRE_FALSE(wrong);
  CHECK_THAT(wrong.error().message(), Catch::Contains("lacks cuInit"));
}

TEST_CASE("gpu driver: the CUDA toolkit's stub library binds and says it is a stub", "[gpu]") {
  const std::string stub = "/usr/local/cuda/lib64/stubs/libcuda.so";
  if (!std::filesystem::exists(stub))
    FDO_SKIP("no CUDA toolkit stub library at " + stub + " on this host");
  auto d = load_cuda_driver(stub);
  REQUIRE(d);
  auto gpus = probe(**d);
  REQUIRE_FALSE(gpus);
  CHECK(gpus.error().code() == Errc::unsupported);
  CHECK_THAT(gpus.error().message(), Catch::Contains("the NVIDIA driver cannot start"));
}
