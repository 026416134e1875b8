// remote_bench: what the remote object tier (Redis) saves, side by side in one
// run. Host A compiles each program with the real LLVM pipeline (jit::compile
// in process, instrumented first stage as fdod does) and writes it to Redis;
// host B, with an empty state dir, runs the first stage of the same programs:
// a remote hit (Redis over a Unix socket, then over loopback TCP). Memory and
// disk hits of host B are printed beside them. A real redis-server is started
// in a temp dir (tests/support/redis_server.h).
//
// Usage: remote_bench [--quick]. Every figure is the median per stage.
#include "fdo/cache/keys.h"
#include "fdo/cache/memory_key_store.h"
#include "fdo/cache/orchestrator.h"
#include "fdo/cache/redis_tier.h"
#include "fdo/jit/compiler.h"
#include "fdo/util/hash.h"
#include "fdo/util/log.h"
#include "gen_module.h"
#include "support/redis_server.h"
#include "support/temp_dir.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

using namespace fdo;
using namespace fdo::cache;
using Clock = std::chrono::steady_clock;
using fdo::test_support::RedisServer;
using fdo::test_support::TempDir;

namespace {

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "remote_bench: %s\n", what.c_str());
  std::exit(1);
}

// The compile a host would run on a miss: LLVM in this process.
class LlvmCompiler : public Compiler {
public:
  std::string identity() const override { return "remote-bench;llvm-16;host"; }
  Expected<Identification> identify(const Program& p) override {
    auto a = jit::analyze(p.bytes);
    if (!a) return std::move(a).error();
    return Identification{a->profile_key};
  }
  Expected<CompiledOutput> compile(const Program& p, const ProfileRef& profile, CompileMode mode,
                                   CompilePriority, const std::shared_ptr<Urgency>&) override {
    jit::CompileRequest req;
    req.mode = mode;
    req.profile = profile.doc.get();
    auto r = jit::compile(p.bytes, req);
    if (!r) return std::move(r).error();
    return CompiledOutput{std::move(r->object), jit::metadata_to_json(*r).dump(), {}};
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

std::unique_ptr<Orchestrator> host(const TempDir& dir, KeyStore& keys, Compiler& compiler,
                                   std::shared_ptr<RemoteTier> remote) {
  Config c;
  c.state_dir = dir.str();
  c.disk_durability = Durability::none;
  c.tier_up = TierUp::sync;
  c.remote = std::move(remote);
  auto o = Orchestrator::create(std::move(c), keys, compiler);
  if (!o) die(o.error().describe());
  return std::move(*o);
}

std::shared_ptr<RemoteTier> redis(const std::string& url) {
  RedisTierConfig c;
  auto e = parse_redis_endpoint(url);
  if (!e) die(e.error().describe());
  c.endpoint = *e;
  c.timeout = std::chrono::milliseconds(1000);
  auto t = RedisTier::create(std::move(c));
  if (!t) die(t.error().describe());
  return std::shared_ptr<RemoteTier>(std::move(*t));
}

// Median microseconds of one prepare per program, each checked for `expected`.
double stages(Orchestrator& o, const std::vector<Program>& programs, Outcome expected) {
  std::vector<double> us;
  for (const Program& p : programs) {
    auto start = Clock::now();
    auto s = o.prepare(p);
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
    if (!s) die("prepare: " + s.error().describe());
    if (s->outcome != expected)
      die("expected " + std::string(to_string(expected)) + ", got " +
          std::string(to_string(s->outcome)));
  }
  return median(us);
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) die("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void run(const char* label, const std::string& module, int count) {
  std::vector<Program> programs;
  for (int i = 0; i < count; ++i) // distinct bytes, so distinct IKs; the same code
    programs.push_back(Program{{}, {}, module + "\n; copy " + std::to_string(i) + "\n", {}});
  RedisServer server(RedisServer::Listen::unix_and_tcp);
  LlvmCompiler compiler;

  TempDir a_dir("fdo-remote-bench-a");
  MemoryKeyStore a_keys;
  auto a_remote = redis(server.unix_url());
  auto a = host(a_dir, a_keys, compiler, a_remote);
  double compile = stages(*a, programs, Outcome::compiled);
  a_remote->flush();

  auto remote_hits = [&](const std::string& url) {
    TempDir dir("fdo-remote-bench-b");
    MemoryKeyStore keys;
    auto b = host(dir, keys, compiler, redis(url));
    return stages(*b, programs, Outcome::remote_hit);
  };
  double unix_hit = remote_hits(server.unix_url());
  double tcp_hit = remote_hits(server.tcp_url());
  // The tier alone: GETRANGE, checksum and decode, without the stage around it.
  std::vector<double> fetch_us;
  {
    auto tier = redis(server.unix_url());
    for (const Program& p : programs) {
      std::string vk = virtual_key(initial_key(p.scope, p.bytes, compiler.identity()));
      auto start = Clock::now();
      RemoteFetch f = tier->fetch(vk, compiler.identity());
      fetch_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
      if (f.status != RemoteFetchStatus::hit) die("fetch: " + f.problem);
    }
  }
  double fetch = median(fetch_us);

  // Host B's own tiers afterwards, for scale.
  TempDir b_dir("fdo-remote-bench-b");
  MemoryKeyStore b_keys;
  double memory_hit = 0, disk_hit = 0;
  {
    auto b = host(b_dir, b_keys, compiler, redis(server.unix_url()));
    stages(*b, programs, Outcome::remote_hit);
    memory_hit = stages(*b, programs, Outcome::memory_hit);
  }
  {
    MemoryKeyStore fresh_keys; // a restarted host B: memory empty, disk kept
    auto b = host(b_dir, fresh_keys, compiler, nullptr);
    disk_hit = stages(*b, programs, Outcome::disk_hit);
  }

  std::printf("\n== %s, %d programs, entry %zu bytes\n", label, count,
              a->stats().memory_bytes / static_cast<std::size_t>(count));
  std::printf("  miss: LLVM compile (first stage, host A)      %10.1f us/stage\n", compile);
  std::printf("  remote hit, Redis over a Unix socket (host B) %10.1f us/stage  (%.0fx faster)\n",
              unix_hit, compile / unix_hit);
  std::printf("  remote hit, Redis over loopback TCP (host B)  %10.1f us/stage  (%.0fx faster)\n",
              tcp_hit, compile / tcp_hit);
  std::printf("    of which RedisTier::fetch (GETRANGE + check)  %10.1f us\n", fetch);
  std::printf("  disk hit (host B after a restart)             %10.1f us/stage\n", disk_hit);
  std::printf("  memory hit (host B)                           %10.2f us/stage\n", memory_hit);
  std::printf("  (a first stage, remote or disk hit, parses the IR once to identify its profile "
              "key)\n");
}

} // namespace

int main(int argc, char** argv) {
  bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  if (argc > 2 || (argc == 2 && !quick)) {
    std::fprintf(stderr, "usage: remote_bench [--quick]\n");
    return 2;
  }
  if (!RedisServer::available()) {
    std::printf("remote_bench: %s\n", RedisServer::skip_reason().c_str());
    return 0;
  }
  log::set_level(log::Level::error);
  run("small module (tests/jit/fixtures/loop_branch.ll)",
      read_text(std::string(FDO_SOURCE_DIR) + "/tests/jit/fixtures/loop_branch.ll"),
      quick ? 10 : 40);
  run("large module (generated, 48 functions)", jit::bench::generate_module(48), quick ? 3 : 10);
  return 0;
}
