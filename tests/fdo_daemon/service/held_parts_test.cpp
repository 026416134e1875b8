// fdod's side of incremental recompiles (held_parts.h, adapters.h; docs/jit.md
// "Incremental recompiles"): the parts of a program's last build in parts
// are offered to its next compile in the same mode and tenant, and to no
// other; the store keeps to its byte budget.
#include "adapters.h"
#include "fakes.h"
#include "fdo/daemon/compile_messages.h"
#include "fdo/daemon/compile_parts.h"
#include "fdo/jit/object_set.h"
#include "fdo/util/hash.h"
#include "held_parts.h"

#include <catch2/catch.hpp>
#include <list>

using namespace fdo;
using namespace fdo::daemon;
using namespace fdo::daemon::testing;
using nlohmann::json;

namespace {

constexpr auto stage = cache::CompilePriority::stage;

std::shared_ptr<HeldBuild> build_of(const std::vector<std::string>& objects) {
  auto b = std::make_shared<HeldBuild>();
  for (const std::string& o : objects) {
    jit::PartBuild p;
    p.key = blake3_hex("key:" + o);
    p.slice = blake3_hex("slice:" + o);
    p.object_hash = blake3_hex(o);
    p.functions = 1;
    p.first_function = std::string(1, 'f'); // (GCC 12 -Wrestrict on a literal)
    b->parts.push_back(p);
  }
  b->objects = jit::pack_objects(objects);
  return b;
}

// A stand-in compile worker: replies with a build in the parts `objects`
// (none: one object, no parts) and records what each job offered.
struct PartsWorker {
  std::vector<std::string> objects{"part zero", "part one"};
  std::vector<std::vector<jit::HeldPart>> offered;
  std::vector<std::string> programs;
  std::list<Message> jobs; // kept (and never moved): `offered` views into them

  Expected<Message> operator()(const Message& req) {
    jobs.push_back(req);
    FDO_TRY(CompileJobView job, compile_job_of(jobs.back()));
    if (!job.unreadable.empty()) return make_error(Errc::internal, job.unreadable);
    programs.emplace_back(job.program);
    offered.push_back(std::move(job.held));
    CompileReply reply;
    if (objects.size() > 1) {
      reply.parts = build_of(objects)->parts;
      return compile_reply_message(reply, "{}", jit::pack_objects(objects));
    }
    return compile_reply_message(reply, "{}", objects.empty() ? std::string("object") : objects[0]);
  }
};

} // namespace

TEST_CASE("held parts: a program's last build in parts is offered to its next compile only",
          "[held_parts][incremental]") {
  PartsWorker worker;
  FakeRunner runner("compile", [&](const Message& m) { return worker(m); });
  HeldParts held(1 << 20);
  RemoteCompiler compiler(
      "identity", runner, [] { return CompileJobLimits{}; }, std::nullopt, &held);
  cache::Program lua;
  lua.ik = "ik-lua";
  lua.scope = "uid:1000";
  lua.bytes = "the program";
  const cache::ProfileRef none = cache::no_profile("pk");

  auto first = compiler.compile(lua, none, CompileMode::optimized, stage, nullptr);
  REQUIRE(first);
  CHECK(worker.offered.back().empty());
  CHECK(held.builds() == 1);

  // The same program and mode again: the program, then its parts.
  REQUIRE(compiler.compile(lua, none, CompileMode::optimized, stage, nullptr));
  CHECK(worker.programs.back() == "the program");
  REQUIRE(worker.offered.back().size() == 2);
  CHECK(worker.offered.back()[0].object == "part zero");
  CHECK(worker.offered.back()[1].object == "part one");
  CHECK(worker.offered.back()[1].object_hash == blake3_hex("part one"));

  // Another mode, another tenant's copy of the program: nothing offered.
  REQUIRE(compiler.compile(lua, none, CompileMode::instrumented, stage, nullptr));
  CHECK(worker.offered.back().empty());
  cache::Program other = lua;
  other.scope = "uid:1001";
  REQUIRE(compiler.compile(other, none, CompileMode::optimized, stage, nullptr));
  CHECK(worker.offered.back().empty());

  // A whole build leaves what is held; the next build in parts replaces it.
  worker.objects = {"whole"};
  REQUIRE(compiler.compile(lua, none, CompileMode::optimized, stage, nullptr));
  worker.objects = {"new zero", "new one", "new two"};
  REQUIRE(compiler.compile(lua, none, CompileMode::optimized, stage, nullptr));
  CHECK(worker.offered.back().size() == 2);
  REQUIRE(compiler.compile(lua, none, CompileMode::optimized, stage, nullptr));
  REQUIRE(worker.offered.back().size() == 3);
  CHECK(worker.offered.back()[2].object == "new two");

  // A build no stage waits for goes to the pool as a background job (the
  // pool stops it while stage compiles run: job_runner.h), with the urgency
  // a stage that comes to wait for it raises; the rest do not.
  CHECK(runner.priorities().back() == JobPriority::foreground);
  CHECK(runner.last_urgency() == nullptr);
  auto urgency = std::make_shared<Urgency>();
  REQUIRE(
      compiler.compile(lua, none, CompileMode::plain, cache::CompilePriority::background, urgency));
  CHECK(runner.priorities().back() == JobPriority::background);
  CHECK(runner.last_urgency() == urgency);
  for (std::size_t i = 0; i + 1 < runner.priorities().size(); ++i)
    CHECK(runner.priorities()[i] == JobPriority::foreground);
}

TEST_CASE("held parts: a reply naming parts its object set lacks is an error, nothing held",
          "[held_parts][incremental]") {
  HeldParts held(1 << 20);
  FakeRunner runner("compile", [](const Message&) -> Expected<Message> {
    CompileReply reply;
    reply.parts = build_of({"a", "b"})->parts;
    return compile_reply_message(reply, "{}", "a single object");
  });
  RemoteCompiler compiler(
      "identity", runner, [] { return CompileJobLimits{}; }, std::nullopt, &held);
  cache::Program p;
  p.ik = "ik";
  p.bytes = "program";
  auto r = compiler.compile(p, cache::no_profile("pk"), CompileMode::optimized, stage, nullptr);
  REQUIRE_FALSE(r);
  CHECK(r.error().code() == Errc::internal);
  CHECK(held.builds() == 0);
}

TEST_CASE("held parts: the least recently used builds go past the byte budget",
          "[held_parts][incremental]") {
  const auto a = build_of({std::string(400, 'a'), std::string(400, 'A')});
  const auto b = build_of({std::string(400, 'b'), std::string(400, 'B')});
  const auto c = build_of({std::string(400, 'c'), std::string(400, 'C')});
  HeldParts held(2 * a->objects.size());
  held.put("", "a", CompileMode::optimized, a);
  held.put("", "b", CompileMode::optimized, b);
  CHECK(held.find("", "a", CompileMode::optimized) == a); // a is now the most recent
  held.put("", "c", CompileMode::optimized, c);
  CHECK(held.builds() == 2);
  CHECK(held.bytes() <= 2 * a->objects.size());
  CHECK(held.find("", "a", CompileMode::optimized) == a);
  CHECK(held.find("", "b", CompileMode::optimized) == nullptr);
  CHECK(held.find("", "c", CompileMode::optimized) == c);
  // One build larger than the budget is not held; a one-part build neither.
  HeldParts small(10);
  small.put("", "a", CompileMode::optimized, a);
  CHECK(small.builds() == 0);
  held.put("", "d", CompileMode::optimized, build_of({"only"}));
  CHECK(held.find("", "d", CompileMode::optimized) == nullptr);
}

TEST_CASE("held parts: a program's pipeline prefix is offered to its next compile in any mode",
          "[held_parts][incremental][prefix]") {
  // A stand-in compile worker that answers with a build in two parts and the
  // prefix `next` (its bitcode, unless `taken`), recording the prefix offered.
  struct PrefixWorker {
    std::string next = "prefix one";
    bool taken = false;
    std::string claimed_hash; // "" = the bitcode's own
    std::vector<std::optional<std::pair<std::string, std::string>>> offered; // key, bitcode
    Expected<Message> operator()(const Message& req) {
      FDO_TRY(CompileJobView job, compile_job_of(req));
      if (job.prefix)
        offered.emplace_back(std::pair{job.prefix->key, std::string(job.prefix->bitcode)});
      else
        offered.emplace_back(std::nullopt);
      CompileReply reply;
      reply.parts = build_of({"p0", "p1"})->parts;
      reply.prefix = PrefixRef{blake3_hex("key:" + next),
                               claimed_hash.empty() ? blake3_hex(next) : claimed_hash};
      reply.prefix_origin = taken ? jit::PrefixOrigin::reused : jit::PrefixOrigin::not_held;
      return compile_reply_message(reply, "{}",
                                   jit::pack_objects(std::vector<std::string>{"p0", "p1"}),
                                   taken ? std::string() : next);
    }
  } worker;
  FakeRunner runner("compile", [&](const Message& m) { return worker(m); });
  HeldParts held(1 << 20);
  RemoteCompiler compiler(
      "identity", runner, [] { return CompileJobLimits{}; }, std::nullopt, &held);
  cache::Program lua;
  lua.ik = "ik-lua";
  lua.scope = "uid:1000";
  lua.bytes = "the program";
  const cache::ProfileRef none = cache::no_profile("pk");

  REQUIRE(compiler.compile(lua, none, CompileMode::instrumented, stage, nullptr));
  CHECK_FALSE(worker.offered.back().has_value());
  CHECK(held.prefixes() == 1);
  CHECK(held.builds() == 1);
  // The instrumented build's prefix goes to the optimized compile.
  REQUIRE(compiler.compile(lua, none, CompileMode::optimized, stage, nullptr));
  REQUIRE(worker.offered.back().has_value());
  CHECK(worker.offered.back()->first == blake3_hex("key:prefix one"));
  CHECK(worker.offered.back()->second == "prefix one");
  // Taken: nothing comes back, the same one stays held.
  worker.taken = true;
  worker.next = "prefix one";
  REQUIRE(compiler.compile(lua, none, CompileMode::optimized, stage, nullptr));
  REQUIRE(compiler.compile(lua, none, CompileMode::optimized, stage, nullptr));
  CHECK(worker.offered.back()->second == "prefix one");
  // One run again replaces it.
  worker.taken = false;
  worker.next = "prefix two";
  REQUIRE(compiler.compile(lua, none, CompileMode::optimized, stage, nullptr));
  REQUIRE(compiler.compile(lua, none, CompileMode::optimized, stage, nullptr));
  CHECK(worker.offered.back()->second == "prefix two");
  CHECK(held.prefixes() == 1);
  // Bitcode that does not hash as the reply says is not held: the one
  // before stays (a later compile runs it again if it no longer fits).
  worker.next = "prefix three";
  worker.claimed_hash = blake3_hex("something else");
  REQUIRE(compiler.compile(lua, none, CompileMode::optimized, stage, nullptr));
  worker.claimed_hash.clear();
  worker.taken = true;
  REQUIRE(compiler.compile(lua, none, CompileMode::optimized, stage, nullptr));
  CHECK(worker.offered.back()->second == "prefix two");
  // Another tenant's copy of the program: nothing offered.
  cache::Program other = lua;
  other.scope = "uid:1001";
  REQUIRE(compiler.compile(other, none, CompileMode::optimized, stage, nullptr));
  CHECK_FALSE(worker.offered.back().has_value());

  // Prefixes share the byte budget and its order with part sets.
  HeldParts small(100);
  small.put_prefix(
      "", "a",
      std::make_shared<const HeldPrefixBuild>(HeldPrefixBuild{"k", "h", std::string(60, 'a')}));
  small.put_prefix(
      "", "b",
      std::make_shared<const HeldPrefixBuild>(HeldPrefixBuild{"k", "h", std::string(60, 'b')}));
  CHECK(small.prefixes() == 1);
  CHECK(small.find_prefix("", "a") == nullptr);
  CHECK(small.find_prefix("", "b") != nullptr);
  CHECK(small.bytes() == 60);
  small.put_prefix("", "b", nullptr);
  CHECK(small.prefixes() == 0);
  CHECK(small.bytes() == 0);
}
