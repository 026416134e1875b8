// The remote object tier against a real redis-server (tests/support/
// redis_server.h): hit, miss, corrupt, identity mismatch, size cap, a server
// that stops, freezes and comes back; then two orchestrators (two "hosts")
// sharing one Redis. Skips with a printed reason where redis-server is missing.
#include "fakes.h"
#include "fdo/cache/disk_tier.h"
#include "fdo/cache/keys.h"
#include "fdo/cache/memory_key_store.h"
#include "fdo/cache/orchestrator.h"
#include "fdo/cache/redis_tier.h"
#include "support/redis_server.h"
#include "support/skip.h"

#include <catch2/catch.hpp>
#include <hiredis/hiredis.h>
#include <thread>

using namespace fdo;
using namespace fdo::cache;
using namespace fdo::cache::testing;
using fdo::test_support::RedisServer;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

const std::string kIdentity = "llvm-16.0.6;fdo-0.1;passes-1;x86_64-pc-linux-gnu;skylake;+avx2";

#define SKIP_WITHOUT_REDIS()                                                                       \
  if (!RedisServer::available()) {                                                                 \
    FDO_SKIP(RedisServer::skip_reason());                                                          \
  }

std::unique_ptr<RedisTier> tier_for(const std::string& url,
                                    milliseconds timeout = milliseconds(200),
                                    std::uint64_t max_entry = 1 << 20,
                                    milliseconds retry_min = milliseconds(50)) {
  RedisTierConfig c;
  auto e = parse_redis_endpoint(url);
  REQUIRE(e);
  c.endpoint = *e;
  c.timeout = timeout;
  c.max_entry_bytes = max_entry;
  c.retry_min = retry_min;
  c.retry_max = std::max(retry_min * 4, milliseconds(200));
  auto t = RedisTier::create(std::move(c));
  REQUIRE(t);
  return std::move(*t);
}

std::shared_ptr<Entry> sample_entry(const std::string& tag, std::size_t object_bytes = 64,
                                    const std::string& identity = kIdentity) {
  auto e = std::make_shared<Entry>();
  std::string ik = initial_key("", "program " + tag, identity);
  e->key = virtual_key(ik);
  e->info.ck = cache_key(ik, blake3_hex("digest"), CompileMode::instrumented);
  e->info.compiler_identity = identity;
  e->info.pk = blake3_hex("pk\n" + tag);
  e->info.profile_digest = blake3_hex("digest");
  e->info.mode = CompileMode::instrumented;
  e->info.program_hash = blake3_hex("bytes\n" + tag);
  e->info.created_unix_ms = 1700000000000;
  e->object = std::string(object_bytes, 'o');
  e->metadata = "{\"tag\":\"" + tag + "\"}";
  return e;
}

// A raw connection to the test server, to read and damage what the tier wrote.
class RawRedis {
public:
  explicit RawRedis(const RedisServer& server) {
    ctx_ = redisConnectUnix(server.socket_path().c_str());
    REQUIRE(ctx_);
    REQUIRE(ctx_->err == 0);
  }
  ~RawRedis() { redisFree(ctx_); }
  void set(const std::string& key, const std::string& value) {
    auto* r = static_cast<redisReply*>(
        redisCommand(ctx_, "SET %b %b", key.data(), key.size(), value.data(), value.size()));
    REQUIRE(r);
    freeReplyObject(r);
  }
  std::optional<std::string> get(const std::string& key) {
    auto* r = static_cast<redisReply*>(redisCommand(ctx_, "GET %b", key.data(), key.size()));
    REQUIRE(r);
    std::optional<std::string> out;
    if (r->type == REDIS_REPLY_STRING) out = std::string(r->str, r->len);
    freeReplyObject(r);
    return out;
  }

private:
  redisContext* ctx_ = nullptr;
};

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

} // namespace

TEST_CASE("redis endpoints parse and bad ones are refused with the reason", "[cache][redis]") {
  auto tcp = parse_redis_endpoint("redis://10.0.0.5:6380");
  REQUIRE(tcp);
  CHECK(tcp->kind == RedisEndpoint::Kind::tcp);
  CHECK(tcp->host == "10.0.0.5");
  CHECK(tcp->port == 6380);
  auto dflt = parse_redis_endpoint("redis://cache.example/");
  REQUIRE(dflt);
  CHECK(dflt->host == "cache.example");
  CHECK(dflt->port == 6379);
  auto v6 = parse_redis_endpoint("redis://[::1]:7000");
  REQUIRE(v6);
  CHECK(v6->host == "::1");
  CHECK(v6->port == 7000);
  auto unix1 = parse_redis_endpoint("unix:/run/redis/redis.sock");
  REQUIRE(unix1);
  CHECK(unix1->kind == RedisEndpoint::Kind::unix_socket);
  CHECK(unix1->path == "/run/redis/redis.sock");
  auto unix3 = parse_redis_endpoint("unix:///run/redis.sock");
  REQUIRE(unix3);
  CHECK(unix3->path == "/run/redis.sock");

  for (auto [url, why] :
       std::vector<std::pair<std::string, std::string>>{{"http://x", "unknown scheme"},
                                                        {"redis://", "no host"},
                                                        {"redis://h:0", "port"},
                                                        {"redis://h:65536", "port"},
                                                        {"redis://h:12x", "port"},
                                                        {"redis://u:p@h", "credentials"},
                                                        {"redis://h/2", "database"},
                                                        {"rediss://h", "TLS"},
                                                        {"unix:relative.sock", "absolute"},
                                                        {"unix:", "absolute"},
                                                        {"redis://::1", "IPv6"}}) {
    auto e = parse_redis_endpoint(url);
    INFO(url);
    REQUIRE_FALSE(e);
    CHECK(e.error().code() == Errc::invalid_argument);
    CHECK_THAT(e.error().message(), Catch::Contains(why));
  }
}

TEST_CASE("redis tier: a written entry is read back whole - an absent key is a miss",
          "[cache][redis]") {
  SKIP_WITHOUT_REDIS();
  RedisServer server(RedisServer::Listen::unix_and_tcp);
  for (const std::string& url : {server.unix_url(), server.tcp_url()}) {
    INFO(url);
    auto tier = tier_for(url);
    auto e = sample_entry("hit-" + url);
    tier->store(e);
    tier->flush();
    RemoteFetch f = tier->fetch(e->key, kIdentity);
    REQUIRE(f.status == RemoteFetchStatus::hit);
    CHECK(f.entry->key == e->key);
    CHECK(f.entry->info == e->info);
    CHECK(f.entry->object == e->object);
    CHECK(f.entry->metadata == e->metadata);
    CHECK(tier->fetch(virtual_key(initial_key("", "absent", kIdentity)), kIdentity).status ==
          RemoteFetchStatus::miss);
    RemoteTierStats s = tier->stats();
    CHECK(s.state == RemoteState::up);
    CHECK(s.hits == 1);
    CHECK(s.misses == 1);
    CHECK(s.stores == 1);
    CHECK(s.store_queue_bytes == 0);
    CHECK(s.endpoint == url);
  }
}

TEST_CASE("redis tier: a damaged entry is a counted miss - never returned", "[cache][redis]") {
  SKIP_WITHOUT_REDIS();
  RedisServer server;
  auto tier = tier_for(server.unix_url());
  RawRedis raw(server);
  auto e = sample_entry("corrupt");
  tier->store(e);
  tier->flush();
  std::string rkey = tier->redis_key(e->key);
  std::optional<std::string> bytes = raw.get(rkey);
  REQUIRE(bytes);
  CHECK(*bytes == encode_entry(*e)); // the disk tier's checksummed encoding

  SECTION("one flipped byte in the object") {
    (*bytes)[bytes->size() - 30] ^= 0x20;
    raw.set(rkey, *bytes);
  }
  SECTION("truncated") {
    raw.set(rkey, bytes->substr(0, bytes->size() / 2));
  }
  SECTION("garbage") {
    raw.set(rkey, "this is not an fdo cache entry at all, just text.........");
  }
  SECTION("a valid entry of another key stored under this one") {
    raw.set(rkey, encode_entry(*sample_entry("someone-else")));
  }
  RemoteFetch f = tier->fetch(e->key, kIdentity);
  CHECK(f.status == RemoteFetchStatus::corrupt);
  CHECK_FALSE(f.entry);
  CHECK_FALSE(f.problem.empty());
  CHECK(tier->stats().corrupt == 1);
  CHECK(tier->stats().hits == 0);
}

TEST_CASE("redis tier: an entry of another compiler identity is a counted miss", "[cache][redis]") {
  SKIP_WITHOUT_REDIS();
  RedisServer server;
  auto tier = tier_for(server.unix_url());
  auto e = sample_entry("identity", 64, "llvm-16.0.6;fdo-0.1;passes-1;aarch64-linux-gnu;neoverse");
  tier->store(e);
  tier->flush();
  RemoteFetch f = tier->fetch(e->key, kIdentity);
  CHECK(f.status == RemoteFetchStatus::identity_mismatch);
  CHECK_FALSE(f.entry);
  CHECK_THAT(f.problem, Catch::Contains("aarch64"));
  CHECK(tier->stats().identity_mismatches == 1);
}

TEST_CASE("redis tier: entries over the cap are neither written nor read whole", "[cache][redis]") {
  SKIP_WITHOUT_REDIS();
  RedisServer server;
  auto tier = tier_for(server.unix_url(), milliseconds(200), 4096);
  RawRedis raw(server);
  auto big = sample_entry("big", 10000);
  tier->store(big);
  tier->flush();
  CHECK_FALSE(raw.get(tier->redis_key(big->key)));
  CHECK(tier->stats().too_large == 1);
  CHECK(tier->stats().stores == 0);

  // Another host with a larger cap wrote it: this one reads at most the cap.
  raw.set(tier->redis_key(big->key), encode_entry(*big));
  RemoteFetch f = tier->fetch(big->key, kIdentity);
  CHECK(f.status == RemoteFetchStatus::too_large);
  CHECK(tier->stats().too_large == 2);

  auto small = sample_entry("small", 100);
  tier->store(small);
  tier->flush();
  CHECK(tier->fetch(small->key, kIdentity).status == RemoteFetchStatus::hit);
}

TEST_CASE("redis tier: a stopped server is a reported miss within the bound - the tier "
          "recovers when it is back",
          "[cache][redis]") {
  SKIP_WITHOUT_REDIS();
  RedisServer server;
  const milliseconds timeout(100);
  // A backoff long enough that the checks below run inside it on a busy machine.
  auto tier = tier_for(server.unix_url(), timeout, 1 << 20, milliseconds(1000));
  auto e = sample_entry("outage");
  tier->store(e);
  tier->flush();
  REQUIRE(tier->fetch(e->key, kIdentity).status == RemoteFetchStatus::hit);

  server.stop();
  auto t0 = Clock::now();
  RemoteFetch f = tier->fetch(e->key, kIdentity);
  double first_ms = ms_since(t0);
  CHECK(f.status == RemoteFetchStatus::unavailable);
  CHECK(first_ms < 2 * timeout.count() + 400);
  RemoteTierStats s = tier->stats();
  CHECK(s.state == RemoteState::down);
  CHECK_FALSE(s.last_error.empty());
  CHECK(s.errors >= 1);

  // While backing off, lookups answer without touching the network: no
  // further connect is attempted (each would count as an error).
  std::uint64_t errors = s.errors;
  f = tier->fetch(e->key, kIdentity);
  CHECK(f.status == RemoteFetchStatus::unavailable);
  CHECK_THAT(f.problem, Catch::Contains("remote tier down"));
  CHECK(tier->stats().errors == errors);
  // A write during the outage is dropped and counted, not queued forever.
  tier->store(sample_entry("during-outage"));
  tier->flush();
  CHECK(tier->stats().store_failures >= 1);

  server.start(); // empty: no persistence
  RemoteFetch again;
  auto deadline = Clock::now() + std::chrono::seconds(5);
  do {
    std::this_thread::sleep_for(milliseconds(25));
    again = tier->fetch(e->key, kIdentity);
  } while (again.status == RemoteFetchStatus::unavailable && Clock::now() < deadline);
  CHECK(again.status == RemoteFetchStatus::miss);
  tier->store(e);
  tier->flush();
  CHECK(tier->fetch(e->key, kIdentity).status == RemoteFetchStatus::hit);
  s = tier->stats();
  CHECK(s.state == RemoteState::up);
  CHECK(s.reconnects >= 1);
}

TEST_CASE("redis tier: a server that accepts but never answers costs one timeout",
          "[cache][redis]") {
  SKIP_WITHOUT_REDIS();
  RedisServer server;
  const milliseconds timeout(100);
  auto tier = tier_for(server.unix_url(), timeout);
  auto e = sample_entry("frozen");
  REQUIRE(tier->fetch(e->key, kIdentity).status == RemoteFetchStatus::miss); // connected
  server.freeze();
  auto t0 = Clock::now();
  RemoteFetch f = tier->fetch(e->key, kIdentity);
  double ms = ms_since(t0);
  server.thaw();
  CHECK(f.status == RemoteFetchStatus::unavailable);
  CHECK_THAT(f.problem, Catch::Contains("timed out"));
  CHECK(ms >= timeout.count() - 5);
  CHECK(ms < 2 * timeout.count() + 400);
  CHECK(tier->stats().state == RemoteState::down);
}

TEST_CASE("redis tier: bad configurations are refused", "[cache][redis]") {
  RedisTierConfig c;
  c.endpoint = *parse_redis_endpoint("redis://localhost");
  c.timeout = milliseconds(0);
  CHECK(RedisTier::create(c).error().code() == Errc::invalid_argument);
  c.timeout = milliseconds(10);
  c.max_entry_bytes = 10;
  CHECK(RedisTier::create(c).error().code() == Errc::invalid_argument);
  c.max_entry_bytes = 1 << 20;
  c.retry_max = milliseconds(1);
  c.retry_min = milliseconds(5);
  CHECK(RedisTier::create(c).error().code() == Errc::invalid_argument);
}

// ---------------------------------------------------------------- two hosts

namespace {

struct Host {
  Host(const std::string& url, std::shared_ptr<RemoteTier> remote = nullptr) {
    tier = remote ? std::move(remote) : std::shared_ptr<RemoteTier>(tier_for(url));
    Config c;
    c.tier_up = TierUp::sync;
    c.state_dir = dir.str();
    c.disk_durability = Durability::none;
    c.remote = tier;
    auto o = Orchestrator::create(c, keys, compiler);
    REQUIRE(o);
    orch = std::move(*o);
  }
  StageOutput stage(const std::string& bytes) {
    auto r = orch->prepare(as_program(bytes));
    if (!r) FAIL("prepare failed: " << r.error().describe());
    return std::move(*r);
  }
  TempDir dir;
  MemoryKeyStore keys;
  FakeCompiler compiler;
  std::shared_ptr<RemoteTier> tier;
  std::unique_ptr<Orchestrator> orch;
};

} // namespace

TEST_CASE("two hosts sharing redis: B's first stage is served from A's compile",
          "[cache][redis][orchestrator]") {
  SKIP_WITHOUT_REDIS();
  RedisServer server;
  Host a(server.unix_url()), b(server.unix_url());
  std::string prog = program("shared");
  StageOutput sa = a.stage(prog);
  CHECK(sa.outcome == Outcome::compiled);
  a.tier->flush();

  StageOutput sb = b.stage(prog);
  CHECK(sb.outcome == Outcome::remote_hit);
  CHECK(sb.explanation.reason == Reason::virtual_first_stage);
  CHECK_THAT(sb.explanation.text, Catch::Contains("remote tier"));
  CHECK(b.compiler.compiles() == 0);
  CHECK(sb.entry->object == sa.entry->object);
  CHECK(sb.ik == sa.ik);
  // Stored locally: B's next stage hits memory, and its disk has the file.
  CHECK(b.stage(prog).outcome == Outcome::memory_hit);
  REQUIRE(b.orch->disk_tier());
  CHECK(b.orch->disk_tier()->contains(sb.storage_key));
  Stats st = b.orch->stats();
  REQUIRE(st.remote);
  CHECK(st.remote->hits == 1);
  CHECK(st.compiles == 0);
  CHECK(to_json(st)["remote"]["state"] == "up");

  std::vector<ExplainRecord> records = b.orch->explain(sb.ik);
  REQUIRE(records.size() == 2);
  CHECK(records[0].outcome == Outcome::remote_hit);
}

TEST_CASE("two hosts sharing redis: a corrupt remote entry is recompiled and reported",
          "[cache][redis][orchestrator]") {
  SKIP_WITHOUT_REDIS();
  RedisServer server;
  Host a(server.unix_url()), b(server.unix_url());
  RawRedis raw(server);
  std::string prog = program("damaged");
  StageOutput sa = a.stage(prog);
  a.tier->flush();
  std::string rkey = static_cast<RedisTier&>(*a.tier).redis_key(sa.storage_key);
  std::optional<std::string> bytes = raw.get(rkey);
  REQUIRE(bytes);
  (*bytes)[bytes->size() - 5] ^= 1;
  raw.set(rkey, *bytes);

  StageOutput sb = b.stage(prog);
  CHECK(sb.outcome == Outcome::compiled);
  CHECK(sb.explanation.reason == Reason::corrupt_in_remote);
  CHECK_THAT(sb.explanation.text, Catch::Contains("was not used"));
  CHECK(b.compiler.compiles() == 1);
  CHECK(b.orch->stats().remote->corrupt == 1);
  // B's compile replaced the damaged entry for everyone.
  b.tier->flush();
  CHECK(raw.get(rkey) == encode_entry(*sb.entry));
}

TEST_CASE("two hosts sharing redis: with redis down stages compile and say why",
          "[cache][redis][orchestrator]") {
  SKIP_WITHOUT_REDIS();
  RedisServer server;
  Host a(server.unix_url()), b(server.unix_url());
  std::string prog = program("outage");
  a.stage(prog);
  a.tier->flush();
  server.stop();
  StageOutput sb = b.stage(prog);
  CHECK(sb.outcome == Outcome::compiled);
  CHECK_THAT(sb.explanation.text, Catch::Contains("remote tier unavailable"));
  // Local tiers keep serving.
  CHECK(b.stage(prog).outcome == Outcome::memory_hit);
  CHECK(b.orch->stats().remote->state == RemoteState::down);
}

TEST_CASE("two hosts with different compiler identities never share code through redis",
          "[cache][redis][orchestrator]") {
  SKIP_WITHOUT_REDIS();
  RedisServer server;
  Host a(server.unix_url()), b(server.unix_url());
  b.compiler.set_identity("llvm-16.0.6;fdo-0.1;passes-1;x86_64-pc-linux-gnu;znver4;+avx512f");
  std::string prog = program("cpus");
  a.stage(prog);
  a.tier->flush();
  StageOutput sb = b.stage(prog);
  CHECK(sb.outcome == Outcome::compiled); // other IK, so other keys: a plain miss
  CHECK(b.orch->stats().remote->hits == 0);
  CHECK_THAT(sb.entry->object, Catch::Contains("znver4"));
}
