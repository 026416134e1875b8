// The exec role's compact job (worker_jobs.h): linked programs kept by
// storage key so the daemon sends the object once per worker, a key the
// worker does not hold answered with missing_object, and the measurement's
// explanations only when asked for.
#include "fdo/daemon/worker_jobs.h"
#include "fdo/jit/compiler.h"

#include <catch2/catch.hpp>
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
// metadata are attached.
Message exec_job(const std::string& key, const std::string& entry, std::vector<std::uint64_t> args,
                 const jit::CompileResult* object, json extra = json::object()) {
  Message m;
  m.header = {{"op", "exec"},
              {"key", key},
              {"entry", entry},
              {"slots", args},
              {"buffer_of_param", std::vector<int>(args.size(), -1)},
              {"events", json::array()}};
  if (object != nullptr) {
    m.header["metadata"] = jit::metadata_to_json(*object);
    m.header["object_size"] = object->object.size();
    m.payload = object->object;
  }
  for (auto& [k, v] : extra.items())
    m.header[k] = v;
  return m;
}

std::string missing(const Expected<Message>& reply) {
  REQUIRE(reply);
  return reply->header.value("missing_object", std::string());
}

std::uint64_t ret(const Expected<Message>& reply) {
  REQUIRE(reply);
  REQUIRE(reply->header.contains("ret"));
  return reply->header["ret"].get<std::uint64_t>();
}

} // namespace

TEST_CASE("exec job: a program is linked once and then named by key", "[jobs][exec]") {
  auto jobs = ExecJobs::create();
  REQUIRE(jobs);
  jit::CompileResult add = compiled(kAdd);

  // A fresh worker holds nothing: asked by key, it asks for the object.
  CHECK(missing((*jobs)->handle(exec_job("k-add", "add", {2, 3}, nullptr))) == "k-add");
  CHECK(ret((*jobs)->handle(exec_job("k-add", "add", {2, 3}, &add))) == 5);
  // From now on the key is enough.
  auto by_key = (*jobs)->handle(exec_job("k-add", "add", {40, 2}, nullptr));
  CHECK(ret(by_key) == 42);
  CHECK_FALSE(by_key->header.contains("missing_object"));

  // Least recently used goes first once more than cache_entries are held.
  jit::CompileResult other = compiled(kAdd);
  json one = {{"cache_entries", 1}};
  CHECK(ret((*jobs)->handle(exec_job("k-other", "add", {1, 1}, &other, one))) == 2);
  CHECK(missing((*jobs)->handle(exec_job("k-add", "add", {1, 2}, nullptr, one))) == "k-add");
  CHECK(ret((*jobs)->handle(exec_job("k-other", "add", {1, 2}, nullptr, one))) == 3);

  // cache_entries 0: nothing is kept.
  json none = {{"cache_entries", 0}};
  CHECK(ret((*jobs)->handle(exec_job("k-add", "add", {1, 2}, &add, none))) == 3);
  CHECK(missing((*jobs)->handle(exec_job("k-add", "add", {1, 2}, nullptr, none))) == "k-add");
  CHECK(missing((*jobs)->handle(exec_job("k-other", "add", {1, 2}, nullptr, none))) == "k-other");
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

  auto reply = (*jobs)->handle(exec_job("k-exit", "run", {1000, 3}, &*instrumented));
  REQUIRE(reply);
  REQUIRE(reply->header.contains("exited"));
  CHECK(reply->header["exited"]["status"] == 3);
  // The stage is measured and its counters read, as after a return.
  CHECK(reply->header.contains("measurement"));
  const json& counts = reply->header["counts"];
  REQUIRE(counts.contains("run"));
  std::uint64_t total = 0;
  for (const json& c : counts["run"])
    total += c.get<std::uint64_t>();
  CHECK(total >= 1000);
  // The program ended: it is not kept linked for the next stage.
  CHECK(missing((*jobs)->handle(exec_job("k-exit", "run", {10, 0}, nullptr))) == "k-exit");
  // _exit too; and the worker goes on running programs.
  auto quick = (*jobs)->handle(exec_job("k-exit", "quick", {7}, &*instrumented));
  REQUIRE(quick);
  CHECK(quick->header["exited"]["status"] == 7);
  jit::CompileResult add = compiled(kAdd);
  CHECK(ret((*jobs)->handle(exec_job("k-add", "add", {2, 3}, &add))) == 5);
  CHECK_FALSE(
      (*jobs)->handle(exec_job("k-add", "add", {2, 3}, nullptr))->header.contains("exited"));
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
  json none = {{"cache_entries", 0}};
  CHECK(ret((*jobs)->handle(exec_job("k-n", "bump", {4}, &counter, none))) == 4);
  CHECK(ret((*jobs)->handle(exec_job("k-n", "bump", {4}, &counter, none))) == 4);
  CHECK(missing((*jobs)->handle(exec_job("k-n", "bump", {5}, nullptr))) == "k-n");
}

TEST_CASE("exec job: the measurement explains an event only when verbose", "[jobs][exec]") {
  auto jobs = ExecJobs::create();
  REQUIRE(jobs);
  jit::CompileResult add = compiled(kAdd);
  json events = {{"events", {"instructions", "branch-misses"}}};

  auto compact = (*jobs)->handle(exec_job("k", "add", {1, 2}, &add, events));
  CHECK(ret(compact) == 3);
  const json& m = compact->header["measurement"];
  REQUIRE(m["events"].size() == 2);
  CHECK_FALSE(m.contains("task_clock_reason"));
  for (const json& e : m["events"]) {
    CHECK(e.contains("status"));
    CHECK(e.contains("value"));
    CHECK_FALSE(e.contains("reason"));
    // An event that did not count is its name, status and errno; nothing else.
    if (e["value"].is_null()) {
      CHECK(e.contains("errno"));
      CHECK_FALSE(e.contains("raw"));
      CHECK_FALSE(e.contains("enabled_ns"));
    }
  }

  json verbose = events;
  verbose["verbose"] = true;
  auto full = (*jobs)->handle(exec_job("k", "add", {1, 2}, nullptr, verbose));
  CHECK(ret(full) == 3);
  const json& v = full->header["measurement"];
  REQUIRE(v["events"].size() == 2);
  CHECK(v.contains("task_clock_reason"));
  for (const json& e : v["events"]) {
    REQUIRE(e.contains("reason"));
    CHECK(e.contains("raw"));
    // An event that did not count says why (on a host without a PMU: all).
    if (e["status"] != "available") CHECK_FALSE(e["reason"].get<std::string>().empty());
  }
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
  Message job = exec_job(
      "k-inc", "inc", {0, bytes.size()}, &inc,
      {{"buffer_of_param", {1, -1}},
       {"return_buffers", true},
       {"buffers",
        {{{"elem", "u8"}, {"size", 3}}, {{"elem", "u8"}, {"size", bytes.size()}, {"fd", 0}}}}});
  job.payload += "abc";
  job.fds = {fd.get()};
  auto r = (*jobs)->handle(job);
  CHECK(ret(r) == sum);
  REQUIRE(r->payload.size() == 3 + bytes.size());
  CHECK(r->payload.substr(0, 3) == "abc");
  bool all_incremented = true;
  for (std::size_t i = 0; i < bytes.size(); ++i)
    all_incremented = all_incremented && r->payload[3 + i] == static_cast<char>(bytes[i] + 1);
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
  auto run = [&](json buffer, std::vector<int> fds) {
    Message job = exec_job("k-inc", "inc", {0, 100}, &inc,
                           {{"buffer_of_param", {0, -1}}, {"buffers", json::array({buffer})}});
    job.fds = std::move(fds);
    return (*jobs)->handle(job);
  };
  auto out_of_range = run({{"elem", "u8"}, {"size", 100}, {"fd", 1}}, {fd.get()});
  REQUIRE_FALSE(out_of_range);
  CHECK(out_of_range.error().code() == Errc::invalid_argument);
  CHECK_THAT(out_of_range.error().message(), Catch::Contains("out of range (1 came with the job)"));
  auto no_fds = run({{"elem", "u8"}, {"size", 100}, {"fd", 0}}, {});
  REQUIRE_FALSE(no_fds);
  CHECK_THAT(no_fds.error().message(), Catch::Contains("out of range (0 came with the job)"));
  auto wrong_size = run({{"elem", "u8"}, {"size", 64}, {"fd", 0}}, {fd.get()});
  REQUIRE_FALSE(wrong_size);
  CHECK(wrong_size.error().code() == Errc::invalid_argument);
  CHECK_THAT(wrong_size.error().message(), Catch::Contains("holds 100 bytes, the job says 64"));
  auto not_object = run(json::array({1, 2}), {});
  REQUIRE_FALSE(not_object);
  CHECK_THAT(not_object.error().message(), Catch::Contains("a buffer is not an object"));
}
