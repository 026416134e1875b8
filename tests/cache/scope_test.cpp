// Tenant scopes: Program::scope is part of IK, the compiler sees it as a
// field beside the bytes as submitted, and ambiguous scopes are refused.
#include "fakes.h"
#include "fdo/cache/keys.h"
#include "fdo/cache/memory_key_store.h"
#include "fdo/cache/orchestrator.h"

#include <catch2/catch.hpp>

using namespace fdo;
using namespace fdo::cache;
using namespace fdo::cache::testing;

namespace {

std::unique_ptr<Orchestrator> make(TierUp policy, KeyStore& keys, Compiler& compiler) {
  Config c;
  c.tier_up = policy;
  auto o = Orchestrator::create(std::move(c), keys, compiler);
  REQUIRE(o);
  return std::move(*o);
}

} // namespace

TEST_CASE("one program in two scopes: two IKs - two entries - the compiler sees scope and bytes",
          "[cache][orchestrator][scope]") {
  MemoryKeyStore keys;
  FakeCompiler compiler;
  auto o = make(TierUp::async, keys, compiler);
  std::string a = program("a");

  auto alice = o->prepare(as_program(a, "uid:1000"));
  auto bob = o->prepare(as_program(a, "uid:1001"));
  REQUIRE(alice);
  REQUIRE(bob);
  CHECK(alice->ik == initial_key("uid:1000", a, compiler.identity()));
  CHECK(bob->ik == initial_key("uid:1001", a, compiler.identity()));
  CHECK(alice->ik != bob->ik);
  CHECK(alice->ik != o->initial_key_for(as_program(a)));
  CHECK(alice->ik == o->initial_key_for(as_program(a, "uid:1000")));
  CHECK(alice->outcome == Outcome::compiled);
  CHECK(bob->outcome == Outcome::compiled);
  CHECK(alice->storage_key == virtual_key(alice->ik));
  CHECK(bob->storage_key == virtual_key(bob->ik));
  CHECK(alice->entry.get() != bob->entry.get());
  CHECK(o->memory_tier().stats().entries == 2);
  CHECK(alice->entry->info.program_hash == program_hash("uid:1000", a));
  CHECK(bob->entry->info.program_hash == program_hash("uid:1001", a));

  // The compiler gets the scope as a field and the bytes as submitted.
  auto identified = compiler.identified();
  REQUIRE(identified.size() == 2);
  CHECK(identified[0].ik == alice->ik);
  CHECK(identified[0].scope == "uid:1000");
  CHECK(identified[0].bytes == a);
  CHECK(identified[1].scope == "uid:1001");
  CHECK(identified[1].bytes == a);
  auto calls = compiler.calls();
  REQUIRE(calls.size() == 2);
  CHECK(calls[0].ik == alice->ik);
  CHECK(calls[0].scope == "uid:1000");
  CHECK(calls[0].bytes == a);
  CHECK(calls[1].ik == bob->ik);
  CHECK(calls[1].scope == "uid:1001");
  CHECK(calls[1].bytes == a);

  // Each scope hits only its own entry.
  auto alice2 = o->prepare(as_program(a, "uid:1000"));
  REQUIRE(alice2);
  CHECK(alice2->outcome == Outcome::memory_hit);
  CHECK(alice2->entry.get() == alice->entry.get());
  CHECK(compiler.compiles() == 2);

  // A background tier-up compiles the scoped program too.
  keys.set_profile(alice->pk, profile_with_counts(40));
  auto pending = o->prepare(as_program(a, "uid:1000"));
  REQUIRE(pending);
  CHECK(pending->outcome == Outcome::tier_up_pending);
  o->wait_idle();
  calls = compiler.calls();
  REQUIRE(calls.size() == 3);
  CHECK(calls[2].ik == alice->ik);
  CHECK(calls[2].scope == "uid:1000");
  CHECK(calls[2].bytes == a);
  CHECK(calls[2].version == 1);
}

TEST_CASE("the caller's ik is never trusted and ambiguous scopes are refused",
          "[cache][orchestrator][scope]") {
  MemoryKeyStore keys;
  FakeCompiler compiler;
  auto o = make(TierUp::sync, keys, compiler);
  std::string a = program("a");

  Program wrong = as_program(a, "uid:7");
  wrong.ik = std::string(64, 'f');
  auto s = o->prepare(wrong);
  REQUIRE(s);
  CHECK(s->ik == initial_key("uid:7", a, compiler.identity()));
  REQUIRE(compiler.calls().size() == 1);
  CHECK(compiler.calls()[0].ik == s->ik);
  CHECK(compiler.identified().at(0).ik == s->ik);

  // A caller that already set the right IK gets the same stage.
  Program right = as_program(a, "uid:8");
  right.ik = o->initial_key_for(right);
  auto r = o->prepare(right);
  REQUIRE(r);
  CHECK(r->ik == right.ik);
  CHECK(compiler.calls().at(1).ik == right.ik);

  for (const Program& bad :
       {as_program(a, "uid:1\nuid:2"), as_program(std::string(kScopeTag) + "uid:1\n" + a)}) {
    auto refused = o->prepare(bad);
    REQUIRE_FALSE(refused);
    CHECK(refused.error().code() == Errc::invalid_argument);
  }
  CHECK(compiler.identifies() == 2);
  CHECK(compiler.compiles() == 2);
  CHECK(o->stats().failures == 2);
}
