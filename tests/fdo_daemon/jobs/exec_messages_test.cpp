// The exec job and reply codecs (exec_messages.h): every field survives a
// round trip, and a reply from a hostile or broken worker is refused with a
// clear error, never misread or over-allocated.
#include "fdo/daemon/exec_messages.h"
#include "fdo/util/wire.h"

#include <catch2/catch.hpp>

using namespace fdo;
using namespace fdo::daemon;

namespace {

ExecJob full_job() {
  ExecJob j;
  j.key = "k-0123456789abcdef";
  j.entry = "main";
  j.slots = {1, 0, UINT64_MAX};
  j.buffer_of_param = {-1, 0, 1};
  j.buffers = {{3, std::nullopt}, {4096, 0}};
  j.return_buffers = true;
  j.verbose = true;
  j.events = {"instructions", "branch-misses"};
  j.cache_entries = 3;
  j.sampling = StageSamplingRequest{{"cpu-clock"}, 997, 5000};
  j.function_ranges = false;
  j.object_size = 12345;
  j.metadata = R"({"mode":"plain"})";
  return j;
}

StageObservation full_observation() {
  StageObservation o;
  o.ret = 0xfeedfacecafebeefull;
  o.exited = -3;
  o.exec_ns = 1234567;
  perf::Measurement& m = o.measurement.emplace();
  perf::EventReading counted;
  counted.name = "instructions";
  counted.value = 1000;
  counted.raw = 800;
  counted.enabled_ns = 10;
  counted.running_ns = 8;
  counted.running_ratio = 0.8;
  counted.multiplexed = true;
  counted.status = perf::EventStatus::available;
  perf::EventReading refused;
  refused.name = "branch-misses";
  refused.status = perf::EventStatus::no_pmu;
  refused.reason = "no PMU";
  refused.error = 2;
  m.events = {counted, refused};
  m.task_clock_ns = 99;
  m.thread_cpu_ns = 7;
  m.process_cpu_ns = 8;
  m.wall_ns = 1234567;
  m.method = perf::ReadMethod::read_syscall;
  o.counts["main"] = {1, 2, 3};
  o.counts["file.c:helper"] = {};
  o.values["main"].indirect_calls = {{{0xabcdefull, 40}, {0x1234ull, 2}}};
  o.values["main"].memop_sizes = {{}, {{64, 9}}};
  o.values["main"].arguments = {{0, {{4, 1500}, {5, 100}}, 0}, {2, {{3, 1592}}, 8}};
  StageSampleReport& s = o.samples.emplace();
  s.events.resize(1);
  s.events[0].name = "cpu-clock";
  s.events[0].status = perf::EventStatus::available;
  s.events[0].branch_stack = true;
  s.frequency_hz = 997;
  s.recorded = 50;
  s.attributed = 40;
  s.lost_samples = 1;
  s.lost_records = 2;
  s.throttles = 3;
  s.functions["main"]["cpu-clock"] = 30;
  s.outside_jit["cpu-clock"] = 10;
  s.tallies.blocks["cpu-clock"]["main"] = {{0, 10}, {7, 20}};
  s.tallies.branches["main"][2] = {{"branch-misses", 4}};
  o.function_ranges = std::vector<jit::FunctionRange>{{"main", 0x1000, 64}, {"helper", 0x1040, 8}};
  o.buffer_sizes = {3, 4096};
  return o;
}

void check_same(const StageObservation& a, const StageObservation& b) {
  CHECK(a.ret == b.ret);
  CHECK(a.exited == b.exited);
  CHECK(a.exec_ns == b.exec_ns);
  CHECK(a.measurement == b.measurement);
  CHECK(a.counts == b.counts);
  CHECK(a.values == b.values);
  CHECK(a.samples == b.samples);
  CHECK(a.function_ranges == b.function_ranges);
  CHECK(a.buffer_sizes == b.buffer_sizes);
}

} // namespace

TEST_CASE("exec messages: a job survives the round trip, field by field", "[jobs][exec][wire]") {
  for (const ExecJob& job : {full_job(), ExecJob{}}) {
    auto bytes = encode_exec_job(job);
    REQUIRE(bytes);
    auto back = decode_exec_job(*bytes);
    REQUIRE(back);
    CHECK(*back == job);
  }
  // As a message: no header but its typed body (op and length), the body
  // leading the payload, the rest after it.
  auto m = exec_job_message(full_job());
  REQUIRE(m);
  CHECK(m->header.empty());
  REQUIRE(m->body);
  CHECK(*m->body == TypedBody{TypedOp::exec, m->payload.size()});
  m->payload += "OBJECT";
  auto d = exec_job_of(*m);
  REQUIRE(d);
  CHECK(d->value == full_job());
  CHECK(d->rest == "OBJECT");
}

TEST_CASE("exec messages: a reply survives the round trip, field by field", "[jobs][exec][wire]") {
  ExecReply ran;
  ran.observation = full_observation();
  auto bytes = encode_exec_reply(ran);
  REQUIRE(bytes);
  auto back = decode_exec_reply(*bytes);
  REQUIRE(back);
  CHECK(back->outcome == ExecOutcome::ran);
  check_same(back->observation, ran.observation);

  // The least a reply can say, and a missing object.
  ExecReply empty;
  auto e = decode_exec_reply(*encode_exec_reply(empty));
  REQUIRE(e);
  check_same(e->observation, StageObservation{});
  ExecReply missing;
  missing.outcome = ExecOutcome::missing_object;
  missing.observation = full_observation(); // not sent: nothing to observe
  auto mb = encode_exec_reply(missing);
  REQUIRE(mb);
  CHECK(mb->size() == 5);
  auto mback = decode_exec_reply(*mb);
  REQUIRE(mback);
  CHECK(mback->outcome == ExecOutcome::missing_object);

  // With returned buffers after the body.
  auto msg = exec_reply_message(ran, "abc");
  REQUIRE(msg);
  auto d = exec_reply_of(*msg);
  REQUIRE(d);
  CHECK(d->rest == "abc");
  check_same(d->value.observation, ran.observation);
}

TEST_CASE("exec messages: a broken or hostile reply is refused, never misread",
          "[jobs][exec][wire]") {
  ExecReply ran;
  ran.observation = full_observation();
  const std::string good = *encode_exec_reply(ran);

  // Cut anywhere: always an error naming the reply, never a crash.
  for (std::size_t n = 0; n < good.size(); ++n) {
    auto cut = decode_exec_reply(std::string_view(good).substr(0, n));
    REQUIRE_FALSE(cut);
    CHECK(cut.error().code() == Errc::corrupt);
    CHECK_THAT(cut.error().message(), Catch::StartsWith("exec reply: "));
  }
  // A byte more: trailing bytes.
  auto trailing = decode_exec_reply(good + "x");
  REQUIRE_FALSE(trailing);
  CHECK_THAT(trailing.error().message(), Catch::Contains("1 byte(s) after the end"));
  // Another layout.
  std::string other = good;
  other[3] = '9';
  auto layout = decode_exec_reply(other);
  REQUIRE_FALSE(layout);
  CHECK_THAT(layout.error().message(), Catch::Contains("unknown layout"));
  // An outcome past the last one.
  std::string outcome = good;
  outcome[4] = 7;
  auto bad_outcome = decode_exec_reply(outcome);
  REQUIRE_FALSE(bad_outcome);
  CHECK_THAT(bad_outcome.error().message(), Catch::Contains("the outcome at byte 4 is 7"));

  // A count that claims far more elements than there are bytes: refused
  // before anything is allocated for them.
  // A reply of the layout before argument value profiles: refused by its magic.
  wire::WireWriter old;
  old.u32(0x31525845u); // "EXR1"
  old.u8(0);
  auto older = decode_exec_reply(*std::move(old).take());
  REQUIRE_FALSE(older);
  CHECK_THAT(older.error().message(), Catch::Contains("unknown layout"));

  wire::WireWriter w;
  w.u32(0x32525845u); // "EXR2"
  w.u8(0);            // ran
  w.u64(0);           // ret
  w.boolean(false);   // exited
  w.u64(0);           // exec_ns
  w.boolean(false);   // measurement
  w.u32(0xffffffffu); // counts: 4 billion functions
  auto lying = decode_exec_reply(*std::move(w).take());
  REQUIRE_FALSE(lying);
  CHECK_THAT(lying.error().message(), Catch::Contains("a count of 4294967295"));
  CHECK_THAT(lying.error().message(), Catch::Contains("cannot fit"));

  // A boolean that is neither 0 nor 1.
  wire::WireWriter b;
  b.u32(0x32525845u);
  b.u8(0);
  b.u64(0);
  b.u8(2);
  auto not_bool = decode_exec_reply(*std::move(b).take());
  REQUIRE_FALSE(not_bool);
  CHECK_THAT(not_bool.error().message(), Catch::Contains("a boolean at byte 13 is 2"));

  // An exit status out of int range.
  wire::WireWriter x;
  x.u32(0x32525845u);
  x.u8(0);
  x.u64(0);
  x.boolean(true);
  x.i64(std::int64_t{1} << 40);
  auto status = decode_exec_reply(*std::move(x).take());
  REQUIRE_FALSE(status);
  CHECK_THAT(status.error().message(), Catch::Contains("exit status"));

  // The message around it: a body length past the payload, or none.
  auto msg = exec_reply_message(ran);
  REQUIRE(msg);
  msg->body->bytes = msg->payload.size() + 1;
  auto past = exec_reply_of(*msg);
  REQUIRE_FALSE(past);
  CHECK(past.error().code() == Errc::corrupt);
  msg->body.reset();
  auto none = exec_reply_of(*msg);
  REQUIRE_FALSE(none);
  CHECK_THAT(none.error().message(), Catch::Contains("not a typed message"));
}
