// fdo_effect_jit: the timing driver for a kernel compiled by fdo's own JIT in
// this process, with no profile (CompileMode::plain: the canonical IR through
// the same -O2 pipeline and code generator fdod uses, for the host CPU).
// It is the "fdo -O2" column of the FDO-effect bench: beside clang -O2 it shows
// how far fdo's code generation alone is from clang's, so the fdod columns can
// be read as "profile effect" on top of it.
//
// Usage: fdo_effect_jit --ir FILE [--mode plain|instrumented] [--entry NAME]
//                       [--runs N] [--warmup W] [--serve]
// Compiles once, then either times one batch (warm-up calls untimed, then N
// calls each timed with CLOCK_MONOTONIC around the call only) and prints
//   {"checksum": C, "warmup": W, "runs": N, "ns": [...], "compile_ms": X}
// or, with --serve, reads commands from stdin, one per line:
//   run N W    -> one such JSON line per command
//   quit (or end of input) -> exit 0
// so the bench keeps one process per kernel and pays the compile once.
// Exit status: 0 ok, 2 bad arguments or input, 3 the entry returned different
// values on two calls (not deterministic), 1 compile/load failure.
#include "fdo/jit/compiler.h"
#include "fdo/jit/loader.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace {

using namespace fdo;

constexpr long kMaxCount = 100000;

[[noreturn]] void fail(int status, const std::string& what) {
  std::fprintf(stderr, "fdo_effect_jit: %s\n", what.c_str());
  std::exit(status);
}

std::int64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

std::optional<long> parse_count(const std::string& s) {
  if (s.empty()) return std::nullopt;
  char* end = nullptr;
  long v = std::strtol(s.c_str(), &end, 10);
  if (*end != '\0' || v < 0 || v > kMaxCount) return std::nullopt;
  return v;
}

struct Options {
  std::string ir_path;
  std::string entry = "kernel_run";
  CompileMode mode = CompileMode::plain;
  long runs = 5;
  long warmup = 1;
  bool serve = false;
};

Options parse_args(int argc, char** argv) {
  Options o;
  auto usage = [&](const std::string& why) {
    fail(2, why + "\nusage: " + argv[0] +
                " --ir FILE [--mode plain|instrumented] [--entry NAME] [--runs N] [--warmup W]"
                " [--serve]");
  };
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(a + " needs a value");
      return argv[++i];
    };
    if (a == "--ir") {
      o.ir_path = value();
    } else if (a == "--entry") {
      o.entry = value();
    } else if (a == "--mode") {
      std::string m = value();
      if (m == "plain")
        o.mode = CompileMode::plain;
      else if (m == "instrumented")
        o.mode = CompileMode::instrumented;
      else
        usage("--mode expects plain or instrumented (optimized needs a profile: use fdod), got '" +
              m + "'");
    } else if (a == "--runs" || a == "--warmup") {
      std::string v = value();
      std::optional<long> n = parse_count(v);
      if (!n)
        usage(a + " expects an integer in [0, " + std::to_string(kMaxCount) + "], got '" + v + "'");
      (a == "--runs" ? o.runs : o.warmup) = *n;
    } else if (a == "--serve") {
      o.serve = true;
    } else {
      usage("unknown argument '" + a + "'");
    }
  }
  if (o.ir_path.empty()) usage("--ir is required");
  if (o.runs < 1) usage("--runs must be at least 1");
  return o;
}

class Kernel {
public:
  Kernel(const Options& o, double compile_ms, std::unique_ptr<jit::Loader> loader,
         std::unique_ptr<jit::LoadedProgram> program, jit::ThunkFn thunk)
      : opts_(o), compile_ms_(compile_ms), loader_(std::move(loader)), program_(std::move(program)),
        thunk_(thunk) {}

  // One batch: `warmup` untimed calls, then `runs` timed ones. Returns the
  // JSON line, or exits with status 3 when two calls disagree.
  std::string batch(long runs, long warmup) {
    std::vector<std::int64_t> ns;
    ns.reserve(static_cast<std::size_t>(runs));
    for (long i = 0; i < warmup + runs; ++i) {
      std::uint64_t ret = 0;
      const std::int64_t t0 = now_ns();
      thunk_(nullptr, &ret);
      const std::int64_t t1 = now_ns();
      if (!first_) {
        first_ = ret;
      } else if (*first_ != ret) {
        fail(3, opts_.entry + " returned " + std::to_string(ret) + ", earlier " +
                    std::to_string(*first_) + ": not deterministic");
      }
      if (i >= warmup) ns.push_back(t1 - t0);
    }
    std::ostringstream out;
    out << "{\"checksum\": " << *first_ << ", \"warmup\": " << warmup << ", \"runs\": " << runs
        << ", \"mode\": \"" << to_string(opts_.mode) << "\", \"compile_ms\": " << compile_ms_
        << ", \"ns\": [";
    for (std::size_t i = 0; i < ns.size(); ++i)
      out << (i ? ", " : "") << ns[i];
    out << "]}";
    return out.str();
  }

private:
  Options opts_;
  double compile_ms_;
  std::unique_ptr<jit::Loader> loader_; // must outlive program_
  std::unique_ptr<jit::LoadedProgram> program_;
  jit::ThunkFn thunk_;
  std::optional<std::uint64_t> first_;
};

Kernel build(const Options& o) {
  std::ifstream in(o.ir_path, std::ios::binary);
  if (!in) fail(2, "cannot read " + o.ir_path);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();

  jit::CompileRequest req;
  req.mode = o.mode;
  const std::int64_t t0 = now_ns();
  Expected<jit::CompileResult> compiled = jit::compile(text, req);
  const double compile_ms = static_cast<double>(now_ns() - t0) / 1e6;
  if (!compiled) fail(1, o.ir_path + ": " + compiled.error().describe());

  Expected<std::unique_ptr<jit::Loader>> loader = jit::Loader::create();
  if (!loader) fail(1, "loader: " + loader.error().describe());
  Expected<std::unique_ptr<jit::LoadedProgram>> program =
      (*loader)->load(compiled->object, *compiled);
  if (!program) fail(1, o.ir_path + ": load: " + program.error().describe());
  bool found = false;
  for (const jit::EntryInfo& e : (*program)->entries())
    if (e.name == o.entry) {
      found = true;
      if (!e.param_types.empty())
        fail(2, o.entry + " takes " + std::to_string(e.param_types.size()) +
                    " parameter(s); this driver calls entries without arguments");
    }
  if (!found) fail(2, o.ir_path + " has no entry '" + o.entry + "'");
  Expected<jit::ThunkFn> thunk = (*program)->thunk(o.entry);
  if (!thunk) fail(1, thunk.error().describe());
  return Kernel(o, compile_ms, std::move(*loader), std::move(*program), *thunk);
}

} // namespace

int main(int argc, char** argv) {
  const Options opts = parse_args(argc, argv);
  Kernel kernel = build(opts);
  if (!opts.serve) {
    std::printf("%s\n", kernel.batch(opts.runs, opts.warmup).c_str());
    return 0;
  }
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream words(line);
    std::string cmd, runs_s, warmup_s, extra;
    words >> cmd >> runs_s >> warmup_s >> extra;
    if (cmd.empty()) continue;
    if (cmd == "quit") return 0;
    std::optional<long> runs = parse_count(runs_s), warmup = parse_count(warmup_s);
    if (cmd != "run" || !runs || *runs < 1 || !warmup || !extra.empty())
      fail(2, "bad command '" + line + "' (expected 'run RUNS WARMUP' or 'quit')");
    std::printf("%s\n", kernel.batch(*runs, *warmup).c_str());
    std::fflush(stdout);
  }
  return 0;
}
