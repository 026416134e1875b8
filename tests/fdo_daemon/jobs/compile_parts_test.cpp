// Held parts over the compile-worker protocol (compile_parts.h; docs/jit.md,
// "Incremental recompiles"): the job's codec both ways, a damaged object set
// as a miss, the reply's part builds, and a compile worker taking the parts
// of its own last reply.
#include "fdo/daemon/compile_parts.h"
#include "fdo/daemon/worker_jobs.h"
#include "fdo/jit/object_set.h"
#include "fdo/util/hash.h"
#include "many_functions.h"

#include <catch2/catch.hpp>

using namespace fdo;
using namespace fdo::daemon;
using fdo::daemon::testing::many_functions;

namespace {

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

// A plain compile of `program` on two threads, as fdod sends it.
Message plain_compile_job(const std::string& program) {
  Message job;
  job.header = {{"op", "compile"},
                {"mode", "plain"},
                {"profile", nullptr},
                {"limits", {{"max_program_bytes", 1 << 24}}},
                {"threads", 2}};
  job.payload = program;
  return job;
}

} // namespace

TEST_CASE("compile parts: a job carries the held parts after its program, and reads back",
          "[compile_jobs][incremental]") {
  Message job;
  job.header = {{"op", "compile"}};
  job.payload = "the program";
  // No held parts: the payload is the program.
  auto none = read_job_parts(job);
  REQUIRE(none);
  CHECK(none->program == "the program");
  CHECK(none->held.empty());

  const HeldBuild held = held_of({"object zero", "object one", "two"});
  add_held_parts(job, held);
  auto parts = read_job_parts(job);
  REQUIRE(parts);
  CHECK(parts->program == "the program");
  CHECK(parts->unreadable.empty());
  REQUIRE(parts->held.size() == 3);
  CHECK(parts->held[1].key == held.parts[1].key);
  CHECK(parts->held[1].slice == held.parts[1].slice);
  CHECK(parts->held[1].object_hash == held.parts[1].object_hash);
  CHECK(parts->held[1].object == "object one");
}

TEST_CASE("compile parts: a damaged object set is a miss, a malformed header an error",
          "[compile_jobs][incremental]") {
  const HeldBuild held = held_of({"object zero", "object one"});
  auto job_with = [&](const std::function<void(Message&)>& edit) {
    Message job;
    job.header = {{"op", "compile"}};
    job.payload = "program";
    add_held_parts(job, held);
    edit(job);
    return job;
  };
  for (auto edit : std::vector<std::function<void(Message&)>>{
           [](Message& m) { m.payload.pop_back(); }, // last object cut short
           [](Message& m) { m.payload += "x"; },     // bytes past the set
           [](Message& m) { m.header["held_parts"].push_back(m.header["held_parts"][0]); }}) {
    const Message job = job_with(edit); // the parts are views into it
    auto parts = read_job_parts(job);
    REQUIRE(parts);
    CHECK(parts->program == "program");
    CHECK(parts->held.empty());
    CHECK_FALSE(parts->unreadable.empty());
  }
  for (auto edit : std::vector<std::function<void(Message&)>>{
           [](Message& m) { m.header["held_parts"] = "no"; },
           [](Message& m) { m.header.erase("program_bytes"); },
           [](Message& m) { m.header["program_bytes"] = m.payload.size() + 1; },
           [](Message& m) { m.header["held_parts"][0]["key"] = "not a key"; },
           [](Message& m) { m.header["held_parts"][1].erase("object_hash"); }}) {
    const Message job = job_with(edit);
    auto parts = read_job_parts(job);
    REQUIRE_FALSE(parts);
    CHECK(parts.error().code() == Errc::invalid_argument);
  }
}

TEST_CASE("compile parts: the reply's part builds read back and explain themselves",
          "[compile_jobs][incremental]") {
  const std::vector<jit::PartBuild> builds{build("a", jit::PartOrigin::reused, "l0"),
                                           build("b", jit::PartOrigin::profile_changed, "l1"),
                                           build("c", jit::PartOrigin::held_damaged, "main")};
  auto back = part_builds_from_json(part_builds_to_json(builds));
  REQUIRE(back);
  REQUIRE(back->size() == 3);
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK((*back)[i].key == builds[i].key);
    CHECK((*back)[i].slice == builds[i].slice);
    CHECK((*back)[i].object_hash == builds[i].object_hash);
    CHECK((*back)[i].origin == builds[i].origin);
    CHECK((*back)[i].functions == builds[i].functions);
    CHECK((*back)[i].first_function == builds[i].first_function);
  }
  nlohmann::json bad = part_builds_to_json(builds);
  bad[1]["origin"] = "guessed";
  CHECK_FALSE(part_builds_from_json(bad));
  CHECK_FALSE(part_builds_from_json(nlohmann::json::object()));

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
  Message job = plain_compile_job(program);
  auto first = jobs.handle(job);
  if (!first) FAIL(first.error().describe());
  REQUIRE(first->header.contains("parts"));
  auto builds = part_builds_from_json(first->header["parts"]);
  REQUIRE(builds);
  REQUIRE(builds->size() == 2);
  // The object set, after the metadata (whose phase times differ per compile).
  auto object_of = [](const Message& reply) {
    return reply.payload.substr(reply.header["metadata_bytes"].get<std::size_t>());
  };
  HeldBuild held{*builds, object_of(*first)};

  Message again = job;
  add_held_parts(again, held);
  auto second = jobs.handle(again);
  if (!second) FAIL(second.error().describe());
  CHECK(object_of(*second) == held.objects);
  CHECK(second->header.value("explanation", "")
            .find("reused 2 of 2 parts from the program's last build") != std::string::npos);

  // A damaged set: every part compiled, and said so.
  Message damaged = job;
  held.objects.pop_back();
  add_held_parts(damaged, held);
  auto third = jobs.handle(damaged);
  if (!third) FAIL(third.error().describe());
  CHECK(object_of(*third) == object_of(*first));
  CHECK(third->header.value("explanation", "").find("the held parts were unreadable") !=
        std::string::npos);
}

TEST_CASE("compile parts: a job may ask for more parts than threads, within bounds",
          "[compile_jobs][incremental]") {
  const std::string program = many_functions(800); // ~24,000 instructions: 2 parts by size
  CompileJobs jobs;
  Message job = plain_compile_job(program);
  auto parts_of = [&](const nlohmann::json& parts) -> std::size_t {
    Message j = job;
    if (!parts.is_null()) j.header["parts"] = parts;
    auto reply = jobs.handle(j);
    if (!reply) FAIL(reply.error().describe());
    if (!reply->header.contains("parts")) return 1;
    auto builds = part_builds_from_json(reply->header["parts"]);
    REQUIRE(builds);
    return builds->size();
  };
  // At most one part per kMinPartInstructions: a bound of 8 still gives 2 here,
  // a bound of 1 one piece; absent, as many as threads.
  CHECK(parts_of(nullptr) == 2);
  CHECK(parts_of(8) == 2);
  CHECK(parts_of(1) == 1);
  // Twice the size: four parts on the job's two threads when asked for.
  job.payload = many_functions(1400); // ~42,000 instructions
  CHECK(parts_of(4) == 4);
  job.payload = program;
  for (const nlohmann::json& bad : {nlohmann::json(0), nlohmann::json(65), nlohmann::json("2")}) {
    Message j = job;
    j.header["parts"] = bad;
    auto reply = jobs.handle(j);
    REQUIRE_FALSE(reply);
    CHECK(reply.error().code() == Errc::invalid_argument);
  }
}
