// GPU worker jobs (fdo_daemon/jobs/gpu_jobs.h) against the fake driver:
// probe, launch by key and with the PTX, tuning, the reply's codec, errors,
// and the context lost to a fault marking the worker for replacement.
#include "fake_driver.h"
#include "fdo/daemon/gpu_jobs.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>

using namespace fdo;
using namespace fdo::daemon;
using namespace fdo::gpu;
using fdo::gpu::test::FakeDriver;
using fdo::gpu::test::FakeLaunch;
using fdo::gpu::test::FakeOutcome;

namespace {

const std::string kPtx = ".version 7.8\n.target sm_90\n.visible .entry scale(\n)\n{\n}\n"
                         ".visible .entry wild()\n{\n}\n";

// out[i] *= k, over the launch's threads.
FakeOutcome scale(const FakeLaunch& l) {
  const int n = l.param<int>(0);
  const float k = l.param<float>(1);
  float* v = l.memory<float>(2);
  if (v == nullptr) return {cu::illegal_address};
  for (int i = 0; i < n; ++i)
    v[i] *= k;
  // Fastest at 256 threads a block.
  const double off = std::abs(std::log2(l.block[0] / 256.0));
  return {cu::success, static_cast<float>(1.0 + off)};
}

// The loader makes the driver GpuJobs owns, configured by `setup`, and
// tells the test where it is (as dlopen would hand out the one library).
DriverLoader loader_of(const std::function<void(FakeDriver&)>& setup, FakeDriver** seen,
                       int* loads = nullptr) {
  return [setup, seen, loads](const std::string& path) -> Expected<std::unique_ptr<Driver>> {
    if (path != "fake")
      return make_error(Errc::unsupported, "no NVIDIA driver: cannot load " + path);
    if (loads != nullptr) ++*loads;
    auto d = std::make_unique<FakeDriver>();
    setup(*d);
    *seen = d.get();
    return std::unique_ptr<Driver>(std::move(d));
  };
}

void with_scale(FakeDriver& d) {
  d.kernels["scale"] = scale;
  d.kernels["wild"] = [](const FakeLaunch&) { return FakeOutcome{cu::illegal_address}; };
}

std::string floats(std::vector<float> v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

GpuLaunchJob scale_job(int n, bool attach) {
  GpuLaunchJob job;
  job.driver = "fake";
  job.key = "k1";
  job.kernel = "scale";
  job.grid = {4};
  job.block = {128};
  job.args = {KernelArg::i32(n), KernelArg::f32(3.0f), KernelArg::buf(0)};
  job.buffer_sizes = {static_cast<std::uint64_t>(n) * 4};
  job.return_buffers = true;
  if (attach) job.ptx_size = kPtx.size();
  return job;
}

Message message_of(const GpuLaunchJob& job, const std::string& buffers) {
  Message m;
  m.header = to_json(job);
  if (job.ptx_size) m.payload = kPtx;
  m.payload += buffers;
  return m;
}

} // namespace

TEST_CASE("gpu jobs: the job and reply codecs round-trip and refuse bad input", "[gpu_jobs]") {
  GpuLaunchJob job = scale_job(8, true);
  job.tune_items = 1000;
  auto back = gpu_launch_job_from_json(to_json(job));
  REQUIRE(back);
  CHECK(*back == job);
  nlohmann::json bad = to_json(job);
  bad["args"][2] = {{"buffer", 5}};
  CHECK_FALSE(gpu_launch_job_from_json(bad));
  bad = to_json(job);
  bad["grid"] = nlohmann::json::array({0});
  CHECK_FALSE(gpu_launch_job_from_json(bad));
  bad = to_json(job);
  bad["repeats"] = 0;
  CHECK_FALSE(gpu_launch_job_from_json(bad));

  GpuLaunchReply reply;
  reply.kernel_ms = {0.5, 0.25};
  reply.ran = {{4}, {128}};
  reply.tuned = {{{{4}, {128}}, 0.5}};
  reply.buffer_sizes = {32};
  auto r = gpu_launch_reply_from_json(to_json(reply));
  REQUIRE(r);
  CHECK(r->kernel_ms == reply.kernel_ms);
  CHECK(r->ran == reply.ran);
  nlohmann::json hostile = to_json(reply);
  hostile["kernel_ms"] = nlohmann::json::array({-1.0});
  CHECK(gpu_launch_reply_from_json(hostile).error().code() == Errc::corrupt);
  hostile = to_json(reply);
  hostile["outcome"] = "exploded";
  CHECK_FALSE(gpu_launch_reply_from_json(hostile));
}

TEST_CASE("gpu jobs: cubin fields round-trip and a job carries one image at most", "[gpu_jobs]") {
  GpuLaunchJob job = scale_job(8, false);
  job.cubin_size = 40;
  job.tune_items = 64;
  job.tune_max_threads = 128;
  auto back = gpu_launch_job_from_json(to_json(job));
  REQUIRE(back);
  CHECK(*back == job);
  job = scale_job(8, true);
  job.want_cubin = true;
  back = gpu_launch_job_from_json(to_json(job));
  REQUIRE(back);
  CHECK(back->want_cubin);
  nlohmann::json both = to_json(job);
  both["cubin_size"] = 10;
  auto refused = gpu_launch_job_from_json(both);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code() == Errc::invalid_argument);
  nlohmann::json wide = to_json(job);
  wide["tune_max_threads"] = 4096;
  CHECK_FALSE(gpu_launch_job_from_json(wide));

  GpuLaunchReply reply;
  reply.module_loaded = true;
  reply.image = ImageKind::cubin;
  reply.cubin_size = 99;
  auto r = gpu_launch_reply_from_json(to_json(reply));
  REQUIRE(r);
  CHECK(r->image == ImageKind::cubin);
  CHECK(r->cubin_size == 99);
  nlohmann::json hostile = to_json(reply);
  hostile["image"] = "elf";
  CHECK(gpu_launch_reply_from_json(hostile).error().code() == Errc::corrupt);
}

TEST_CASE("gpu jobs: PTX linked to a cubin comes back, and a new worker loads the cubin",
          "[gpu_jobs]") {
  FakeDriver* d = nullptr;
  std::string cubin;
  {
    GpuJobs jobs(loader_of(with_scale, &d));
    GpuLaunchJob job = scale_job(8, true);
    job.want_cubin = true;
    auto out = jobs.handle(message_of(job, floats(std::vector<float>(8, 1.0f))));
    REQUIRE(out);
    auto r = gpu_launch_reply_from_json(out->header);
    REQUIRE(r);
    CHECK(r->module_loaded);
    CHECK(r->image == ImageKind::ptx); // compiled from the PTX here
    REQUIRE(r->cubin_size > 0);
    cubin = out->payload.substr(0, r->cubin_size);
    CHECK(cubin == FakeDriver::cubin_of(kPtx));
    CHECK(out->payload.substr(r->cubin_size) == floats(std::vector<float>(8, 3.0f)));
  }
  // A fresh worker (a new process, a restarted fdod) sent the cubin.
  GpuJobs fresh(loader_of(with_scale, &d));
  GpuLaunchJob job = scale_job(8, false);
  job.cubin_size = cubin.size();
  Message m;
  m.header = to_json(job);
  m.payload = cubin + floats(std::vector<float>(8, 2.0f));
  auto out = fresh.handle(m);
  REQUIRE(out);
  auto r = gpu_launch_reply_from_json(out->header);
  REQUIRE(r);
  CHECK(r->module_loaded);
  CHECK(r->image == ImageKind::cubin);
  CHECK(r->cubin_size == 0);
  CHECK(out->payload == floats(std::vector<float>(8, 6.0f)));
  // A cubin the driver refuses is a compile error (fdod then sends the PTX).
  GpuJobs other(loader_of(with_scale, &d));
  m.payload = std::string("FAKECUBIN\ngarbage") + floats(std::vector<float>(8, 2.0f));
  job.cubin_size = std::string("FAKECUBIN\ngarbage").size();
  m.header = to_json(job);
  auto refused = other.handle(m);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code() == Errc::compile);
}

TEST_CASE("gpu jobs: tuning keeps to the kernel's launch bounds", "[gpu_jobs]") {
  FakeDriver* d = nullptr;
  GpuJobs jobs(loader_of(with_scale, &d));
  GpuLaunchJob job = scale_job(64, true);
  job.tune_items = 1 << 20;
  job.tune_max_threads = 128; // the fastest block (256) is out of bounds
  auto out = jobs.handle(message_of(job, floats(std::vector<float>(64, 1.0f))));
  REQUIRE(out);
  auto r = gpu_launch_reply_from_json(out->header);
  REQUIRE(r);
  CHECK(r->ran.block.x == 128);
  for (const auto& [config, ms] : r->tuned)
    CHECK(config.block.count() <= 128);
}

TEST_CASE("gpu jobs: probe, then launches by key once the module is loaded", "[gpu_jobs]") {
  FakeDriver* d = nullptr;
  int loads = 0;
  GpuJobs jobs(loader_of(with_scale, &d, &loads));
  Message probe;
  probe.header = {{"op", "gpu_probe"}, {"driver", "fake"}};
  auto p = jobs.handle(probe);
  REQUIRE(p);
  CHECK(p->header["gpus"][0]["arch"] == "sm_90");

  // By key first: this worker holds nothing.
  auto miss = jobs.handle(message_of(scale_job(8, false), floats(std::vector<float>(8, 1.0f))));
  REQUIRE(miss);
  auto missing = gpu_launch_reply_from_json(miss->header);
  REQUIRE(missing);
  CHECK(missing->outcome == GpuOutcome::missing_image);

  auto first = jobs.handle(message_of(scale_job(8, true), floats(std::vector<float>(8, 1.0f))));
  REQUIRE(first);
  auto r1 = gpu_launch_reply_from_json(first->header);
  REQUIRE(r1);
  CHECK(r1->module_loaded);
  CHECK(first->payload == floats(std::vector<float>(8, 3.0f)));
  auto second = jobs.handle(message_of(scale_job(8, false), floats(std::vector<float>(8, 2.0f))));
  REQUIRE(second);
  auto r2 = gpu_launch_reply_from_json(second->header);
  REQUIRE(r2);
  CHECK_FALSE(r2->module_loaded);
  CHECK(r2->ran == gpu::LaunchConfig{{4}, {128}});
  CHECK(second->payload == floats(std::vector<float>(8, 6.0f)));
  REQUIRE(d != nullptr);
  CHECK(d->module_loads == 1);
  CHECK(loads == 1);
  CHECK_FALSE(jobs.broken());
}

TEST_CASE("gpu jobs: tuning picks the fastest block and runs the job once on its bytes",
          "[gpu_jobs]") {
  FakeDriver* d = nullptr;
  GpuJobs jobs(loader_of(with_scale, &d));
  GpuLaunchJob job = scale_job(64, true);
  job.tune_items = 1 << 20;
  auto out = jobs.handle(message_of(job, floats(std::vector<float>(64, 1.0f))));
  REQUIRE(out);
  auto r = gpu_launch_reply_from_json(out->header);
  REQUIRE(r);
  CHECK(r->ran.block.x == 256);
  CHECK(r->tune_launches > 0);
  CHECK(r->tuned.size() > 10);
  // The tuning launches did not leak into the result: scaled once.
  CHECK(out->payload == floats(std::vector<float>(64, 3.0f)));
}

TEST_CASE("gpu jobs: errors, and a fault that retires the worker", "[gpu_jobs]") {
  FakeDriver* d = nullptr;
  GpuJobs jobs(loader_of(with_scale, &d));

  GpuLaunchJob short_payload = scale_job(8, true);
  auto bad = jobs.handle(message_of(short_payload, floats(std::vector<float>(4, 1.0f))));
  REQUIRE_FALSE(bad);
  CHECK_THAT(bad.error().message(), Catch::Contains("the payload holds"));

  GpuLaunchJob no_driver = scale_job(8, true);
  no_driver.driver = "/nope/libcuda.so.1";
  GpuJobs without(loader_of(with_scale, &d));
  auto nd = without.handle(message_of(no_driver, floats(std::vector<float>(8, 1.0f))));
  REQUIRE_FALSE(nd);
  CHECK(nd.error().code() == Errc::unsupported);
  // A worker runs one driver.
  auto other = jobs.handle(message_of(no_driver, floats(std::vector<float>(8, 1.0f))));
  REQUIRE_FALSE(other);
  CHECK_THAT(other.error().message(), Catch::Contains("this GPU worker runs fake"));

  GpuLaunchJob unknown = scale_job(8, true);
  unknown.kernel = "nope";
  auto nf = jobs.handle(message_of(unknown, floats(std::vector<float>(8, 1.0f))));
  REQUIRE_FALSE(nf);
  CHECK(nf.error().code() == Errc::not_found);
  CHECK_FALSE(jobs.broken());

  GpuLaunchJob wild = scale_job(8, false);
  wild.kernel = "wild";
  auto fault = jobs.handle(message_of(wild, floats(std::vector<float>(8, 1.0f))));
  REQUIRE_FALSE(fault);
  CHECK(fault.error().code() == Errc::crashed);
  CHECK(jobs.broken());
}
