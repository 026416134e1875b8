// cache_bench: what one stage's cache lookup costs.
//
//  1. Orchestrator::prepare on a memory hit (unscoped and in a tenant scope), a
//     disk hit and a miss (compile), side by side in one run. The compiler is a fake with a FIXED
//     cost (a busy-wait of --compile-us microseconds, default 1000) so the miss figure is that cost
//     plus the cache's overhead; a bare write_file_atomic of the same bytes is timed beside it,
//     since on a slow file system creating the file dominates.
//  2. How lookup time grows with the number of cached entries: a bare
//     unordered_map (baseline), MemoryTier::lookup and Orchestrator::prepare
//     (memory hits) at 100 .. 100,000 entries, and DiskTier::open/load at 100 and
//     1,000 files (10,000 with --large-disk: every entry is a file, and writing
//     them is slow on a slow disk).
//
// Every figure is the median over batches (per operation, in microseconds).
#include "fdo/cache/disk_tier.h"
#include "fdo/cache/keys.h"
#include "fdo/cache/memory_key_store.h"
#include "fdo/cache/memory_tier.h"
#include "fdo/cache/orchestrator.h"
#include "fdo/util/hash.h"
#include "fdo/util/log.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <unistd.h>
#include <unordered_map>
#include <vector>

using namespace fdo;
using namespace fdo::cache;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

namespace {

struct Options {
  long compile_us = 1000;
  std::size_t object_bytes = 16 * 1024;
  bool quick = false;
  bool large_disk = false;
};

class FixedCostCompiler : public Compiler {
public:
  FixedCostCompiler(long cost_us, std::size_t object_bytes)
      : cost_(std::chrono::microseconds(cost_us)), object_bytes_(object_bytes) {}
  std::string identity() const override { return "bench-compiler;llvm-16;x86_64"; }
  Expected<Identification> identify(const Program& p) override {
    return Identification{blake3_hex(p.bytes)};
  }
  Expected<CompiledOutput> compile(const Program& p, const ProfileRef&, CompileMode,
                                   CompilePriority, const std::shared_ptr<Urgency>&) override {
    auto end = Clock::now() + cost_;
    while (Clock::now() < end) {
    } // busy-wait: a fixed, sleep-jitter-free cost
    CompiledOutput out;
    out.object = std::string(object_bytes_, 'o');
    out.object.replace(0, std::min<std::size_t>(64, object_bytes_), p.ik, 0,
                       std::min<std::size_t>(64, object_bytes_));
    out.metadata = "{}";
    return out;
  }

private:
  std::chrono::microseconds cost_;
  std::size_t object_bytes_;
};

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/fdo-cache-bench-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

std::string program_text(std::size_t i) {
  std::string s = "; ModuleID = 'bench";
  s += std::to_string(i);
  s += "'\ndefine i64 @f(i64 %x) {\n  %r = mul i64 %x, ";
  s += std::to_string(i + 3);
  s += "\n  ret i64 %r\n}\n";
  return s;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Runs `op(i)` batches x per_batch times; returns the median per-op microseconds.
template <class Op> double measure(int batches, int per_batch, Op op) {
  std::vector<double> per_op;
  std::size_t i = 0;
  for (int b = 0; b < batches; ++b) {
    auto start = Clock::now();
    for (int k = 0; k < per_batch; ++k)
      op(i++);
    double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
    per_op.push_back(us / per_batch);
  }
  return median(per_op);
}

std::unique_ptr<Orchestrator> orchestrator(Config c, KeyStore& keys, Compiler& compiler) {
  auto o = Orchestrator::create(std::move(c), keys, compiler);
  if (!o) {
    std::fprintf(stderr, "cache_bench: %s\n", o.error().describe().c_str());
    std::exit(1);
  }
  return std::move(*o);
}

void must(const Expected<StageOutput>& s, Outcome expected) {
  if (!s) {
    std::fprintf(stderr, "cache_bench: prepare failed: %s\n", s.error().describe().c_str());
    std::exit(1);
  }
  if (s->outcome != expected) {
    std::fprintf(stderr, "cache_bench: expected %s, got %s\n",
                 std::string(to_string(expected)).c_str(),
                 std::string(to_string(s->outcome)).c_str());
    std::exit(1);
  }
}

void side_by_side(const Options& opt) {
  const int kPrograms = opt.quick ? 100 : 300;
  std::printf("== one stage's lookup: memory hit vs disk hit vs miss (object %zu bytes, fake "
              "compile busy-waits %ld us)\n",
              opt.object_bytes, opt.compile_us);
  TempDir dir;
  MemoryKeyStore keys;
  FixedCostCompiler compiler(opt.compile_us, opt.object_bytes);
  std::vector<Program> programs;
  for (int i = 0; i < kPrograms; ++i)
    programs.push_back(Program{{}, {}, program_text(i), {}});

  for (Durability durability : {Durability::none, Durability::fsync}) {
    TempDir d;
    Config c;
    c.state_dir = d.path.string();
    c.disk_durability = durability;
    c.tier_up = TierUp::sync;
    MemoryKeyStore k;
    auto o = orchestrator(c, k, compiler);
    int n = durability == Durability::fsync ? kPrograms / 3 : kPrograms;
    // First stages: VK path, stores the entry and the identity-history file.
    double first =
        measure(5, n / 5, [&](std::size_t i) { must(o->prepare(programs[i]), Outcome::compiled); });
    // Recompiles after a profile rewrite: CK path, stores the entry only.
    for (int i = 0; i < n; ++i) {
      ProfileDoc doc;
      doc.functions["f"].counts = {std::uint64_t(i) + 1};
      k.set_profile(blake3_hex(programs[i].bytes), doc);
    }
    double recompile =
        measure(5, n / 5, [&](std::size_t i) { must(o->prepare(programs[i]), Outcome::compiled); });
    // Baseline: the same bytes written with the same atomic-write primitive, no cache.
    std::string bytes(opt.object_bytes + 400, 'o');
    double raw = measure(5, n / 5, [&](std::size_t i) {
      std::string path = (d.path / "raw").string();
      path += std::to_string(i);
      if (!write_file_atomic(path, bytes, durability)) std::abort();
    });
    const char* how = durability == Durability::fsync ? "fsync" : "no fsync";
    double cost = static_cast<double>(opt.compile_us);
    std::printf(
        "  miss, first stage (VK; disk %-8s):    %9.1f us/stage  (%.1f us beyond the compile)\n",
        how, first, first - cost);
    std::printf("  miss, profile rewritten (CK; disk %-8s): %9.1f us/stage  (%.1f us beyond the "
                "compile)\n",
                how, recompile, recompile - cost);
    std::printf("    baseline: one bare write_file_atomic of the object (%-8s): %9.1f us\n", how,
                raw);
  }

  Config c;
  c.state_dir = dir.path.string();
  c.disk_durability = Durability::none;
  c.tier_up = TierUp::sync;
  {
    auto o = orchestrator(c, keys, compiler);
    for (const auto& p : programs)
      must(o->prepare(p), Outcome::compiled);
    double hit = measure(15, 2000, [&](std::size_t i) {
      must(o->prepare(programs[i % programs.size()]), Outcome::memory_hit);
    });
    std::printf("  memory hit (Orchestrator::prepare):       %9.2f us/stage\n", hit);
    // The same programs in a tenant scope: the scope is streamed into the IK
    // hash, so a scoped hit should cost what an unscoped one does.
    std::vector<Program> scoped = programs;
    for (Program& p : scoped) {
      p.scope = "uid:1000";
      must(o->prepare(p), Outcome::compiled);
    }
    double scoped_hit = measure(15, 2000, [&](std::size_t i) {
      must(o->prepare(scoped[i % scoped.size()]), Outcome::memory_hit);
    });
    std::printf("  memory hit, scoped program (uid:1000):   %9.2f us/stage\n", scoped_hit);
  }
  // A memory tier too small to keep anything: every stage reads, checks and decodes the file.
  Config disk_only = c;
  disk_only.memory_budget_bytes = 1;
  auto o = orchestrator(disk_only, keys, compiler);
  double disk = measure(15, 200, [&](std::size_t i) {
    must(o->prepare(programs[i % programs.size()]), Outcome::disk_hit);
  });
  std::printf("  disk hit (read + BLAKE3 check + decode): %9.2f us/stage\n", disk);
}

void scaling(const Options& opt) {
  std::vector<std::size_t> sizes = {100, 1000, 10000, 100000};
  if (opt.quick) sizes = {100, 1000, 10000};
  std::printf("\n== lookup time vs cached entries (memory hits; uniform random keys)\n");
  std::printf("  %8s  %22s  %18s  %22s\n", "entries", "unordered_map::find", "MemoryTier::lookup",
              "Orchestrator::prepare");
  std::mt19937_64 rng(42);
  for (std::size_t n : sizes) {
    // Raw memory tier.
    auto tier = std::move(*MemoryTier::create(std::uint64_t(1) << 40));
    std::vector<std::string> keys;
    keys.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      auto e = std::make_shared<Entry>();
      e->key = virtual_key(initial_key("", program_text(i), "bench"));
      e->object = std::string(256, 'o');
      keys.push_back(e->key);
      (void)tier->insert(std::move(e));
    }
    std::vector<std::size_t> order(200000);
    for (auto& x : order)
      x = rng() % n;
    double raw = measure(15, 10000, [&](std::size_t i) {
      EntryRef r = tier->lookup(keys[order[i % order.size()]]);
      if (!r) std::abort();
    });
    // Baseline: a bare hash map over the same keys, to separate the tier's own
    // cost from the memory hierarchy's.
    std::unordered_map<std::string, std::size_t> bare;
    for (std::size_t i = 0; i < n; ++i)
      bare.emplace(keys[i], i);
    std::size_t sink = 0;
    double map = measure(15, 10000, [&](std::size_t i) {
      sink += bare.find(keys[order[i % order.size()]])->second;
    });
    if (sink == 1) std::printf(" ");

    // The whole stage lookup (IK hash, key maps, profile, tier, explain record).
    MemoryKeyStore ks;
    FixedCostCompiler compiler(0, 256);
    Config c;
    c.memory_budget_bytes = std::uint64_t(8) << 30;
    c.max_tracked_programs = n + 1;
    c.explain_records_per_program = 2;
    auto o = orchestrator(c, ks, compiler);
    std::vector<Program> programs;
    programs.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      programs.push_back(Program{{}, {}, program_text(i), {}});
      must(o->prepare(programs.back()), Outcome::compiled);
    }
    double stage = measure(15, 2000, [&](std::size_t i) {
      must(o->prepare(programs[order[i % order.size()]]), Outcome::memory_hit);
    });
    std::printf("  %8zu  %19.3f us  %15.3f us  %19.3f us\n", n, map, raw, stage);
  }

  std::vector<std::size_t> disk_sizes = {100, 1000};
  if (opt.large_disk) disk_sizes.push_back(10000);
  std::printf("\n== disk tier: DiskTier::load vs entries on disk (4 KiB objects, page cache warm; "
              "%s)\n",
              opt.large_disk ? "up to 10,000 files"
                             : "1,000 files by default to keep the run short; --large-disk adds "
                               "10,000");
  std::printf("  %8s  %14s  %16s\n", "entries", "open (index)", "load (hit)");
  for (std::size_t n : disk_sizes) {
    TempDir d;
    std::vector<std::string> keys;
    {
      DiskTierConfig dc;
      dc.root = d.path.string();
      dc.durability = Durability::none;
      auto tier = std::move(*DiskTier::open(dc));
      for (std::size_t i = 0; i < n; ++i) {
        Entry e;
        std::string ik = initial_key("", program_text(i), "bench");
        e.key = virtual_key(ik);
        e.info.ck = cache_key(ik, no_profile_digest(), CompileMode::instrumented);
        e.info.compiler_identity = "bench";
        e.object = std::string(4096, 'o');
        if (!tier->store(e)) std::abort();
        keys.push_back(e.key);
      }
    }
    DiskTierConfig dc;
    dc.root = d.path.string();
    auto start = Clock::now();
    auto tier = std::move(*DiskTier::open(dc));
    double open_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    double load = measure(15, 200, [&](std::size_t) {
      if (tier->load(keys[rng() % n], "bench").status != LoadStatus::hit) std::abort();
    });
    std::printf("  %8zu  %11.1f ms  %13.2f us\n", n, open_ms, load);
  }
}

} // namespace

int main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--quick")
      opt.quick = true;
    else if (a == "--large-disk")
      opt.large_disk = true;
    else if (a.rfind("--compile-us=", 0) == 0)
      opt.compile_us = std::atol(a.c_str() + 13);
    else if (a.rfind("--object-bytes=", 0) == 0)
      opt.object_bytes = static_cast<std::size_t>(std::atol(a.c_str() + 15));
    else {
      std::fprintf(
          stderr,
          "usage: cache_bench [--quick] [--large-disk] [--compile-us=N] [--object-bytes=N]\n"
          "  --quick           smaller sizes (memory scaling stops at 10,000 entries)\n"
          "  --large-disk      disk scaling up to 10,000 files\n"
          "  --compile-us=N    fixed cost of the fake compile (default 1000)\n"
          "  --object-bytes=N  size of each compiled object (default 16384)\n");
      return 2;
    }
  }
  if (opt.compile_us < 0 || opt.object_bytes == 0) {
    std::fprintf(stderr, "cache_bench: --compile-us must be >= 0 and --object-bytes > 0\n");
    return 2;
  }
  log::set_level(log::Level::warning);
  side_by_side(opt);
  scaling(opt);
  return 0;
}
