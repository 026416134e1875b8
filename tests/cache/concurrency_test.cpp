// Single flight: concurrent stages asking for one key compile once.
#include "fakes.h"
#include "fdo/cache/keys.h"
#include "fdo/cache/memory_key_store.h"
#include "fdo/cache/orchestrator.h"

#include <catch2/catch.hpp>
#include <set>
#include <thread>

using namespace fdo;
using namespace fdo::cache;
using namespace fdo::cache::testing;

namespace {

constexpr int kThreads = 16;

std::unique_ptr<Orchestrator> make(Config c, KeyStore& keys, Compiler& compiler) {
  auto o = Orchestrator::create(std::move(c), keys, compiler);
  REQUIRE(o);
  return std::move(*o);
}

// Starts kThreads stages of `bytes` with the compiler held at its gate, waits
// until one compile is blocked and the other kThreads-1 requests wait on it,
// then opens the gate.
std::vector<Expected<StageOutput>> race(Orchestrator& o, FakeCompiler& compiler,
                                        const std::string& bytes, TierUp policy,
                                        std::uint64_t waits_before) {
  compiler.close_gate();
  std::vector<std::optional<Expected<StageOutput>>> results(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i)
    threads.emplace_back([&, i] { results[i].emplace(o.prepare(as_program(bytes), policy)); });
  bool all_in = eventually([&] {
    return compiler.blocked() == 1 && o.stats().single_flight_waits == waits_before + kThreads - 1;
  });
  compiler.open_gate();
  for (auto& th : threads)
    th.join();
  REQUIRE(all_in);
  std::vector<Expected<StageOutput>> out;
  for (auto& r : results)
    out.push_back(std::move(*r));
  return out;
}

} // namespace

TEST_CASE("16 threads on a new program: one compile - one entry", "[cache][concurrency]") {
  MemoryKeyStore keys;
  FakeCompiler compiler;
  Config c;
  c.tier_up = TierUp::sync;
  auto o = make(c, keys, compiler);
  auto results = race(*o, compiler, program("a"), TierUp::sync, 0);
  CHECK(compiler.compiles() == 1);
  std::set<const Entry*> entries;
  int compiled = 0, joined = 0;
  for (auto& r : results) {
    REQUIRE(r);
    entries.insert(r->entry.get());
    compiled += r->outcome == Outcome::compiled;
    joined += r->outcome == Outcome::joined;
    CHECK(r->storage_key == r->vk);
  }
  CHECK(entries.size() == 1);
  CHECK(compiled == 1);
  CHECK(joined == kThreads - 1);
  CHECK(keys.calls().put_profile_key == 1); // the leader records the mappings once
  CHECK(o->stats().single_flight_waits == kThreads - 1);
}

TEST_CASE("16 threads on one CK after a profile rewrite: exactly one compile",
          "[cache][concurrency]") {
  MemoryKeyStore keys;
  FakeCompiler compiler;
  Config c;
  c.tier_up = TierUp::sync;
  auto o = make(c, keys, compiler);
  std::string a = program("a");
  auto first = o->prepare(as_program(a));
  REQUIRE(first);
  keys.set_profile(first->pk, profile_with_counts(42));
  std::string expected_ck =
      cache_key(first->ik, keys.current_profile(first->pk)->digest, CompileMode::optimized);
  first = make_error(Errc::internal, "released"); // drop the stage's reference

  auto results = race(*o, compiler, a, TierUp::sync, o->stats().single_flight_waits);
  CHECK(compiler.compiles() == 2); // stage 1 + exactly one for the new CK
  std::set<const Entry*> entries;
  for (auto& r : results) {
    REQUIRE(r);
    CHECK(r->ck == expected_ck);
    CHECK(r->storage_key == expected_ck);
    CHECK(r->profile_version == 1);
    entries.insert(r->entry.get());
  }
  CHECK(entries.size() == 1);
  CHECK(o->stats().recompiles == 1);
}

TEST_CASE("16 threads share one failure and the next request retries", "[cache][concurrency]") {
  MemoryKeyStore keys;
  FakeCompiler compiler;
  Config c;
  c.tier_up = TierUp::sync;
  auto o = make(c, keys, compiler);
  compiler.fail_next(1);
  auto results = race(*o, compiler, program("a"), TierUp::sync, 0);
  CHECK(compiler.compiles() == 1);
  for (auto& r : results) {
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::compile);
    CHECK(r.error().message().find("fake compile failure") != std::string::npos);
  }
  auto retry = o->prepare(as_program(program("a")));
  REQUIRE(retry);
  CHECK(retry->outcome == Outcome::compiled);
  CHECK(compiler.compiles() == 2);
}

TEST_CASE("16 async stages after a profile rewrite start one background compile",
          "[cache][concurrency]") {
  MemoryKeyStore keys;
  FakeCompiler compiler;
  Config c;
  c.tier_up = TierUp::async;
  c.tier_up_threads = 4;
  auto o = make(c, keys, compiler);
  std::string a = program("a");
  auto first = o->prepare(as_program(a));
  REQUIRE(first);
  keys.set_profile(first->pk, profile_with_counts(1));
  compiler.close_gate();
  std::vector<std::thread> threads;
  std::atomic<int> pending{0}, errors{0};
  for (int i = 0; i < kThreads; ++i)
    threads.emplace_back([&] {
      auto r = o->prepare(as_program(a));
      if (!r)
        errors++;
      else if (r->outcome == Outcome::tier_up_pending && r->entry.get() == first->entry.get())
        pending++;
    });
  for (auto& th : threads)
    th.join();
  CHECK(errors == 0);
  CHECK(pending == kThreads);
  compiler.open_gate();
  o->wait_idle();
  CHECK(compiler.compiles() == 2);
  CHECK(o->stats().tier_ups_started == 1);
  auto after = o->prepare(as_program(a));
  REQUIRE(after);
  CHECK(after->outcome == Outcome::memory_hit);
  CHECK(after->profile_version == 1);
}

TEST_CASE("16 threads loading one entry from disk read it once", "[cache][concurrency]") {
  TempDir dir;
  MemoryKeyStore keys;
  FakeCompiler compiler;
  compiler.set_object_size(1 << 20);
  Config c;
  c.state_dir = dir.str();
  c.disk_durability = Durability::none;
  std::string a = program("a");
  {
    auto o = make(c, keys, compiler);
    REQUIRE(o->prepare(as_program(a)));
  }
  auto o = make(c, keys, compiler);
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int i = 0; i < kThreads; ++i)
    threads.emplace_back([&] {
      auto r = o->prepare(as_program(a));
      ok += r && (r->outcome == Outcome::disk_hit || r->outcome == Outcome::memory_hit);
    });
  for (auto& th : threads)
    th.join();
  CHECK(ok == kThreads);
  CHECK(compiler.compiles() == 1);
  CHECK(o->disk_tier()->stats().hits == 1); // the file was read and checked once
}

TEST_CASE("many programs and stages from many threads stay consistent", "[cache][concurrency]") {
  TempDir dir;
  MemoryKeyStore keys;
  FakeCompiler compiler;
  compiler.set_object_size(2048);
  Config c;
  c.state_dir = dir.str();
  c.disk_durability = Durability::none;
  c.memory_budget_bytes = 20 * 2600; // forces evictions and disk reloads
  c.tier_up = TierUp::async;
  c.tier_up_threads = 2;
  auto o = make(c, keys, compiler);
  std::atomic<int> errors{0}, wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 300; ++i) {
        std::string p = program(numbered("p", (i * 7 + t) % 40));
        auto r = o->prepare(as_program(p));
        if (!r) {
          errors++;
          continue;
        }
        // Whatever was served belongs to this program and this compiler.
        if (!r->entry->object.starts_with("OBJ|" + compiler.identity() + "|" + r->pk) ||
            r->storage_key.substr(0, 64) != r->ik)
          wrong++;
        if (i % 50 == 0 && t == 0)
          keys.set_profile(FakeCompiler::pk_of(p), profile_with_counts(i + 1));
      }
    });
  for (auto& th : threads)
    th.join();
  o->wait_idle();
  CHECK(errors == 0);
  CHECK(wrong == 0);
  auto s = o->stats();
  CHECK(s.memory_bytes <= s.memory_budget_bytes);
  CHECK(s.memory_held_entries == 0);
  CHECK(s.corrupt_entries == 0);
  CHECK(s.prepares == 8 * 300);
}
