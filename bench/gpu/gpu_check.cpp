// gpu_check: fdo's GPU path on a real GPU, measured side by side in one run
// (docs/gpu.md, "Checking a GPU host"). Uses the libraries fdod's workers use:
// jit/nvptx.h compiles the kernels to PTX for the device, gpu/session.h loads
// and launches them through the driver seam, gpu/tune.h tunes launches, and
// cache/disk_tier.h keeps the PTX and the driver's cubin under a key that
// embeds the GPU identity.
//
//   gpu_check --program tests/jit/fixtures/gpu_kernels.ll --cache DIR [--json FILE]
//   gpu_check --program ... --cache DIR --phase restart   (a new process: disk tier only)
//
// Exits 0 when every result equals its host reference, 1 otherwise, 2 on a
// setup error (no driver, no GPU).
#include "fdo/cache/disk_tier.h"
#include "fdo/cache/keys.h"
#include "fdo/gpu/session.h"
#include "fdo/gpu/tune.h"
#include "fdo/jit/nvptx.h"
#include "fdo/util/profile.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

using namespace fdo;
using namespace fdo::gpu;
using json = nlohmann::json;

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

template <class T> std::string bytes_of(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}
template <class T> std::vector<T> values_of(const std::string& b) {
  std::vector<T> v(b.size() / sizeof(T));
  std::memcpy(v.data(), b.data(), v.size() * sizeof(T));
  return v;
}

[[noreturn]] void die(int code, const std::string& what) {
  std::cerr << "gpu_check: " << what << "\n";
  std::exit(code);
}

template <class T> T must(Expected<T> e, const std::string& what) {
  if (!e) die(2, what + ": " + e.error().describe());
  return std::move(e).value();
}

struct Args {
  std::string program, cache, json_out, driver = "libcuda.so.1", phase = "full";
  int rounds = 7;
};

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) die(2, k + " needs a value");
      return argv[++i];
    };
    if (k == "--program")
      a.program = value();
    else if (k == "--cache")
      a.cache = value();
    else if (k == "--json")
      a.json_out = value();
    else if (k == "--driver")
      a.driver = value();
    else if (k == "--phase")
      a.phase = value();
    else if (k == "--rounds")
      a.rounds = std::stoi(value());
    else
      die(2, "unknown argument " + k);
  }
  if (a.program.empty() || a.cache.empty()) die(2, "usage: gpu_check --program FILE --cache DIR");
  return a;
}

// The entry's key: the program under the GPU's compiler identity, no profile.
std::string key_for(const std::string& program, const jit::CompilerIdentity& id) {
  return cache::cache_key(cache::initial_key("", program, id.canonical()), no_profile_digest(),
                          CompileMode::plain);
}

struct Problem {
  int n = 0;
  std::vector<float> x, y;
};

Problem saxpy_problem(int n) {
  Problem p;
  p.n = n;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> d(-1, 1);
  p.x.resize(n);
  p.y.resize(n);
  for (int i = 0; i < n; ++i) {
    p.x[i] = d(rng);
    p.y[i] = d(rng);
  }
  return p;
}

LaunchSpec spec_of(const std::string& kernel, const LaunchConfig& c, std::vector<KernelArg> args) {
  LaunchSpec s;
  s.kernel = kernel;
  s.grid = c.grid;
  s.block = c.block;
  s.args = std::move(args);
  return s;
}

// saxpy with `config`; y compared with the host's a*x + y exactly (one fma
// or mul+add per element: allow one rounding).
bool check_saxpy(Session& s, Module& m, const Problem& p, const LaunchConfig& config, json& out) {
  std::vector<std::string> buffers{bytes_of(p.x), bytes_of(p.y)};
  auto r = s.launch(
      m,
      spec_of("saxpy", config,
              {KernelArg::i32(p.n), KernelArg::f32(2.5f), KernelArg::buf(0), KernelArg::buf(1)}),
      buffers);
  if (!r) die(1, "saxpy: " + r.error().describe());
  const auto y = values_of<float>(buffers[1]);
  int bad = 0;
  for (int i = 0; i < p.n; ++i) {
    const double want = 2.5 * static_cast<double>(p.x[i]) + p.y[i];
    if (std::abs(y[i] - want) > 1e-6 * std::max(1.0, std::abs(want))) ++bad;
  }
  out = {{"n", p.n},
         {"config", config.describe()},
         {"kernel_ms", r->kernel_ms[0]},
         {"mismatches", bad},
         {"registers", r->attributes.registers}};
  return bad == 0;
}

bool check_reduce(Session& s, Module& m, const Problem& p, const LaunchConfig& config, json& out) {
  std::vector<std::string> buffers{bytes_of(p.x),
                                   bytes_of(std::vector<float>(config.grid.x, 0.0f))};
  auto r = s.launch(
      m, spec_of("reduce_sum", config, {KernelArg::i32(p.n), KernelArg::buf(0), KernelArg::buf(1)}),
      buffers);
  if (!r) die(1, "reduce_sum: " + r.error().describe());
  double got = 0, want = 0, magnitude = 0;
  for (float v : values_of<float>(buffers[1]))
    got += v;
  for (float v : p.x) {
    want += v;
    magnitude += std::abs(v);
  }
  // Float partial sums in another order: error bounded by n * eps * sum|x|.
  const double tolerance = 1e-6 * magnitude;
  const bool ok = std::abs(got - want) <= tolerance;
  out = {{"n", p.n},
         {"config", config.describe()},
         {"kernel_ms", r->kernel_ms[0]},
         {"sum", got},
         {"host_sum", want},
         {"tolerance", tolerance},
         {"equal", ok}};
  return ok;
}

bool check_matmul(Session& s, Module& m, int n, json& out) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> d(-1, 1);
  std::vector<float> a(std::size_t(n) * n), b(a.size());
  for (auto& v : a)
    v = d(rng);
  for (auto& v : b)
    v = d(rng);
  std::vector<std::string> buffers{bytes_of(a), bytes_of(b),
                                   bytes_of(std::vector<float>(a.size()))};
  const unsigned tiles = static_cast<unsigned>((n + 15) / 16);
  LaunchSpec spec;
  spec.kernel = "matmul_tiled";
  spec.grid = {tiles, tiles};
  spec.block = {16, 16};
  spec.args = {KernelArg::i32(n), KernelArg::buf(0), KernelArg::buf(1), KernelArg::buf(2)};
  auto r = s.launch(m, spec, buffers);
  if (!r) die(1, "matmul_tiled: " + r.error().describe());
  const auto c = values_of<float>(buffers[2]);
  // Host reference in double, rows split over the host's cores.
  std::vector<double> ref(a.size());
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (int i = static_cast<int>(t); i < n; i += static_cast<int>(threads))
        for (int k = 0; k < n; ++k) {
          const double aik = a[std::size_t(i) * n + k];
          for (int j = 0; j < n; ++j)
            ref[std::size_t(i) * n + j] += aik * b[std::size_t(k) * n + j];
        }
    });
  for (auto& t : pool)
    t.join();
  double worst = 0;
  for (std::size_t i = 0; i < c.size(); ++i)
    worst = std::max(worst, std::abs(c[i] - ref[i]));
  // n products of magnitude <= 1 summed in float: ~n * eps.
  const double tolerance = 4.0 * n * 1.2e-7;
  out = {{"n", n},
         {"kernel_ms", r->kernel_ms[0]},
         {"gflops", 2.0 * n * n * double(n) / (r->kernel_ms[0] * 1e6)},
         {"max_abs_error", worst},
         {"tolerance", tolerance},
         {"registers", r->attributes.registers}};
  return worst <= tolerance;
}

// Tunes `kernel` over grid-stride candidates, then times the tuned
// configuration against every fixed one side by side: `rounds` rounds, each
// running all of them in a shuffled order, 5 launches each (median).
json tune_and_compare(Session& s, Module& m, const std::string& kernel, const Problem& p,
                      int rounds) {
  const bool is_saxpy = kernel == "saxpy";
  std::vector<std::string> host{bytes_of(p.x),
                                is_saxpy ? bytes_of(p.y) : bytes_of(std::vector<float>(1 << 20))};
  DeviceBuffers device = must(s.upload(host), "upload");
  auto args = [&]() -> std::vector<KernelArg> {
    if (is_saxpy)
      return {KernelArg::i32(p.n), KernelArg::f32(1.0f), KernelArg::buf(0), KernelArg::buf(1)};
    return {KernelArg::i32(p.n), KernelArg::buf(0), KernelArg::buf(1)};
  };
  auto time = [&](const LaunchConfig& c, int repeats) -> Expected<double> {
    LaunchSpec spec = spec_of(kernel, c, args());
    spec.repeats = repeats;
    FDO_TRY(LaunchResult r, s.launch(m, spec, device));
    return median(r.kernel_ms);
  };
  const auto candidates = grid_stride_candidates(static_cast<std::uint64_t>(p.n), s.info(), 1024);
  const auto t0 = Clock::now();
  TuneResult tuned =
      must(tune(candidates, [&](const LaunchConfig& c) { return time(c, 1); }), "tune " + kernel);
  const double tune_ms = ms_since(t0);
  // Side by side: the tuned configuration and every fixed one.
  std::vector<LaunchConfig> all = candidates;
  std::vector<std::vector<double>> times(all.size() + 1);
  std::mt19937_64 rng(42);
  for (int round = 0; round < rounds; ++round) {
    std::vector<std::size_t> order(all.size() + 1);
    for (std::size_t i = 0; i < order.size(); ++i)
      order[i] = i;
    std::shuffle(order.begin(), order.end(), rng);
    for (std::size_t i : order) {
      const LaunchConfig& c = i == all.size() ? tuned.best : all[i];
      times[i].push_back(must(time(c, 5), "time " + kernel));
    }
  }
  std::size_t best_fixed = 0;
  for (std::size_t i = 1; i < all.size(); ++i)
    if (median(times[i]) < median(times[best_fixed])) best_fixed = i;
  // The configuration a programmer writes without tuning: 256 threads, one per item.
  const LaunchConfig naive{{static_cast<unsigned>((p.n + 255) / 256)}, {256}};
  std::size_t naive_index = 0;
  for (std::size_t i = 0; i < all.size(); ++i)
    if (all[i] == naive) naive_index = i;
  const double tuned_ms = median(times.back());
  json grid = json::array();
  for (std::size_t i = 0; i < all.size(); ++i)
    grid.push_back({{"config", all[i].describe()}, {"median_ms", median(times[i])}});
  return {{"kernel", kernel},
          {"n", p.n},
          {"candidates", all.size()},
          {"tune_launches", tuned.launches},
          {"tune_ms", tune_ms},
          {"tuned", tuned.best.describe()},
          {"tuned_median_ms", tuned_ms},
          {"best_fixed", all[best_fixed].describe()},
          {"best_fixed_median_ms", median(times[best_fixed])},
          {"tuned_over_best_fixed", tuned_ms / median(times[best_fixed])},
          {"naive", naive.describe()},
          {"naive_median_ms", median(times[naive_index])},
          {"tuned_over_naive", tuned_ms / median(times[naive_index])},
          {"rounds", rounds},
          {"grid", grid}};
}

} // namespace

int main(int argc, char** argv) {
  const Args args = parse_args(argc, argv);
  const std::string program = must(read_file(args.program), "read " + args.program);
  json report;
  const auto t_driver = Clock::now();
  std::unique_ptr<Driver> driver = must(load_cuda_driver(args.driver), "driver");
  std::unique_ptr<Session> session = must(Session::open(*driver, 0), "GPU 0");
  report["driver_open_ms"] = ms_since(t_driver);
  const GpuInfo& gpu = session->info();
  report["gpu"] = to_json(gpu);
  const jit::GpuTarget target{gpu.sm, gpu.driver_version};
  const jit::CompilerIdentity id = must(jit::gpu_identity(target), "identity");
  report["identity"] = id.canonical();
  const std::string key = key_for(program, id);
  report["key"] = key;
  std::unique_ptr<cache::DiskTier> disk =
      must(cache::DiskTier::open(cache::DiskTierConfig{args.cache}), "disk tier");
  std::cout << "GPU 0: " << gpu.name << ", " << jit::sm_name(gpu.sm) << ", driver "
            << gpu.driver_version << ", " << gpu.memory_bytes / (1 << 20) << " MiB, "
            << gpu.multiprocessors << " SMs\n";

  if (args.phase == "restart") {
    // A new process: the entry comes from the disk tier, the cubin loads
    // without the JIT.
    const auto t = Clock::now();
    cache::LoadResult hit = disk->load(key, id.canonical());
    if (hit.status != cache::LoadStatus::hit) die(1, "restart: the disk tier does not hold " + key);
    const double read_ms = ms_since(t);
    auto module = must(session->load(hit.entry->object, ImageKind::cubin), "load cubin");
    const double load_ms = ms_since(t) - read_ms;
    Problem p = saxpy_problem(1 << 20);
    json saxpy;
    const bool ok = check_saxpy(*session, *module, p, {{1024}, {256}}, saxpy);
    report["restart"] = {{"disk_read_ms", read_ms},
                         {"cubin_load_ms", load_ms},
                         {"to_loaded_ms", ms_since(t) - saxpy["kernel_ms"].get<double>()},
                         {"saxpy", saxpy},
                         {"ok", ok}};
    std::cout << report["restart"].dump(1) << "\n";
    if (!args.json_out.empty()) std::ofstream(args.json_out) << report.dump(1) << "\n";
    return ok ? 0 : 1;
  }

  // Cold: compile to PTX, JIT it in the driver, make the cubin, store both.
  auto t = Clock::now();
  jit::GpuCompileRequest request;
  request.target = target;
  jit::GpuCompileResult compiled = must(jit::compile_gpu(program, request), "compile");
  const double compile_ms = ms_since(t);
  t = Clock::now();
  auto ptx_module = must(session->load(compiled.ptx, ImageKind::ptx), "load PTX");
  const double ptx_load_ms = ms_since(t);
  t = Clock::now();
  std::string cubin = must(session->link_cubin(compiled.ptx), "link cubin");
  const double link_ms = ms_since(t);
  cache::Entry entry;
  entry.key = key;
  entry.info.ck = key;
  entry.info.compiler_identity = id.canonical();
  entry.info.pk = compiled.profile_key;
  entry.info.profile_digest = std::string(no_profile_digest());
  entry.info.program_hash = cache::program_hash("", program);
  entry.object = cubin;
  entry.metadata =
      json{{"sm", compiled.sm}, {"ptx_isa", compiled.ptx_isa}, {"ptx", compiled.ptx}}.dump();
  t = Clock::now();
  if (Status st = disk->store(entry); !st) die(2, "store: " + st.error().describe());
  const double store_ms = ms_since(t);
  // A hit: the entry in memory, its cubin loaded without the JIT.
  t = Clock::now();
  auto cubin_module = must(session->load(entry.object, ImageKind::cubin), "load cubin");
  const double hit_ms = ms_since(t);
  report["cache"] = {{"cold_compile_ms", compile_ms},
                     {"cold_ptx_jit_load_ms", ptx_load_ms},
                     {"cold_total_ms", compile_ms + ptx_load_ms},
                     {"cubin_link_ms", link_ms},
                     {"disk_store_ms", store_ms},
                     {"hit_cubin_load_ms", hit_ms},
                     {"ptx_bytes", compiled.ptx.size()},
                     {"cubin_bytes", cubin.size()},
                     {"sm", compiled.sm},
                     {"ptx_isa", compiled.ptx_isa},
                     {"jit_log", ptx_module->log()}};
  std::cout << "compile " << compile_ms << " ms, PTX JIT+load " << ptx_load_ms
            << " ms; cubin load (hit) " << hit_ms << " ms\n";

  bool ok = true;
  Problem p = saxpy_problem(1 << 24);
  json saxpy, reduce, matmul;
  ok &= check_saxpy(*session, *cubin_module, p, {{static_cast<unsigned>((p.n + 255) / 256)}, {256}},
                    saxpy);
  ok &= check_reduce(*session, *cubin_module, p, {{528}, {256}}, reduce);
  ok &= check_matmul(*session, *cubin_module, 1024, matmul);
  report["results"] = {{"saxpy", saxpy}, {"reduce_sum", reduce}, {"matmul_tiled", matmul}};
  std::cout << report["results"].dump(1) << "\n";

  json tuning = json::array();
  for (const char* kernel : {"saxpy", "reduce_sum"}) {
    json t_json = tune_and_compare(*session, *cubin_module, kernel, p, args.rounds);
    // The tuned configuration still computes the right answer.
    LaunchConfig best;
    for (const LaunchConfig& c : grid_stride_candidates(p.n, gpu, 1024))
      if (c.describe() == t_json["tuned"]) best = c;
    json check;
    const bool right = std::string(kernel) == "saxpy"
                           ? check_saxpy(*session, *cubin_module, p, best, check)
                           : check_reduce(*session, *cubin_module, p, best, check);
    t_json["tuned_result_correct"] = right;
    ok &= right;
    std::cout << kernel << ": tuned " << t_json["tuned"] << " " << t_json["tuned_median_ms"]
              << " ms; best fixed " << t_json["best_fixed"] << " " << t_json["best_fixed_median_ms"]
              << " ms; ratio " << t_json["tuned_over_best_fixed"] << "; naive ratio "
              << t_json["tuned_over_naive"] << "\n";
    tuning.push_back(std::move(t_json));
  }
  report["tuning"] = std::move(tuning);
  report["ok"] = ok;
  if (!args.json_out.empty()) std::ofstream(args.json_out) << report.dump(1) << "\n";
  return ok ? 0 : 1;
}
