// run_worker_loop tested directly: the loop runs in a forked child and the
// test speaks the raw job protocol to it over a socketpair.
#include "fdo/daemon/worker_loop.h"
#include "support/sanitizer.h"

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fcntl.h>
#include <new>
#include <stdexcept>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace fdo;
using namespace fdo::daemon;
using namespace std::chrono_literals;

namespace {

class LoopProcess {
public:
  // Forks a child that runs `handler` in run_worker_loop; `before` runs in the child first.
  static LoopProcess start(ContextJobHandler handler, void (*before)() = nullptr) {
    auto sp = make_socket_pair();
    REQUIRE(sp);
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      sp->first.reset();
      if (before) before();
      int rc = run_worker_loop(sp->second.get(), std::move(handler));
      ::_exit(rc);
    }
    sp->second.reset();
    return LoopProcess(pid, std::move(sp->first));
  }
  LoopProcess(LoopProcess&& o) noexcept
      : pid_(std::exchange(o.pid_, -1)), sock_(std::move(o.sock_)) {}
  ~LoopProcess() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }

  int sock() const { return sock_.get(); }
  void close() { sock_.reset(); }

  Message recv() {
    auto m = recv_message(sock_.get(), FrameLimits{}, Deadline::after(10s));
    REQUIRE(m);
    return std::move(*m);
  }
  void send(const nlohmann::json& header, std::string payload = {}) {
    REQUIRE(send_message(sock_.get(), Message{header, std::move(payload)}, Deadline::after(10s)));
  }
  Message job(std::uint64_t id, const nlohmann::json& job, const JobLimits& limits = {},
              std::string payload = {}) {
    send({{"id", id}, {"limits", to_json(limits)}, {"job", job}}, std::move(payload));
    return recv();
  }
  int wait_status() {
    int status = 0;
    REQUIRE(::waitpid(pid_, &status, 0) == pid_);
    pid_ = -1;
    return status;
  }

private:
  LoopProcess(pid_t pid, Fd sock) : pid_(pid), sock_(std::move(sock)) {}
  pid_t pid_;
  Fd sock_;
};

Expected<Message> test_handler(const Message& req, const JobContext& ctx) {
  if (req.body) {
    // A typed job: its payload back with "!" added, under a typed body of
    // the same length, or (op compile) that much output.
    Message out;
    out.payload = req.payload + "!";
    if (req.body->op == TypedOp::compile) out.payload.assign(1000, 'c');
    out.body = TypedBody{TypedOp::none, req.body->bytes};
    return out;
  }
  const std::string op = req.header.value("op", "");
  if (op == "echo") return Message{{{"echo", req.header}, {"id", ctx.id}}, req.payload};
  if (op == "fail") return make_error(Errc::not_found, "no such thing");
  if (op == "big") return Message{{{"big", true}}, std::string(1000, 'b')};
  if (op == "bad_alloc") throw std::bad_alloc();
  if (op == "throw") throw std::runtime_error("boom");
  if (op == "limits") {
    rlimit as{}, cpu{}, core{};
    ::getrlimit(RLIMIT_AS, &as);
    ::getrlimit(RLIMIT_CPU, &cpu);
    ::getrlimit(RLIMIT_CORE, &core);
    return Message{{{"as_soft", std::uint64_t(as.rlim_cur)},
                    {"as_hard", std::uint64_t(as.rlim_max)},
                    {"cpu_soft", std::uint64_t(cpu.rlim_cur)},
                    {"core_soft", std::uint64_t(core.rlim_cur)}},
                   {}};
  }
  if (op == "burn") {
    // CPU for `ms` milliseconds of this thread's clock.
    const auto ms = req.header.value("ms", 0);
    timespec t0{}, t{};
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
    volatile std::uint64_t x = 0;
    do {
      for (int i = 0; i < 100000; ++i)
        x = x + static_cast<std::uint64_t>(i);
      ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    } while ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 < ms);
    return Message{{{"burned", ms}}, {}};
  }
  if (op == "spin") {
    for (;;) {
      volatile std::uint64_t x = 0;
      for (int i = 0; i < 1000000; ++i)
        x = x + static_cast<std::uint64_t>(i);
    }
  }
  return make_error(Errc::invalid_argument, "unknown op");
}

void expect_hello(LoopProcess& p) {
  Message hello = p.recv();
  REQUIRE(hello.header.contains("hello"));
  CHECK(hello.header["hello"]["protocol"] == kWorkerProtocolVersion);
}

} // namespace

TEST_CASE("worker_loop: handshake - results - handler errors - exit 0 at end of stream",
          "[worker_loop]") {
  auto p = LoopProcess::start(test_handler);
  expect_hello(p);

  Message r = p.job(7, {{"op", "echo"}, {"x", 1}}, JobLimits{}, std::string("\0bin\xff", 5));
  CHECK(r.header["id"] == 7);
  CHECK(r.header["ok"] == true);
  CHECK(r.header["result"]["echo"]["x"] == 1);
  CHECK(r.header["result"]["id"] == 7);
  CHECK(r.payload == std::string("\0bin\xff", 5));

  Message e = p.job(8, {{"op", "fail"}});
  CHECK(e.header["id"] == 8);
  CHECK(e.header["ok"] == false);
  CHECK(e.header["error"]["code"] == "not_found");
  CHECK(e.header["error"]["message"] == "no such thing");

  p.close();
  int status = p.wait_status();
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("worker_loop: malformed requests get an error and the loop goes on", "[worker_loop]") {
  auto p = LoopProcess::start(test_handler);
  expect_hello(p);

  p.send({{"limits", to_json(JobLimits{})}, {"job", {}}});
  Message r1 = p.recv();
  CHECK(r1.header["ok"] == false);
  CHECK(r1.header["error"]["code"] == "invalid_argument");
  CHECK_THAT(r1.header["error"]["message"].get<std::string>(), Catch::Contains("'id'"));

  p.send({{"id", 3}, {"limits", {{"wall_ms", "x"}}}, {"job", {}}});
  Message r2 = p.recv();
  CHECK(r2.header["id"] == 3);
  CHECK(r2.header["error"]["code"] == "invalid_argument");
  CHECK_THAT(r2.header["error"]["message"].get<std::string>(), Catch::Contains("wall_ms"));

  // A header that is not an object cannot be framed at all (the receiver's
  // pre-scan would refuse it as corrupt): the sender refuses, nothing is sent.
  auto not_object = send_message(p.sock(), Message{nlohmann::json::array({1, 2}), ""});
  REQUIRE_FALSE(not_object);
  CHECK(not_object.error().code() == Errc::invalid_argument);
  CHECK_THAT(not_object.error().message(), Catch::Contains("must be an object"));

  Message ok = p.job(4, {{"op", "echo"}});
  CHECK(ok.header["ok"] == true);
}

TEST_CASE("worker_loop: typed jobs are answered in typed envelopes - malformed ones get an error",
          "[worker_loop][typed]") {
  auto p = LoopProcess::start(test_handler);
  expect_hello(p);
  auto typed = [&](TypedEnvelope e, TypedOp op, std::string payload, std::uint64_t body_bytes) {
    Message m;
    m.payload = std::move(payload);
    m.body = TypedBody{op, body_bytes};
    m.envelope = std::move(e);
    REQUIRE(send_message(p.sock(), m, Deadline::after(10s)));
    return p.recv();
  };
  TypedEnvelope job;
  job.id = 11;
  Message r = typed(job, TypedOp::exec, "abc", 2);
  REQUIRE(r.envelope);
  CHECK(r.envelope->kind == TypedEnvelope::Kind::reply);
  CHECK(r.envelope->id == 11);
  CHECK(r.envelope->retire.empty());
  CHECK(r.envelope->extra.is_null());
  REQUIRE(r.body);
  CHECK(*r.body == TypedBody{TypedOp::none, 2});
  CHECK(r.payload == "abc!");

  // No op; a reply's envelope sent as a job; limits that are no limits;
  // output over max_output_bytes: each an error (a CBOR one), the loop goes on.
  Message no_op = typed(job, TypedOp::none, "abc", 2);
  CHECK(no_op.header["id"] == 11);
  CHECK(no_op.header["ok"] == false);
  CHECK_THAT(no_op.header["error"]["message"].get<std::string>(), Catch::Contains("no op"));
  TypedEnvelope as_reply = job;
  as_reply.kind = TypedEnvelope::Kind::reply;
  Message reply = typed(as_reply, TypedOp::exec, "abc", 2);
  CHECK(reply.header["error"]["code"] == "invalid_argument");
  CHECK_THAT(reply.header["error"]["message"].get<std::string>(), Catch::Contains("reply's"));
  TypedEnvelope no_wall = job;
  no_wall.limits.wall = std::chrono::milliseconds(0);
  Message wall = typed(no_wall, TypedOp::exec, "abc", 2);
  CHECK_THAT(wall.header["error"]["message"].get<std::string>(), Catch::Contains("wall-time"));
  TypedEnvelope small = job;
  small.id = 12;
  small.limits.max_output_bytes = 100;
  Message big = typed(small, TypedOp::compile, "", 0);
  CHECK(big.header["id"] == 12);
  CHECK(big.header["error"]["code"] == "resource_exhausted");
  CHECK(big.payload.empty());

  job.id = 13;
  Message again = typed(job, TypedOp::exec, "xyz", 3);
  REQUIRE(again.envelope);
  CHECK(again.envelope->id == 13);
  CHECK(again.payload == "xyz!");
}

TEST_CASE("worker_loop: output over max_output_bytes becomes resource_exhausted", "[worker_loop]") {
  auto p = LoopProcess::start(test_handler);
  expect_hello(p);
  JobLimits small;
  small.max_output_bytes = 100;
  Message r = p.job(1, {{"op", "big"}}, small);
  CHECK(r.header["ok"] == false);
  CHECK(r.header["error"]["code"] == "resource_exhausted");
  CHECK_THAT(r.header["error"]["message"].get<std::string>(),
             Catch::Contains("exceeds the limit of 100 bytes"));
  CHECK(r.payload.empty());
  CHECK(p.job(2, {{"op", "big"}}).header["ok"] == true);
}

TEST_CASE("worker_loop: bad_alloc and other exceptions become errors", "[worker_loop]") {
  auto p = LoopProcess::start(test_handler);
  expect_hello(p);
  JobLimits mem;
  mem.address_space_bytes = 256 * kMiB;
  Message r = p.job(1, {{"op", "bad_alloc"}}, mem);
  CHECK(r.header["error"]["code"] == "resource_exhausted");
  CHECK(r.header["error"]["message"] == "exceeded the memory limit of 256 MiB (allocation failed)");
  Message t = p.job(2, {{"op", "throw"}});
  CHECK(t.header["error"]["code"] == "internal");
  CHECK_THAT(t.header["error"]["message"].get<std::string>(), Catch::Contains("boom"));
  CHECK(p.job(3, {{"op", "echo"}}).header["ok"] == true);
}

TEST_CASE("worker_loop: per-job rlimits are applied and restored - hard limits kept",
          "[worker_loop]") {
  rlimit mine{};
  ::getrlimit(RLIMIT_AS, &mine);
  auto p = LoopProcess::start(test_handler);
  expect_hello(p);
  JobLimits l;
  l.address_space_bytes = 512 * kMiB;
  l.cpu_seconds = 5;
  Message r = p.job(1, {{"op", "limits"}}, l);
  REQUIRE(r.header["ok"] == true);
  auto as_soft = r.header["result"]["as_soft"].get<std::uint64_t>();
  CHECK(as_soft > 512 * kMiB); // current mapping + the job's allowance
  if (fdo::test_support::sanitizer_build())
    WARN("sanitizer build: the worker's mapping includes the sanitizer's shadow reservation "
         "(terabytes), so only 'above the allowance' is checked");
  else
    CHECK(as_soft < 512 * kMiB * 16); // not unlimited
  CHECK(r.header["result"]["as_hard"].get<std::uint64_t>() == std::uint64_t(mine.rlim_max));
  CHECK(r.header["result"]["cpu_soft"].get<std::uint64_t>() >= 5);
  CHECK(r.header["result"]["cpu_soft"].get<std::uint64_t>() < 100);
  CHECK(r.header["result"]["core_soft"] == 0);

  Message r2 = p.job(2, {{"op", "limits"}}, JobLimits{});
  CHECK(r2.header["result"]["as_soft"].get<std::uint64_t>() == std::uint64_t(mine.rlim_cur));
}

TEST_CASE("worker_loop: each job runs under its own CPU allowance - kept between short jobs",
          "[worker_loop]") {
  // The CPU limit is set only when "used so far + allowance" changes, so a
  // job with a smaller allowance than the one before must still get its own,
  // and a job spinning after a run of short ones is still stopped at its limit.
  auto p = LoopProcess::start(test_handler);
  expect_hello(p);
  auto cpu_soft = [&](std::uint64_t id, std::uint64_t seconds) {
    JobLimits l;
    l.cpu_seconds = seconds;
    Message r = p.job(id, {{"op", "limits"}}, l);
    REQUIRE(r.header["ok"] == true);
    return r.header["result"]["cpu_soft"].get<std::uint64_t>();
  };
  const std::uint64_t five = cpu_soft(1, 5);
  const std::uint64_t two = cpu_soft(2, 2);
  const std::uint64_t five_again = cpu_soft(3, 5);
  // The same whole second of usage (one more if the worker crossed one).
  CHECK(two >= five - 3);
  CHECK(two <= five - 2);
  CHECK(five_again >= five);
  CHECK(five_again <= five + 1);
  for (std::uint64_t i = 0; i < 50; ++i)
    CHECK(cpu_soft(10 + i, 2) <= two + 1);

  JobLimits l;
  l.cpu_seconds = 1;
  p.send({{"id", 99}, {"limits", to_json(l)}, {"job", {{"op", "spin"}}}});
  int status = p.wait_status();
  REQUIRE(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGXCPU);
}

TEST_CASE("worker_loop: CPU used by earlier jobs does not shorten the next one's allowance",
          "[worker_loop]") {
  // The loop reads the CPU it has used only when it may have crossed a whole
  // second since the last reading: jobs that used 1.8 s between them, each
  // with the same allowance, must each still get all of it.
  auto p = LoopProcess::start(test_handler);
  expect_hello(p);
  JobLimits l;
  l.cpu_seconds = 2;
  l.wall = std::chrono::milliseconds(60000);
  for (std::uint64_t i = 0; i < 6; ++i) {
    Message r = p.job(i, {{"op", "burn"}, {"ms", 300}}, l);
    REQUIRE(r.header["ok"] == true);
  }
  // 1.5 s more: past "first reading + 2 s", within "now + 2 s".
  Message r = p.job(10, {{"op", "burn"}, {"ms", 1500}}, l);
  REQUIRE(r.header["ok"] == true);
  CHECK(r.header["result"]["burned"] == 1500);
}

TEST_CASE("worker_loop: a corrupt request stream ends the loop with status 2", "[worker_loop]") {
  auto p = LoopProcess::start(test_handler);
  expect_hello(p);
  const char junk[] = "definitely not a frame....";
  REQUIRE(::write(p.sock(), junk, sizeof junk) == sizeof junk);
  int status = p.wait_status();
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 2);
}

TEST_CASE("worker_loop: a worker whose daemon is already gone refuses to start", "[worker_loop]") {
  // PID 1 is never our parent here, so the loop must conclude its daemon died.
  auto p = LoopProcess::start(test_handler, [] { ::setenv(kWorkerParentPidEnv, "1", 1); });
  int status = p.wait_status();
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 1);
}

TEST_CASE("worker_loop: --fd is parsed and checked", "[worker_loop]") {
  auto sp = make_socket_pair();
  REQUIRE(sp);
  std::string n = std::to_string(sp->first.get());
  {
    const char* argv[] = {"w", "--role", "exec", "--fd", n.c_str()};
    auto fd = worker_fd_from_args(5, argv);
    REQUIRE(fd);
    CHECK(*fd == sp->first.get());
  }
  {
    std::string eq = "--fd=" + n;
    const char* argv[] = {"w", eq.c_str()};
    CHECK(worker_fd_from_args(2, argv));
  }
  {
    const char* argv[] = {"w"};
    auto fd = worker_fd_from_args(1, argv);
    REQUIRE_FALSE(fd);
    CHECK_THAT(fd.error().message(), Catch::Contains("missing '--fd N'"));
  }
  {
    const char* argv[] = {"w", "--fd", "3x"};
    auto fd = worker_fd_from_args(3, argv);
    REQUIRE_FALSE(fd);
    CHECK(fd.error().code() == Errc::invalid_argument);
  }
  {
    const char* argv[] = {"w", "--fd", "0"}; // stdin is not a socket here
    Fd devnull(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    std::string num = std::to_string(devnull.get());
    argv[2] = num.c_str();
    auto fd = worker_fd_from_args(3, argv);
    REQUIRE_FALSE(fd);
    CHECK_THAT(fd.error().message(), Catch::Contains("is not an open socket"));
  }
}
