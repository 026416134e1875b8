// The typed compile job and reply (compile_messages.h): every field survives
// the round trip, and a reply that does not add up is refused, never misread.
#include "fdo/daemon/compile_messages.h"
#include "fdo/util/hash.h"
#include "fdo/util/profile_wire.h"

#include <catch2/catch.hpp>

using namespace fdo;
using namespace fdo::daemon;

TEST_CASE("compile messages: a job survives the round trip, field by field",
          "[jobs][compile_jobs][wire]") {
  auto profile = std::make_shared<ProfileDoc>();
  profile->knobs.opt_level = 3;
  profile->knobs.mode = CompileMode::optimized;
  profile->functions["main"] =
      FunctionProfile{.cfg_hash = 7, .counts = {5, 1}, .source_name = "main.c:main"};
  profile->provenance.reason = "feedback"; // bookkeeping: does not travel
  CompileJob job;
  job.mode = CompileMode::cs_instrumented;
  job.profile = profile;
  job.limits = jit::Limits{123, 45, 6789};
  job.threads = 3;
  job.parts = 9;
  job.gpu = jit::GpuTarget{90, 12040};
  job.held = {{blake3_hex("k0"), blake3_hex("s0"), blake3_hex("o0")},
              {blake3_hex("k1"), blake3_hex("s1"), blake3_hex("o1")}};
  const std::string objects = "not an object set";
  auto m = compile_job_message(job, "the program", objects);
  REQUIRE(m);
  CHECK(m->header == nlohmann::json{{"op", "compile"}, {"body_bytes", m->header["body_bytes"]}});
  auto back = compile_job_of(*m);
  REQUIRE(back);
  const CompileJob& j = back->job;
  CHECK(j.mode == job.mode);
  REQUIRE(j.profile);
  CHECK(*j.profile == compile_view(*profile));
  CHECK(j.limits.max_program_bytes == 123);
  CHECK(j.limits.max_functions == 45);
  CHECK(j.limits.max_instructions == 6789);
  CHECK(j.threads == 3);
  CHECK(j.parts == 9);
  CHECK(j.gpu == job.gpu);
  CHECK(j.held == job.held);
  CHECK(back->program == "the program");
  // Named parts whose objects do not unpack: a miss, said so.
  CHECK(back->held.empty());
  CHECK_FALSE(back->unreadable.empty());

  // No profile, no GPU, nothing held.
  auto bare = compile_job_message(CompileJob{}, "");
  REQUIRE(bare);
  auto none = compile_job_of(*bare);
  REQUIRE(none);
  CHECK_FALSE(none->job.profile);
  CHECK_FALSE(none->job.gpu);
  CHECK(none->job.threads == 1);
  CHECK(none->job.parts == 0);
  CHECK(none->program.empty());
}

TEST_CASE("compile messages: a broken reply is refused, never misread",
          "[jobs][compile_jobs][wire]") {
  jit::PartBuild part;
  part.key = blake3_hex("key");
  part.slice = blake3_hex("slice");
  part.object_hash = blake3_hex("object");
  part.functions = 12;
  part.first_function = "lua_gettop";
  part.origin = jit::PartOrigin::input_changed;
  auto m = compile_reply_message(CompileReply{"reused 0 of 1 parts", {part}}, "{\"m\":1}", "OBJ");
  REQUIRE(m);
  auto back = compile_reply_of(*m);
  REQUIRE(back);
  CHECK(back->reply.explanation == "reused 0 of 1 parts");
  REQUIRE(back->reply.parts.size() == 1);
  CHECK(back->reply.parts[0].origin == jit::PartOrigin::input_changed);
  CHECK(back->reply.parts[0].functions == 12);
  CHECK(back->metadata == "{\"m\":1}");
  CHECK(back->object == "OBJ");

  const std::size_t body = m->header["body_bytes"].get<std::size_t>();
  // The body cut anywhere (the header says so): corrupt, with the offset.
  for (std::size_t n = 0; n < body; ++n) {
    INFO("body cut to " << n);
    Message cut = *m;
    cut.header["body_bytes"] = n;
    auto r = compile_reply_of(cut);
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::corrupt);
  }
  // A body longer than the payload; metadata running past it; no length.
  Message longer = *m;
  longer.header["body_bytes"] = m->payload.size() + 1;
  Message short_metadata = *m;
  short_metadata.payload.resize(body + 3);
  Message headless = *m;
  headless.header = nlohmann::json::object();
  Message foreign = *m;
  foreign.payload.replace(0, 4, "EXR2");
  for (const Message& bad : {longer, short_metadata, headless, foreign}) {
    auto r = compile_reply_of(bad);
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::corrupt);
  }
}
