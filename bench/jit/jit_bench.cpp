// jit_bench: how long the JIT takes, measured side by side in one run.
//   - compile latency (parse -> object bytes) per mode, for a small module
//     (tests/jit/fixtures/loop_branch.ll) and a ~2,000-line generated one;
//   - object load+link latency (ORC/JITLink, symbols resolved, thunks found)
//     and unload.
// Every figure is the median of repeated runs; phase columns are wall ms.
// Usage: jit_bench [repeat-scale]
#include "fdo/jit/compiler.h"
#include "fdo/jit/loader.h"
#include "gen_module.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

using namespace fdo;
using namespace fdo::jit;
using Clock = std::chrono::steady_clock;

namespace {

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "jit_bench: %s\n", what.c_str());
  std::exit(1);
}

template <class T> T must(Expected<T> e, const char* what) {
  if (!e) die(std::string(what) + ": " + e.error().describe());
  return std::move(e).value();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// CPU time of this thread: less sensitive than wall time to other load on
// the machine (both are printed).
double thread_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) die("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::size_t count_lines(const std::string& s) {
  return std::count(s.begin(), s.end(), '\n');
}

struct Module {
  std::string name;
  std::string text;
  std::string entry;
  std::uint64_t arg;
  int runs;
};

// Runs the instrumented object once to get a realistic profile.
ProfileDoc profile_for(const Module& m, Loader& loader) {
  CompileRequest req;
  req.mode = CompileMode::instrumented;
  CompileResult r = must(compile(m.text, req), "instrumented compile");
  auto program = must(loader.load(r.object, r), "load instrumented");
  must(program->call(m.entry, std::vector<std::uint64_t>{m.arg}), "run instrumented");
  ProfileDoc doc;
  auto counts = program->read_counters();
  for (const InstrumentedFunction& f : r.counters_layout)
    doc.functions[f.pgo_name] =
        FunctionProfile{.cfg_hash = f.cfg_hash, .counts = counts[f.pgo_name]};
  return doc;
}

void bench_module(const Module& m, Loader& loader) {
  std::printf("\n%s: %zu lines of IR, %zu bytes\n", m.name.c_str(), count_lines(m.text),
              m.text.size());
  const ProfileDoc profile = profile_for(m, loader);
  std::printf("  %-15s %9s %9s %8s %8s %9s %8s %8s %9s %8s\n", "mode", "wall ms", "cpu ms", "parse",
              "canon", "instr/ann", "optimize", "codegen", "object B", ".text B");
  std::vector<std::pair<std::string, CompileResult>> objects;
  struct Variant {
    CompileMode mode;
    BlockLocations blocks;
  };
  // The last row is the optimized compile without the synthetic debug
  // locations and the block map: beside the row above it, what sample
  // attribution to IR blocks costs in compile time and object size.
  for (Variant v : {Variant{CompileMode::plain, BlockLocations::on},
                    Variant{CompileMode::instrumented, BlockLocations::on},
                    Variant{CompileMode::optimized, BlockLocations::on},
                    Variant{CompileMode::optimized, BlockLocations::off}}) {
    const CompileMode mode = v.mode;
    CompileRequest req;
    req.mode = mode;
    req.block_locations = v.blocks;
    req.profile = mode == CompileMode::optimized ? &profile : nullptr;
    std::vector<double> total, cpu, parse, canon, annotate, optimize, codegen;
    CompileResult last;
    for (int i = 0; i < m.runs; ++i) {
      Clock::time_point start = Clock::now();
      const double cpu_start = thread_cpu_ms();
      last = must(compile(m.text, req), "compile");
      cpu.push_back(thread_cpu_ms() - cpu_start);
      total.push_back(ms_since(start));
      parse.push_back(last.times.parse / 1000.0);
      canon.push_back(last.times.canonicalize / 1000.0);
      annotate.push_back(last.times.instrument_or_annotate / 1000.0);
      optimize.push_back(last.times.optimize / 1000.0);
      codegen.push_back(last.times.codegen / 1000.0);
    }
    const std::string label =
        std::string(to_string(mode)) + (v.blocks == BlockLocations::off ? " -bmap" : "");
    std::printf("  %-15s %9.2f %9.2f %8.2f %8.2f %9.2f %8.2f %8.2f %9zu %8zu\n", label.c_str(),
                median(total), median(cpu), median(parse), median(canon), median(annotate),
                median(optimize), median(codegen), last.object.size(), last.code_size);
    objects.emplace_back(label, std::move(last));
  }

  std::printf("  %-15s %12s %12s %12s\n", "object", "load+link ms", "first call ms", "unload ms");
  for (auto& [mode, r] : objects) {
    std::vector<double> load, first_call, unload;
    for (int i = 0; i < m.runs * 3; ++i) {
      Clock::time_point start = Clock::now();
      auto program = must(loader.load(r.object, r), "load");
      load.push_back(ms_since(start));
      start = Clock::now();
      must(program->call(m.entry, std::vector<std::uint64_t>{1}), "call");
      first_call.push_back(ms_since(start));
      start = Clock::now();
      if (auto s = program->unload(); !s) die("unload: " + s.error().describe());
      unload.push_back(ms_since(start));
    }
    std::printf("  %-15s %12.3f %12.3f %12.3f\n", mode.c_str(), median(load), median(first_call),
                median(unload));
  }
}

} // namespace

int main(int argc, char** argv) {
  const int scale = argc > 1 ? std::max(1, std::atoi(argv[1])) : 1;
  const CompilerIdentity id = host_identity();
  std::printf("jit_bench: LLVM %s, %s, cpu %s, pipeline v%d; medians\n", id.llvm_version.c_str(),
              id.triple.c_str(), id.cpu.c_str(), id.pipeline_version);
  auto loader = must(Loader::create(), "loader");
  // Warm up LLVM's one-time initialisation so it is not billed to a mode.
  must(analyze("define void @warm() {\n  ret void\n}\n"), "warm-up");

  std::vector<Module> modules = {
      {"small (tests/jit/fixtures/loop_branch.ll)",
       read_text(std::string(FDO_SOURCE_DIR) + "/tests/jit/fixtures/loop_branch.ll"), "run", 1000,
       15 * scale},
      {"large (generated, 48 functions)", bench::generate_module(48), "bench_run", 50, 3 * scale},
  };
  for (const Module& m : modules)
    bench_module(m, *loader);
  return 0;
}
