// fdo_effect_jit: the timing driver for a kernel compiled by fdo's own JIT in
// this process, with no profile (CompileMode::plain: the canonical IR through
// the same -O2 pipeline and code generator fdod uses, for the host CPU).
// It is the "fdo -O2" column of the FDO-effect bench: beside clang -O2 it shows
// how far fdo's code generation alone is from clang's, so the fdod columns can
// be read as "profile effect" on top of it.
//
// Usage: fdo_effect_jit --ir FILE [--mode plain|instrumented] [--entry NAME]
//                       [--runs N] [--warmup W] [--serve]
//                       [--emit-ir FILE] [--emit-object FILE]
//                       [--block-locations on|off] [--layout]
//                       [--clock monotonic|thread-cpu] [--profdata FILE]
//                       [--profile FILE] [--text-offset 0|16|32|48]
// --emit-ir / --emit-object write the optimised IR / the relocatable object
// fdo produced (to compare with clang's: `objdump -d`), --block-locations off
// compiles without the synthetic block locations fdod adds (docs/perf.md),
// --layout prints where each function of the program was loaded to stderr
// (address, offset in its 64-byte line, size): code placement is the one thing
// that differs between this column and clang -O2 when the code is the same.
// --clock thread-cpu times the calls with CLOCK_THREAD_CPUTIME_ID instead of
// CLOCK_MONOTONIC: the CPU time of the calling thread, which leaves out the
// time other processes of a loaded host take (driver.c has the same option;
// codegen_gap.py uses it). --profdata FILE compiles in optimized mode with
// the profile an offline clang PGO build of the same source made (seeded as
// `fdoctl profile import` seeds it): fdo's profile-use pipeline on clang's
// profile, to compare with clang's PGO build. --profile FILE compiles in
// optimized mode with a profile document (the JSON fdod keeps: the `profile`
// of one entry of `fdoctl profile export --format json`), exactly as fdod's
// optimized stage compiles it: fdo's own profile, without the trip through
// a .profdata and seeding. --text-offset N compiles with the profile knob
// Knobs::text_offset = N (on the --profdata/--profile document, or alone in
// plain or instrumented mode): the loader starts the code N bytes past a
// 64-byte boundary, as fdod's guard variants `text+N` (docs/jit.md, "Text
// offset"); `placement.py` times the offsets side by side.
// Compiles once, then either times one batch (warm-up calls untimed, then N
// calls each timed with CLOCK_MONOTONIC around the call only) and prints
//   {"checksum": C, "warmup": W, "runs": N, "compile_ms": X, "times_us": {phase: us}, "ns": [...]}
// (times_us: the compile's own phase times, jit::PhaseTimes). --arg N calls an
// entry that takes one integer argument with N (bench/programs' run(n)).
// --threads N lets the compile code-generate a large module in up to N parts
// at once (CompileRequest::threads; docs/jit.md, "Partitioned compiles"); the
// JSON line then says how many parts it made ("partitions"); --parts N
// allows up to N parts (CompileRequest::max_parts; default as many as
// threads), compiled --threads at a time; --part-instructions N makes one
// part per N instructions (CompileRequest::min_part_instructions; default
// jit::kMinPartInstructions).
// --recompile-percent P (with --profile or --profdata, and --threads > 1)
// times incremental recompiles (docs/jit.md, "Incremental recompiles"): two
// rewrites each double the counts (block and value-profile counts) of P per cent of the profile's
// functions at most — "scattered" (every k-th by name) and "clustered" (a run of the program's own
// order from its middle, as when work moves into one subsystem), and a third the counts of one
// function (the clustered run's first) — and each is compiled from nothing ("full_ms"), offered the
// first build's parts ("parts_only_ms"), and offered its parts and its
// pipeline prefix ("ms"); the kernel then runs the clustered
// incremental build, and the JSON line gains
//   "recompile": {"scattered": R, "clustered": R, "single": R},
//   R = {"ms", "full_ms", "parts_only_ms", "optimize_ms", "parts", "reused", "prefix",
//        "functions_changed", "functions", "identical", "differing"}
// ("identical": both incremental object sets are the full compile's, byte
// for byte; "differing": where not, each part whose key or object differs
// from the full compile's — {"build": "parts_only" or "incremental",
// "part": i, "input": "same" (only the object differs) or "differs",
// "origin": how the build came by it}; "optimize_ms": the whole module's pipeline up to the cut;
// "prefix": how the incremental build came by the pipeline's prefix, offered the first build's).
// --after-instrumented (with --profile or --profdata, and --threads > 1)
// first compiles the program in instrumented mode (untimed, no profile: a
// program's first stage in fdod) and offers its pipeline prefix to the timed
// optimized compile, as fdod offers a program's last build's prefix to its
// next compile (docs/jit.md, "The pipeline's prefix"): the program's first
// optimized compile as fdod runs it. The JSON line gains "prefix": how the
// timed compile came by its prefix ("reused" when the instrumented build's
// matched).
// or, with --serve, reads commands from stdin, one per line:
//   run N W    -> one such JSON line per command
//   quit (or end of input) -> exit 0
// so the bench keeps one process per kernel and pays the compile once.
// Exit status: 0 ok, 2 bad arguments or input, 3 the entry returned different
// values on two calls (not deterministic), 1 compile/load failure.
#include "fdo/jit/compiler.h"
#include "fdo/jit/loader.h"
#include "fdo/jit/object_set.h"
#include "fdo/jit/profdata.h"
#include "fdo/util/profile.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iostream>
#include <map>
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

std::int64_t now_ns(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
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
  std::string emit_ir;
  std::string emit_object;
  jit::BlockLocations block_locations = jit::BlockLocations::on;
  bool layout = false;
  clockid_t clock = CLOCK_MONOTONIC;
  std::string profdata;
  std::string profile_json;
  int text_offset = 0;
  std::optional<std::int64_t> arg; // the entry's one integer argument
  unsigned threads = 1;            // CompileRequest::threads
  int recompile_percent = 0;       // 0: no recompile
  bool after_instrumented = false; // offer an instrumented build's prefix
  unsigned parts = 0;              // CompileRequest::max_parts (0: as many as threads)
  std::size_t part_instructions =
      jit::kMinPartInstructions; // CompileRequest::min_part_instructions
};

Options parse_args(int argc, char** argv) {
  Options o;
  auto usage = [&](const std::string& why) {
    fail(2, why + "\nusage: " + argv[0] +
                " --ir FILE [--mode plain|instrumented] [--entry NAME] [--runs N] [--warmup W]"
                " [--serve] [--emit-ir FILE] [--emit-object FILE] [--block-locations on|off]"
                " [--layout] [--clock monotonic|thread-cpu] [--profdata FILE | --profile FILE]"
                " [--text-offset 0|16|32|48] [--arg N] [--threads N]"
                " [--parts N] [--part-instructions N] [--recompile-percent P]"
                " [--after-instrumented]");
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
    } else if (a == "--clock") {
      std::string v = value();
      if (v == "monotonic")
        o.clock = CLOCK_MONOTONIC;
      else if (v == "thread-cpu")
        o.clock = CLOCK_THREAD_CPUTIME_ID;
      else
        usage("--clock expects monotonic or thread-cpu, got '" + v + "'");
    } else if (a == "--profdata") {
      o.profdata = value();
    } else if (a == "--profile") {
      o.profile_json = value();
    } else if (a == "--text-offset") {
      std::string v = value();
      if (v == "0" || v == "16" || v == "32" || v == "48")
        o.text_offset = std::stoi(v);
      else
        usage("--text-offset expects 0, 16, 32 or 48, got '" + v + "'");
    } else if (a == "--arg") {
      std::string v = value();
      char* end = nullptr;
      errno = 0;
      const long long n = std::strtoll(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || errno == ERANGE)
        usage("--arg expects a 64-bit integer, got '" + v + "'");
      o.arg = n;
    } else if (a == "--threads") {
      std::string v = value();
      char* end = nullptr;
      const unsigned long n = std::strtoul(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || n < 1 || n > jit::kMaxPartitions)
        usage("--threads expects 1 to " + std::to_string(jit::kMaxPartitions) + ", got '" + v +
              "'");
      o.threads = static_cast<unsigned>(n);
    } else if (a == "--parts") {
      std::string v = value();
      char* end = nullptr;
      const unsigned long n = std::strtoul(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || n < 1 || n > jit::kMaxPartitions)
        usage("--parts expects 1 to " + std::to_string(jit::kMaxPartitions) + ", got '" + v + "'");
      o.parts = static_cast<unsigned>(n);
    } else if (a == "--part-instructions") {
      std::string v = value();
      char* end = nullptr;
      const unsigned long n = std::strtoul(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || n < 100 || n > 100'000'000)
        usage("--part-instructions expects 100 to 100000000, got '" + v + "'");
      o.part_instructions = n;
    } else if (a == "--after-instrumented") {
      o.after_instrumented = true;
    } else if (a == "--recompile-percent") {
      std::string v = value();
      char* end = nullptr;
      const long n = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || n < 1 || n > 100)
        usage("--recompile-percent expects 1 to 100, got '" + v + "'");
      o.recompile_percent = static_cast<int>(n);
    } else if (a == "--layout") {
      o.layout = true;
    } else if (a == "--emit-ir") {
      o.emit_ir = value();
    } else if (a == "--emit-object") {
      o.emit_object = value();
    } else if (a == "--block-locations") {
      std::string v = value();
      if (v == "on")
        o.block_locations = jit::BlockLocations::on;
      else if (v == "off")
        o.block_locations = jit::BlockLocations::off;
      else
        usage("--block-locations expects on or off, got '" + v + "'");
    } else {
      usage("unknown argument '" + a + "'");
    }
  }
  if (o.ir_path.empty()) usage("--ir is required");
  if ((!o.profdata.empty() || !o.profile_json.empty()) && o.mode != CompileMode::plain)
    usage("--profdata and --profile compile in optimized mode: leave --mode out");
  if (!o.profdata.empty() && !o.profile_json.empty())
    usage("--profdata and --profile are alternatives: give one");
  if (o.runs < 1) usage("--runs must be at least 1");
  if (o.recompile_percent != 0 && (o.threads < 2 || (o.profdata.empty() && o.profile_json.empty())))
    usage("--recompile-percent needs --profile or --profdata and --threads 2 or more");
  if (o.after_instrumented && (o.threads < 2 || (o.profdata.empty() && o.profile_json.empty())))
    usage("--after-instrumented needs --profile or --profdata and --threads 2 or more");
  return o;
}

class Kernel {
public:
  Kernel(const Options& o, CompileMode mode, double compile_ms, jit::PhaseTimes times,
         unsigned partitions, std::unique_ptr<jit::Loader> loader,
         std::unique_ptr<jit::LoadedProgram> program, jit::ThunkFn thunk, std::string recompile,
         std::string prefix)
      : opts_(o), mode_(mode), compile_ms_(compile_ms), times_(times), partitions_(partitions),
        loader_(std::move(loader)), program_(std::move(program)), thunk_(thunk),
        recompile_(std::move(recompile)), prefix_(std::move(prefix)) {}

  // One batch: `warmup` untimed calls, then `runs` timed ones. Returns the
  // JSON line, or exits with status 3 when two calls disagree.
  std::string batch(long runs, long warmup) {
    std::vector<std::int64_t> ns;
    ns.reserve(static_cast<std::size_t>(runs));
    for (long i = 0; i < warmup + runs; ++i) {
      std::uint64_t ret = 0;
      std::uint64_t slot = opts_.arg ? static_cast<std::uint64_t>(*opts_.arg) : 0;
      const std::int64_t t0 = now_ns(opts_.clock);
      thunk_(opts_.arg ? &slot : nullptr, &ret);
      const std::int64_t t1 = now_ns(opts_.clock);
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
        << ", \"mode\": \"" << to_string(mode_) << "\", \"compile_ms\": " << compile_ms_
        << ", \"times_us\": {\"parse\": " << times_.parse
        << ", \"canonicalize\": " << times_.canonicalize
        << ", \"instrument_or_annotate\": " << times_.instrument_or_annotate
        << ", \"optimize\": " << times_.optimize << ", \"codegen\": " << times_.codegen
        << "}, \"partitions\": " << partitions_;
    if (!recompile_.empty()) out << ", \"recompile\": " << recompile_;
    if (!prefix_.empty()) out << ", \"prefix\": \"" << prefix_ << "\"";
    out << ", \"ns\": [";
    for (std::size_t i = 0; i < ns.size(); ++i)
      out << (i ? ", " : "") << ns[i];
    out << "]}";
    return out.str();
  }

private:
  Options opts_;
  CompileMode mode_;
  double compile_ms_;
  jit::PhaseTimes times_;
  unsigned partitions_;
  std::unique_ptr<jit::Loader> loader_; // must outlive program_
  std::unique_ptr<jit::LoadedProgram> program_;
  jit::ThunkFn thunk_;
  std::string recompile_; // JSON object, or empty
  std::string prefix_;    // --after-instrumented: how the compile came by its prefix
  std::optional<std::uint64_t> first_;
};

// --recompile-percent: which profiled functions a rewrite moves. Scattered:
// every k-th in name order; clustered: a run of the program's own order (its
// functions by address once linked, a part after another), from its middle,
// as when the work moves into one subsystem. At most `percent` per cent of
// the profile's functions either way.
enum class Spread { scattered, clustered, single };

bool counted(const FunctionProfile& f) {
  return std::any_of(f.counts.begin(), f.counts.end(), [](std::uint64_t c) { return c != 0; });
}

std::vector<std::string> moved_functions(const ProfileDoc& doc, int percent, Spread spread,
                                         const std::vector<jit::FunctionRange>& by_address) {
  const std::size_t most = doc.functions.size() * static_cast<std::size_t>(percent) / 100;
  std::vector<std::string> order; // profiled functions, in the spread's order
  if (spread == Spread::scattered) {
    for (const auto& [name, f] : doc.functions)
      if (counted(f)) order.push_back(name);
    const std::size_t every = std::max<std::size_t>(1, 100 / static_cast<std::size_t>(percent));
    std::vector<std::string> out;
    for (std::size_t i = 0; i < order.size() && out.size() < most; i += every)
      out.push_back(order[i]);
    return out;
  }
  // A PGO name is the symbol, or "file:symbol" for a local.
  std::map<std::string, std::string> by_symbol;
  for (const auto& [name, f] : doc.functions)
    if (counted(f))
      by_symbol[name.substr(name.rfind(':') == std::string::npos ? 0 : name.rfind(':') + 1)] = name;
  for (const jit::FunctionRange& r : by_address)
    if (auto it = by_symbol.find(r.name); it != by_symbol.end()) order.push_back(it->second);
  const std::size_t start = order.size() * 45 / 100;
  const std::size_t count = spread == Spread::single ? 1 : most;
  return {order.begin() + static_cast<std::ptrdiff_t>(start),
          order.begin() + static_cast<std::ptrdiff_t>(std::min(order.size(), start + count))};
}

// One rewrite compiled from nothing and from `first`'s parts: its JSON.
std::string time_recompile(const std::string& text, const jit::CompileRequest& req,
                           const jit::CompileResult& first, const std::vector<std::string>& moved,
                           const std::string& ir_path, std::optional<jit::CompileResult>* keep) {
  ProfileDoc doc = *req.profile;
  // A moved function ran twice as often: its block counts, and the counts
  // of its value profiles, double.
  for (const std::string& name : moved) {
    FunctionProfile& f = doc.functions.at(name);
    for (std::uint64_t& c : f.counts)
      c *= 2;
    for (std::vector<ValueSite>* sites : {&f.indirect_calls, &f.memop_sizes})
      for (ValueSite& site : *sites)
        for (auto& [value, count] : site)
          count *= 2;
    for (ArgValues& a : f.arg_values) {
      for (auto& [value, count] : a.values)
        count *= 2;
      a.other *= 2;
    }
  }
  jit::CompileRequest again = req;
  again.profile = &doc;
  const std::int64_t f0 = now_ns(CLOCK_MONOTONIC);
  Expected<jit::CompileResult> full = jit::compile(text, again);
  const double full_ms = static_cast<double>(now_ns(CLOCK_MONOTONIC) - f0) / 1e6;
  if (!full) fail(1, ir_path + ": " + full.error().describe());
  auto objects = jit::unpack_objects(first.object);
  if (!objects || objects->size() != first.part_builds.size())
    fail(1, ir_path + ": the first build has no parts to offer (not split at the inliner)");
  for (std::size_t i = 0; i < objects->size(); ++i) {
    const jit::PartBuild& b = first.part_builds[i];
    again.held_parts.push_back(jit::HeldPart{b.key, b.slice, b.object_hash, (*objects)[i]});
  }
  // Offered the parts alone (as before the prefix was kept), then the parts
  // and the first build's pipeline prefix (docs/jit.md, "The pipeline's prefix").
  const std::int64_t p0 = now_ns(CLOCK_MONOTONIC);
  Expected<jit::CompileResult> parts_only = jit::compile(text, again);
  const double parts_only_ms = static_cast<double>(now_ns(CLOCK_MONOTONIC) - p0) / 1e6;
  if (!parts_only) fail(1, ir_path + ": " + parts_only.error().describe());
  if (first.prefix)
    again.held_prefix =
        jit::HeldPrefix{first.prefix->key, first.prefix->bitcode_hash, first.prefix->bitcode};
  const std::int64_t r0 = now_ns(CLOCK_MONOTONIC);
  Expected<jit::CompileResult> incremental = jit::compile(text, again);
  const double ms = static_cast<double>(now_ns(CLOCK_MONOTONIC) - r0) / 1e6;
  if (!incremental) fail(1, ir_path + ": " + incremental.error().describe());
  std::size_t reused = 0;
  for (const jit::PartBuild& b : incremental->part_builds)
    reused += b.origin == jit::PartOrigin::reused;
  // Where a build differs from the full compile: per part, whether its key
  // (its input) or only its object differs, and how the part was come by.
  std::string differing;
  for (const auto& [name, built] :
       {std::pair<const char*, const jit::CompileResult*>{"parts_only", &*parts_only},
        {"incremental", &*incremental}}) {
    if (built->object == full->object) continue;
    const std::size_t n = std::min(built->part_builds.size(), full->part_builds.size());
    for (std::size_t i = 0; i < n; ++i) {
      const jit::PartBuild& a = built->part_builds[i];
      const jit::PartBuild& f = full->part_builds[i];
      if (a.key == f.key && a.object_hash == f.object_hash) continue;
      differing += std::string(differing.empty() ? "" : ", ") + "{\"build\": \"" + name +
                   "\", \"part\": " + std::to_string(i) + ", \"input\": \"" +
                   (a.key == f.key ? "same" : "differs") + "\", \"origin\": \"" +
                   std::string(jit::to_string(a.origin)) + "\"}";
    }
    if (built->part_builds.size() != full->part_builds.size())
      differing += std::string(differing.empty() ? "" : ", ") + "{\"build\": \"" + name +
                   "\", \"parts\": " + std::to_string(built->part_builds.size()) + "}";
  }
  std::ostringstream r;
  r << "{\"ms\": " << ms << ", \"full_ms\": " << full_ms << ", \"parts_only_ms\": " << parts_only_ms
    << ", \"optimize_ms\": " << static_cast<double>(incremental->times.optimize) / 1e3
    << ", \"parts\": " << incremental->part_builds.size() << ", \"reused\": " << reused
    << ", \"prefix\": \""
    << (incremental->prefix ? jit::to_string(incremental->prefix->origin) : "none")
    << "\", \"functions_changed\": " << moved.size() << ", \"functions\": " << doc.functions.size()
    << ", \"identical\": "
    << (incremental->object == full->object && parts_only->object == full->object ? "true"
                                                                                  : "false")
    << ", \"differing\": [" << differing << "]}";
  if (keep) *keep = std::move(*incremental);
  return r.str();
}

// Writes `bytes` to `path` (nothing when `path` is empty); exits 1 on failure.
void write_file(const std::string& path, const std::string& bytes) {
  if (path.empty()) return;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) fail(1, "cannot write " + path);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(2, "cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Kernel build(const Options& o) {
  const std::string text = read_file(o.ir_path);

  jit::CompileRequest req;
  req.mode = o.mode;
  std::optional<jit::SeededProfile> seeded;
  if (!o.profdata.empty()) {
    Expected<jit::SeededProfile> s = jit::seed_profile(read_file(o.profdata), text);
    if (!s) fail(1, o.profdata + ": " + s.error().describe());
    if (s->matched == 0) fail(1, o.profdata + ": no record matches a function of " + o.ir_path);
    for (const std::string& d : s->dropped)
      std::fprintf(stderr, "fdo_effect_jit: %s: no usable record for %s\n", o.profdata.c_str(),
                   d.c_str());
    seeded = std::move(*s);
    req.mode = CompileMode::optimized;
    req.profile = &seeded->profile;
  }
  std::optional<ProfileDoc> doc;
  if (!o.profile_json.empty()) {
    Expected<ProfileDoc> d = parse_profile(read_file(o.profile_json));
    if (!d) fail(1, o.profile_json + ": " + d.error().describe());
    doc = std::move(*d);
    req.mode = CompileMode::optimized;
    req.profile = &*doc;
  }
  std::optional<ProfileDoc> knobs_only;
  if (o.text_offset != 0) {
    ProfileDoc* target = seeded ? &seeded->profile : doc ? &*doc : &knobs_only.emplace();
    target->knobs.text_offset = o.text_offset;
    req.profile = target; // plain and instrumented mode apply its knobs only
  }
  req.keep_ir = !o.emit_ir.empty();
  req.block_locations = o.block_locations;
  req.threads = o.threads;
  req.max_parts = o.parts;
  req.min_part_instructions = o.part_instructions;
  // The timed compile's request: with --after-instrumented, offered the
  // prefix of an instrumented build of the program (the recompiles below
  // still start from nothing).
  jit::CompileRequest timed = req;
  std::optional<jit::CompileResult> instrumented; // holds the prefix's bitcode
  if (o.after_instrumented) {
    jit::CompileRequest first = req;
    first.mode = CompileMode::instrumented;
    first.profile = nullptr; // a program's first stage has no profile yet
    first.keep_ir = false;
    Expected<jit::CompileResult> built = jit::compile(text, first);
    if (!built) fail(1, o.ir_path + " (instrumented): " + built.error().describe());
    instrumented = std::move(*built);
    if (instrumented->prefix)
      timed.held_prefix =
          jit::HeldPrefix{instrumented->prefix->key, instrumented->prefix->bitcode_hash,
                          instrumented->prefix->bitcode};
  }
  const std::int64_t t0 = now_ns(CLOCK_MONOTONIC);
  Expected<jit::CompileResult> compiled = jit::compile(text, timed);
  const double compile_ms = static_cast<double>(now_ns(CLOCK_MONOTONIC) - t0) / 1e6;
  if (!compiled) fail(1, o.ir_path + ": " + compiled.error().describe());
  std::string recompile;
  if (o.recompile_percent != 0) {
    // The first build's layout, for the clustered rewrite's order.
    Expected<std::unique_ptr<jit::Loader>> l = jit::Loader::create();
    if (!l) fail(1, "loader: " + l.error().describe());
    Expected<std::unique_ptr<jit::LoadedProgram>> linked = (*l)->load(compiled->object, *compiled);
    if (!linked) fail(1, o.ir_path + ": load: " + linked.error().describe());
    const std::vector<jit::FunctionRange> by_address = (*linked)->function_ranges();
    linked->reset();
    std::optional<jit::CompileResult> incremental;
    const std::string scattered = time_recompile(
        text, req, *compiled,
        moved_functions(*req.profile, o.recompile_percent, Spread::scattered, by_address),
        o.ir_path, nullptr);
    const std::string clustered = time_recompile(
        text, req, *compiled,
        moved_functions(*req.profile, o.recompile_percent, Spread::clustered, by_address),
        o.ir_path, &incremental);
    const std::string single = time_recompile(
        text, req, *compiled,
        moved_functions(*req.profile, o.recompile_percent, Spread::single, by_address), o.ir_path,
        nullptr);
    recompile = "{\"scattered\": " + scattered + ", \"clustered\": " + clustered +
                ", \"single\": " + single + "}";
    compiled = std::move(*incremental);
  }
  write_file(o.emit_ir, compiled->ir);
  write_file(o.emit_object, compiled->object);

  Expected<std::unique_ptr<jit::Loader>> loader = jit::Loader::create();
  if (!loader) fail(1, "loader: " + loader.error().describe());
  Expected<std::unique_ptr<jit::LoadedProgram>> program =
      (*loader)->load(compiled->object, *compiled);
  if (!program) fail(1, o.ir_path + ": load: " + program.error().describe());
  if (o.layout)
    for (const jit::FunctionRange& r : (*program)->function_ranges())
      std::fprintf(stderr, "fdo_effect_jit: %s at 0x%llx (+%llu in its 64-byte line), %llu bytes\n",
                   r.name.c_str(), static_cast<unsigned long long>(r.start),
                   static_cast<unsigned long long>(r.start % 64),
                   static_cast<unsigned long long>(r.size));
  bool found = false;
  for (const jit::EntryInfo& e : (*program)->entries())
    if (e.name == o.entry) {
      found = true;
      const std::size_t want = o.arg ? 1 : 0;
      if (e.param_types.size() != want || (o.arg && e.param_types[0].rfind('i', 0) != 0))
        fail(2, o.entry + " takes " + std::to_string(e.param_types.size()) +
                    " parameter(s); this driver calls entries without arguments, or with one"
                    " integer argument (--arg)");
    }
  if (!found) fail(2, o.ir_path + " has no entry '" + o.entry + "'");
  Expected<jit::ThunkFn> thunk = (*program)->thunk(o.entry);
  if (!thunk) fail(1, thunk.error().describe());
  std::string prefix;
  if (o.after_instrumented)
    prefix = compiled->prefix ? std::string(jit::to_string(compiled->prefix->origin)) : "none";
  return Kernel(o, req.mode, compile_ms, compiled->times, compiled->partitions, std::move(*loader),
                std::move(*program), *thunk, std::move(recompile), std::move(prefix));
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
