// Held parts over the compile-worker protocol (compile_messages.h,
// compile_parts.h; docs/jit.md, "Incremental recompiles"): the job carries
// them both ways, a damaged object set is a miss, the reply's part builds,
// and a compile worker taking the parts of its own last reply.
#include "fdo/daemon/compile_messages.h"
#include "fdo/daemon/compile_parts.h"
#include "fdo/daemon/worker_jobs.h"
#include "fdo/jit/object_set.h"
#include "fdo/util/hash.h"
#include "many_functions.h"

#include <catch2/catch.hpp>
#include <functional>

using namespace fdo;
using namespace fdo::daemon;
using fdo::daemon::testing::many_functions;

namespace {

// A reply with an explanation and parts, the rest at its defaults.
CompileReply reply_with(std::string explanation, std::vector<jit::PartBuild> parts) {
  CompileReply r;
  r.explanation = std::move(explanation);
  r.parts = std::move(parts);
  return r;
}

jit::PartBuild build(const std::string& object, jit::PartOrigin origin, const std::string& first) {
  jit::PartBuild b;
  b.key = blake3_hex("key:" + object);
  b.slice = blake3_hex("slice:" + object);
  b.object_hash = blake3_hex(object);
  b.functions = object.size();
  b.first_function = first;
  b.origin = origin;
  return b;
}

HeldBuild held_of(const std::vector<std::string>& objects) {
  HeldBuild h;
  for (const std::string& o : objects)
    h.parts.push_back(build(o, jit::PartOrigin::not_held, "f"));
  h.objects = jit::pack_objects(objects);
  return h;
}

// A compile job offering `held` (none: nothing held), as fdod sends it.
Message job_with(const CompileJob& job, const std::string& program, const HeldBuild* held) {
  CompileJob j = job;
  if (held)
    for (const jit::PartBuild& p : held->parts)
      j.held.push_back({p.key, p.slice, p.object_hash});
  auto m = compile_job_message(j, program, held ? std::string_view(held->objects) : "");
  REQUIRE(m);
  return *m;
}

// A plain compile on two threads, as fdod sends it.
CompileJob plain_on_two_threads() {
  CompileJob job;
  job.limits.max_program_bytes = 1 << 24;
  job.threads = 2;
  return job;
}

struct Reply {
  CompileReply reply;
  std::string metadata;
  std::string object;
};
Reply reply_of(const Message& m) {
  auto r = compile_reply_of(m);
  REQUIRE(r);
  return {r->reply, std::string(r->metadata), std::string(r->object)};
}

} // namespace

TEST_CASE("compile parts: a job carries the held parts after its program, and reads back",
          "[compile_jobs][incremental]") {
  // No held parts: the payload after the body is the program.
  const Message plain = job_with(CompileJob{}, "the program", nullptr);
  auto none = compile_job_of(plain);
  REQUIRE(none);
  CHECK(none->program == "the program");
  CHECK(none->held.empty());
  CHECK(none->unreadable.empty());

  const HeldBuild held = held_of({"object zero", "object one", "two"});
  const Message job = job_with(CompileJob{}, "the program", &held);
  auto parts = compile_job_of(job);
  REQUIRE(parts);
  CHECK(parts->program == "the program");
  CHECK(parts->unreadable.empty());
  REQUIRE(parts->held.size() == 3);
  CHECK(parts->held[1].key == held.parts[1].key);
  CHECK(parts->held[1].slice == held.parts[1].slice);
  CHECK(parts->held[1].object_hash == held.parts[1].object_hash);
  CHECK(parts->held[1].object == "object one");
}

TEST_CASE("compile parts: a damaged object set is a miss, a malformed job an error",
          "[compile_jobs][incremental]") {
  const HeldBuild held = held_of({"object zero", "object one"});
  auto edited = [&](const std::function<void(Message&)>& edit) {
    Message job = job_with(CompileJob{}, "program", &held);
    edit(job);
    return job;
  };
  // One part named more than the set holds.
  HeldBuild more = held;
  more.parts.push_back(more.parts[0]);
  for (const Message& job :
       {edited([](Message& m) { m.payload.pop_back(); }), // last object cut short
        edited([](Message& m) { m.payload += "x"; }),     // bytes past the set
        job_with(CompileJob{}, "program", &more)}) {
    auto parts = compile_job_of(job);
    REQUIRE(parts);
    CHECK(parts->program == "program");
    CHECK(parts->held.empty());
    CHECK_FALSE(parts->unreadable.empty());
  }
  // A held part's key that is no key; a program longer than the payload; no
  // body length; bytes after a program that offers no parts.
  HeldBuild bad_key = held;
  bad_key.parts[0].key = "not a key";
  auto not_a_key = compile_job_of(job_with(CompileJob{}, "program", &bad_key));
  REQUIRE_FALSE(not_a_key);
  CHECK(not_a_key.error().code() == Errc::corrupt);
  CHECK(not_a_key.error().message().find("held part 0's key is not a key") != std::string::npos);
  for (const Message& job : {edited([](Message& m) { m.payload.resize(m.body->bytes + 3); }),
                             edited([](Message& m) { m.body.reset(); }),
                             edited([](Message& m) { m.body->op = TypedOp::exec; }), [] {
                               Message m = job_with(CompileJob{}, "program", nullptr);
                               m.payload += "stray";
                               return m;
                             }()}) {
    auto parts = compile_job_of(job);
    REQUIRE_FALSE(parts);
    CHECK(parts.error().code() == Errc::invalid_argument);
  }
}

TEST_CASE("compile parts: the reply's part builds read back and explain themselves",
          "[compile_jobs][incremental]") {
  const std::vector<jit::PartBuild> builds{build("a", jit::PartOrigin::reused, "l0"),
                                           build("b", jit::PartOrigin::profile_changed, "l1"),
                                           build("c", jit::PartOrigin::held_damaged, "main")};
  auto message = compile_reply_message(reply_with("why", builds), "{}", "objects");
  REQUIRE(message);
  const Reply r = reply_of(*message);
  const std::vector<jit::PartBuild>* back = &r.reply.parts;
  CHECK(r.reply.explanation == "why");
  CHECK(r.metadata == "{}");
  CHECK(r.object == "objects");
  REQUIRE(back->size() == 3);
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK((*back)[i].key == builds[i].key);
    CHECK((*back)[i].slice == builds[i].slice);
    CHECK((*back)[i].object_hash == builds[i].object_hash);
    CHECK((*back)[i].origin == builds[i].origin);
    CHECK((*back)[i].functions == builds[i].functions);
    CHECK((*back)[i].first_function == builds[i].first_function);
  }
  // An origin past the last, a key that is none: refused.
  std::vector<jit::PartBuild> bad = builds;
  bad[1].origin = static_cast<jit::PartOrigin>(9);
  auto guessed = compile_reply_message(reply_with("", bad), "{}", "objects");
  REQUIRE(guessed);
  CHECK_FALSE(compile_reply_of(*guessed));
  bad = builds;
  bad[2].object_hash = "zz";
  auto unkeyed = compile_reply_message(reply_with("", bad), "{}", "objects");
  REQUIRE(unkeyed);
  CHECK_FALSE(compile_reply_of(*unkeyed));

  CHECK(explain_parts(builds, {{"l1", "lua_gettop"}}) ==
        "reused 1 of 3 parts from the program's last build; recompiled part 1 (1 functions from "
        "lua_gettop): profile slice changed, part 2 (1 functions from main): held object damaged");
  // Nothing held: nothing to say.
  CHECK(explain_parts({build("a", jit::PartOrigin::not_held, "f")}, {}).empty());
}

TEST_CASE("compile parts: a compile worker takes the parts of its last reply",
          "[compile_jobs][incremental]") {
  const std::string program = many_functions(800); // ~24,000 instructions: 2 parts
  CompileJobs jobs;
  const CompileJob job = plain_on_two_threads();
  auto first = jobs.handle(job_with(job, program, nullptr));
  if (!first) FAIL(first.error().describe());
  const Reply one = reply_of(*first);
  REQUIRE(one.reply.parts.size() == 2);
  // The object set, after the metadata (whose phase times differ per compile).
  HeldBuild held{one.reply.parts, one.object};

  auto second = jobs.handle(job_with(job, program, &held));
  if (!second) FAIL(second.error().describe());
  const Reply two = reply_of(*second);
  CHECK(two.object == held.objects);
  CHECK(two.reply.explanation.find("reused 2 of 2 parts from the program's last build") !=
        std::string::npos);

  // A damaged set: every part compiled, and said so.
  held.objects.pop_back();
  auto third = jobs.handle(job_with(job, program, &held));
  if (!third) FAIL(third.error().describe());
  const Reply three = reply_of(*third);
  CHECK(three.object == one.object);
  CHECK(three.reply.explanation.find("the held parts were unreadable") != std::string::npos);
}

TEST_CASE("compile parts: a job may ask for more parts than threads, within bounds",
          "[compile_jobs][incremental]") {
  std::string program = many_functions(800); // ~24,000 instructions: 2 parts by size
  CompileJobs jobs;
  auto parts_of = [&](std::uint32_t parts) -> std::size_t {
    CompileJob job = plain_on_two_threads();
    job.parts = parts;
    auto reply = jobs.handle(job_with(job, program, nullptr));
    if (!reply) FAIL(reply.error().describe());
    const Reply r = reply_of(*reply);
    return r.reply.parts.empty() ? 1 : r.reply.parts.size();
  };
  // At most one part per kMinPartInstructions: a bound of 8 still gives 2 here,
  // a bound of 1 one piece; 0 (none given), as many as threads.
  CHECK(parts_of(0) == 2);
  CHECK(parts_of(8) == 2);
  CHECK(parts_of(1) == 1);
  // Twice the size: four parts on the job's two threads when asked for.
  program = many_functions(1400); // ~42,000 instructions
  CHECK(parts_of(4) == 4);
  for (std::uint32_t bad : {65u, 1000u}) {
    CompileJob job = plain_on_two_threads();
    job.parts = bad;
    auto reply = jobs.handle(job_with(job, program, nullptr));
    REQUIRE_FALSE(reply);
    CHECK(reply.error().code() == Errc::invalid_argument);
  }
}
