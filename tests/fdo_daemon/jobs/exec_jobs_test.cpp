// The exec role's compact job (worker_jobs.h): linked programs kept by
// storage key so the daemon sends the object once per worker, a key the
// worker does not hold answered with missing_object, and the measurement's
// explanations only when asked for.
#include "fdo/daemon/exec_messages.h"
#include "fdo/daemon/worker_jobs.h"
#include "fdo/jit/compiler.h"

#include <catch2/catch.hpp>
#include <functional>
#include <sys/mman.h>
#include <unistd.h>

using namespace fdo;
using namespace fdo::daemon;
using nlohmann::json;

namespace {

constexpr const char* kAdd = R"(
define i64 @add(i64 %a, i64 %b) {
  %s = add i64 %a, %b
  ret i64 %s
}
)";

// A counter in a writable global: each stage must start from its initial value.
constexpr const char* kCounter = R"(
@n = global i64 0

define i64 @bump(i64 %a) {
  %v = load i64, ptr @n
  %w = add i64 %v, %a
  store i64 %w, ptr @n
  ret i64 %w
}
)";

jit::CompileResult compiled(const char* ir) {
  jit::CompileRequest req;
  req.mode = CompileMode::plain;
  auto r = jit::compile(ir, req);
  REQUIRE(r);
  return std::move(*r);
}

// An execute of `entry` naming `key`; with `object`, the object and its
// metadata are attached. `tweak` changes the job before it is encoded.
using Tweak = std::function<void(ExecJob&)>;
Message exec_job(const std::string& key, const std::string& entry, std::vector<std::uint64_t> args,
                 const jit::CompileResult* object, const Tweak& tweak = {}) {
  ExecJob job;
  job.key = key;
  job.entry = entry;
  job.buffer_of_param.assign(args.size(), -1);
  job.slots = std::move(args);
  if (object != nullptr) {
    job.metadata = jit::metadata_to_json(*object).dump();
    job.object_size = object->object.size();
  }
  if (tweak) tweak(job);
  auto m = exec_job_message(job);
  REQUIRE(m);
  if (object != nullptr) m->payload += object->object;
  return std::move(*m);
}

Tweak cache_entries(std::uint64_t n) {
  return [n](ExecJob& j) { j.cache_entries = n; };
}

ExecReply reply_of(const Expected<Message>& reply) {
  REQUIRE(reply);
  auto decoded = exec_reply_of(*reply);
  REQUIRE(decoded);
  return std::move(decoded->value);
}

bool missing(const Expected<Message>& reply) {
  return reply_of(reply).outcome == ExecOutcome::missing_object;
}

std::uint64_t ret(const Expected<Message>& reply) {
  ExecReply r = reply_of(reply);
  REQUIRE(r.outcome == ExecOutcome::ran);
  return r.observation.ret;
}

} // namespace

TEST_CASE("exec job: a program is linked once and then named by key", "[jobs][exec]") {
  auto jobs = ExecJobs::create();
  REQUIRE(jobs);
  jit::CompileResult add = compiled(kAdd);

  // A fresh worker holds nothing: asked by key, it asks for the object.
  CHECK(missing((*jobs)->handle(exec_job("k-add", "add", {2, 3}, nullptr))));
  CHECK(ret((*jobs)->handle(exec_job("k-add", "add", {2, 3}, &add))) == 5);
  // From now on the key is enough.
  auto by_key = (*jobs)->handle(exec_job("k-add", "add", {40, 2}, nullptr));
  CHECK(ret(by_key) == 42);

  // Least recently used goes first once more than cache_entries are held.
  jit::CompileResult other = compiled(kAdd);
  Tweak one = cache_entries(1);
  CHECK(ret((*jobs)->handle(exec_job("k-other", "add", {1, 1}, &other, one))) == 2);
  CHECK(missing((*jobs)->handle(exec_job("k-add", "add", {1, 2}, nullptr, one))));
  CHECK(ret((*jobs)->handle(exec_job("k-other", "add", {1, 2}, nullptr, one))) == 3);

  // cache_entries 0: nothing is kept.
  Tweak none = cache_entries(0);
  CHECK(ret((*jobs)->handle(exec_job("k-add", "add", {1, 2}, &add, none))) == 3);
  CHECK(missing((*jobs)->handle(exec_job("k-add", "add", {1, 2}, nullptr, none))));
  CHECK(missing((*jobs)->handle(exec_job("k-other", "add", {1, 2}, nullptr, none))));
}

// An entry that ends its program with exit(status) after a counted loop, as
// a C main often does; and one that calls _exit.
constexpr const char* kExits = R"(
declare void @exit(i32) noreturn
declare void @_exit(i32) noreturn

define i64 @run(i64 %n, i64 %status) {
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %next, %loop ]
  %next = add i64 %i, 1
  %done = icmp uge i64 %next, %n
  br i1 %done, label %out, label %loop
out:
  %s = trunc i64 %status to i32
  call void @exit(i32 %s)
  unreachable
}

define i64 @quick(i64 %status) {
  %s = trunc i64 %status to i32
  call void @_exit(i32 %s)
  unreachable
}
)";

TEST_CASE("exec job: a program that calls exit(n) ends its call, not the worker, and counts",
          "[jobs][exec][exit]") {
  auto jobs = ExecJobs::create();
  REQUIRE(jobs);
  jit::CompileRequest req;
  req.mode = CompileMode::instrumented;
  auto instrumented = jit::compile(kExits, req);
  REQUIRE(instrumented);
  REQUIRE_FALSE(instrumented->counters_layout.empty());

  ExecReply reply = reply_of((*jobs)->handle(exec_job("k-exit", "run", {1000, 3}, &*instrumented)));
  REQUIRE(reply.observation.exited);
  CHECK(*reply.observation.exited == 3);
  // The stage is measured and its counters read, as after a return.
  CHECK(reply.observation.measurement);
  const auto& counts = reply.observation.counts;
  REQUIRE(counts.contains("run"));
  std::uint64_t total = 0;
  for (std::uint64_t c : counts.at("run"))
    total += c;
  CHECK(total >= 1000);
  // The program ended: it is not kept linked for the next stage.
  CHECK(missing((*jobs)->handle(exec_job("k-exit", "run", {10, 0}, nullptr))));
  // _exit too; and the worker goes on running programs.
  ExecReply quick = reply_of((*jobs)->handle(exec_job("k-exit", "quick", {7}, &*instrumented)));
  CHECK(quick.observation.exited == std::optional<std::int32_t>(7));
  jit::CompileResult add = compiled(kAdd);
  CHECK(ret((*jobs)->handle(exec_job("k-add", "add", {2, 3}, &add))) == 5);
  CHECK_FALSE(
      reply_of((*jobs)->handle(exec_job("k-add", "add", {2, 3}, nullptr))).observation.exited);
}

TEST_CASE("exec job: a program with writable globals is kept and starts every stage afresh",
          "[jobs][exec]") {
  auto jobs = ExecJobs::create();
  REQUIRE(jobs);
  jit::CompileResult counter = compiled(kCounter);
  REQUIRE(counter.mutable_globals);
  CHECK(ret((*jobs)->handle(exec_job("k-n", "bump", {5}, &counter))) == 5);
  // Kept linked (asked for by key, without its object), and restarted: each
  // stage starts from @n = 0 whichever worker runs it.
  for (std::uint64_t a : {5, 7, 7})
    CHECK(ret((*jobs)->handle(exec_job("k-n", "bump", {a}, nullptr))) == a);
  // A program kept next to it does not disturb it, nor it the other.
  jit::CompileResult add = compiled(kAdd);
  CHECK(ret((*jobs)->handle(exec_job("k-add", "add", {2, 3}, &add))) == 5);
  CHECK(ret((*jobs)->handle(exec_job("k-n", "bump", {3}, nullptr))) == 3);
  // With nothing kept (cache_entries 0), linked afresh every time.
  Tweak none = cache_entries(0);
  CHECK(ret((*jobs)->handle(exec_job("k-n", "bump", {4}, &counter, none))) == 4);
  CHECK(ret((*jobs)->handle(exec_job("k-n", "bump", {4}, &counter, none))) == 4);
  CHECK(missing((*jobs)->handle(exec_job("k-n", "bump", {5}, nullptr))));
}

TEST_CASE("exec job: the measurement explains an event only when verbose", "[jobs][exec]") {
  auto jobs = ExecJobs::create();
  REQUIRE(jobs);
  jit::CompileResult add = compiled(kAdd);
  auto events = [](bool verbose) {
    return [verbose](ExecJob& j) {
      j.events = {"instructions", "branch-misses"};
      j.verbose = verbose;
    };
  };

  ExecReply compact = reply_of((*jobs)->handle(exec_job("k", "add", {1, 2}, &add, events(false))));
  CHECK(compact.observation.ret == 3);
  REQUIRE(compact.observation.measurement);
  const perf::Measurement& m = *compact.observation.measurement;
  REQUIRE(m.events.size() == 2);
  CHECK(m.task_clock_reason.empty());
  CHECK(compact.observation.exec_ns == m.wall_ns);
  for (const perf::EventReading& e : m.events)
    CHECK(e.reason.empty());

  ExecReply full = reply_of((*jobs)->handle(exec_job("k", "add", {1, 2}, nullptr, events(true))));
  CHECK(full.observation.ret == 3);
  REQUIRE(full.observation.measurement);
  const perf::Measurement& v = *full.observation.measurement;
  REQUIRE(v.events.size() == 2);
  for (const perf::EventReading& e : v.events)
    // An event that did not count says why (on a host without a PMU: all).
    if (e.status != perf::EventStatus::available) CHECK_FALSE(e.reason.empty());
  if (!v.task_clock_ns) CHECK_FALSE(v.task_clock_reason.empty());
}

namespace {

// inc(p, n): adds 1 to each of n bytes at p; returns the sum of the bytes as they came.
constexpr const char* kInc = R"(
define i64 @inc(ptr %p, i64 %n) {
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i1, %body ]
  %acc = phi i64 [ 0, %entry ], [ %acc1, %body ]
  %done = icmp eq i64 %i, %n
  br i1 %done, label %exit, label %body
body:
  %q = getelementptr i8, ptr %p, i64 %i
  %v = load i8, ptr %q
  %v1 = add i8 %v, 1
  store i8 %v1, ptr %q
  %z = zext i8 %v to i64
  %acc1 = add i64 %acc, %z
  %i1 = add i64 %i, 1
  br label %loop
exit:
  ret i64 %acc
}
)";

Fd memfd_with(const std::string& bytes) {
  Fd fd(::memfd_create("exec-jobs-test", MFD_CLOEXEC));
  REQUIRE(fd.valid());
  REQUIRE(::write(fd.get(), bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()));
  return fd;
}

} // namespace

TEST_CASE("exec job: a buffer sent as a descriptor is mapped copy-on-write", "[jobs][exec]") {
  auto jobs = ExecJobs::create();
  REQUIRE(jobs);
  jit::CompileResult inc = compiled(kInc);
  std::string bytes(300000, '\0'); // many pages
  std::uint64_t sum = 0;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    bytes[i] = static_cast<char>((i * 31 + i / 4096) & 0xff);
    sum += static_cast<unsigned char>(bytes[i]);
  }
  Fd fd = memfd_with(bytes); // not even sealed: the mapping is private either way
  // An inline buffer first: its bytes are in the payload, the memfd's are not.
  Message job = exec_job("k-inc", "inc", {0, bytes.size()}, &inc, [&](ExecJob& j) {
    j.buffer_of_param = {1, -1};
    j.return_buffers = true;
    j.buffers = {{3, std::nullopt}, {bytes.size(), 0}};
  });
  job.payload += "abc";
  job.fds = {fd.get()};
  auto r = (*jobs)->handle(job);
  CHECK(ret(r) == sum);
  auto decoded = exec_reply_of(*r);
  REQUIRE(decoded);
  CHECK(decoded->value.observation.buffer_sizes == std::vector<std::uint64_t>{3, bytes.size()});
  std::string_view returned = decoded->rest;
  REQUIRE(returned.size() == 3 + bytes.size());
  CHECK(returned.substr(0, 3) == "abc");
  bool all_incremented = true;
  for (std::size_t i = 0; i < bytes.size(); ++i)
    all_incremented = all_incremented && returned[3 + i] == static_cast<char>(bytes[i] + 1);
  CHECK(all_incremented);
  // The program's writes went to private pages: the memfd is as it was.
  std::string after(bytes.size(), '\0');
  REQUIRE(::pread(fd.get(), after.data(), after.size(), 0) == static_cast<ssize_t>(after.size()));
  CHECK(after == bytes);
}

TEST_CASE("exec job: a bad buffer descriptor is a clear error", "[jobs][exec]") {
  auto jobs = ExecJobs::create();
  REQUIRE(jobs);
  jit::CompileResult inc = compiled(kInc);
  Fd fd = memfd_with(std::string(100, 'x'));
  auto run = [&](ExecBufferSpec buffer, std::vector<int> fds) {
    Message job = exec_job("k-inc", "inc", {0, 100}, &inc, [&](ExecJob& j) {
      j.buffer_of_param = {0, -1};
      j.buffers = {buffer};
    });
    job.fds = std::move(fds);
    return (*jobs)->handle(job);
  };
  auto out_of_range = run({100, 1}, {fd.get()});
  REQUIRE_FALSE(out_of_range);
  CHECK(out_of_range.error().code() == Errc::invalid_argument);
  CHECK_THAT(out_of_range.error().message(), Catch::Contains("out of range (1 came with the job)"));
  auto no_fds = run({100, 0}, {});
  REQUIRE_FALSE(no_fds);
  CHECK_THAT(no_fds.error().message(), Catch::Contains("out of range (0 came with the job)"));
  auto wrong_size = run({64, 0}, {fd.get()});
  REQUIRE_FALSE(wrong_size);
  CHECK(wrong_size.error().code() == Errc::invalid_argument);
  CHECK_THAT(wrong_size.error().message(), Catch::Contains("holds 100 bytes, the job says 64"));
  // Bytes the payload does not have.
  auto short_payload = run({1000, std::nullopt}, {});
  REQUIRE_FALSE(short_payload);
  CHECK_THAT(short_payload.error().message(), Catch::Contains("payload shorter than its buffers"));
  // A job whose body is not an exec job's layout.
  Message garbled = exec_job("k-inc", "inc", {0, 100}, &inc);
  garbled.payload[0] ^= 0x5a;
  auto bad_body = (*jobs)->handle(garbled);
  REQUIRE_FALSE(bad_body);
  CHECK(bad_body.error().code() == Errc::corrupt);
  CHECK_THAT(bad_body.error().message(), Catch::Contains("exec job: unknown layout"));
}
