// The typed compile job and reply (compile_messages.h): every field survives
// the round trip, and a reply that does not add up is refused, never misread.
#include "fdo/daemon/compile_messages.h"
#include "fdo/util/hash.h"
#include "fdo/util/profile_wire.h"

#include <catch2/catch.hpp>

using namespace fdo;
using namespace fdo::daemon;

namespace {

// A reply with an explanation and parts, the rest at its defaults.
CompileReply reply_with(std::string explanation, std::vector<jit::PartBuild> parts) {
  CompileReply r;
  r.explanation = std::move(explanation);
  r.parts = std::move(parts);
  return r;
}

} // namespace

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
  CHECK(m->header.empty());
  REQUIRE(m->body);
  CHECK(m->body->op == TypedOp::compile);
  CHECK(job_op(*m) == "compile");
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
  auto m = compile_reply_message(reply_with("reused 0 of 1 parts", {part}), "{\"m\":1}", "OBJ");
  REQUIRE(m);
  auto back = compile_reply_of(*m);
  REQUIRE(back);
  CHECK(back->reply.explanation == "reused 0 of 1 parts");
  REQUIRE(back->reply.parts.size() == 1);
  CHECK(back->reply.parts[0].origin == jit::PartOrigin::input_changed);
  CHECK(back->reply.parts[0].functions == 12);
  CHECK(back->metadata == "{\"m\":1}");
  CHECK(back->object == "OBJ");

  const std::size_t body = m->body->bytes;
  // The body cut anywhere (the header says so): corrupt, with the offset.
  for (std::size_t n = 0; n < body; ++n) {
    INFO("body cut to " << n);
    Message cut = *m;
    cut.body->bytes = n;
    auto r = compile_reply_of(cut);
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::corrupt);
  }
  // A body longer than the payload; metadata running past it; no length.
  Message longer = *m;
  longer.body->bytes = m->payload.size() + 1;
  Message short_metadata = *m;
  short_metadata.payload.resize(body + 3);
  Message headless = *m;
  headless.body.reset();
  Message foreign = *m;
  foreign.payload.replace(0, 4, "EXR2");
  for (const Message& bad : {longer, short_metadata, headless, foreign}) {
    auto r = compile_reply_of(bad);
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::corrupt);
  }
}

TEST_CASE("compile messages: the pipeline prefix travels with a job and back with a reply",
          "[jobs][compile_jobs][wire]") {
  const std::string bitcode = "BC\xc0\xde the prefix";
  CompileJob job;
  job.threads = 2;
  job.prefix = PrefixRef{blake3_hex("prefix key"), blake3_hex(bitcode)};
  job.held = {{blake3_hex("k0"), blake3_hex("s0"), blake3_hex("o0")}};
  auto m = compile_job_message(job, "the program", "held objects", bitcode);
  REQUIRE(m);
  auto back = compile_job_of(*m);
  REQUIRE(back);
  CHECK(back->job.prefix == job.prefix);
  CHECK(back->program == "the program");
  REQUIRE(back->prefix.has_value());
  CHECK(back->prefix->key == job.prefix->key);
  CHECK(back->prefix->bitcode_hash == job.prefix->bitcode_hash);
  CHECK(back->prefix->bitcode == bitcode);
  // The held part's object still comes after it (one object is its own set).
  CHECK(back->unreadable.empty());
  REQUIRE(back->held.size() == 1);
  CHECK(back->held[0].object == "held objects");

  // A prefix without its bitcode, or bitcode without a prefix: refused.
  CHECK_FALSE(compile_job_message(job, "p", "", ""));
  CHECK_FALSE(compile_job_message(CompileJob{}, "p", "", bitcode));
  // A prefix longer than what follows the program: refused, not misread.
  Message cut = *m;
  cut.payload.resize(cut.payload.size() - std::string("held objects").size() - 3);
  auto refused = compile_job_of(cut);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code() == Errc::invalid_argument);
  // A key that is not one.
  CompileJob bad_key = job;
  bad_key.prefix->key = "not a key";
  auto bad = compile_job_message(bad_key, "p", "", bitcode);
  REQUIRE(bad);
  CHECK_FALSE(compile_job_of(*bad));

  // The reply: the prefix the compile ran comes back between the metadata
  // and the object; a taken one comes back without bitcode.
  CompileReply ran;
  ran.prefix = PrefixRef{blake3_hex("prefix key"), blake3_hex(bitcode)};
  ran.prefix_origin = jit::PrefixOrigin::input_changed;
  auto r = compile_reply_message(ran, "{}", "OBJ", bitcode);
  REQUIRE(r);
  auto rb = compile_reply_of(*r);
  REQUIRE(rb);
  CHECK(rb->reply.prefix == ran.prefix);
  CHECK(rb->reply.prefix_origin == jit::PrefixOrigin::input_changed);
  CHECK(rb->metadata == "{}");
  CHECK(rb->prefix_bitcode == bitcode);
  CHECK(rb->object == "OBJ");
  CompileReply taken = ran;
  taken.prefix_origin = jit::PrefixOrigin::reused;
  auto t = compile_reply_of(*compile_reply_message(taken, "{}", "OBJ"));
  REQUIRE(t);
  CHECK(t->reply.prefix_origin == jit::PrefixOrigin::reused);
  CHECK(t->prefix_bitcode.empty());
  CHECK(t->object == "OBJ");
  CHECK_FALSE(compile_reply_message(CompileReply{}, "{}", "OBJ", bitcode));
  // A prefix running past the payload; an origin out of range: corrupt.
  Message short_prefix = *r;
  short_prefix.payload.resize(short_prefix.payload.size() - 3 - 2);
  auto sp = compile_reply_of(short_prefix);
  REQUIRE_FALSE(sp);
  CHECK(sp.error().code() == Errc::corrupt);
  Message bad_origin = *r;
  const std::size_t body = r->body->bytes;
  // The origin is the byte before the metadata length (u64) at the body's end.
  bad_origin.payload[body - 9] = 9;
  auto bo = compile_reply_of(bad_origin);
  REQUIRE_FALSE(bo);
  CHECK(bo.error().code() == Errc::corrupt);
}
