// fdo_test_worker: a worker program for the pool's tests. Its jobs misbehave
// on purpose (crash, loop, exhaust memory, lie about lengths) so that every
// failure path of WorkerPool can be exercised against a real process.
//
// Job header: {"op": "<name>", ...}. Ops: echo, fail, throw, segv, abort, fpe,
// trap, loop, alloc, exit, big_output, sleep_ms, fds, limits, lie, garbage, fork,
// whoami, print, leave_thread, leak, page_cache, threads. A typed job (no
// header: its TypedBody) runs handle_typed.
//
// Binding (a pool with a bind_spec) only records the tenant it was given (the
// real sandbox is tested in tests/fdo_daemon/sandbox); a spec for tenant
// "refuse" fails, as a sandbox the host cannot provide would.
#include "fdo/daemon/worker_loop.h"
#include "fdo/util/fd.h"
#include "fdo/util/log.h"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <memory>
#include <pthread.h>
#include <sched.h>
#include <stdexcept>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace fdo;
using namespace fdo::daemon;

namespace {

// A real hardware division fault (SIGFPE); UBSan would report and exit first.
__attribute__((no_sanitize("undefined"))) void divide_by_zero() {
  volatile int zero = 0;
  volatile int one = 1;
  volatile int r = one / zero;
  (void)r;
}

[[noreturn]] void spin_forever() {
  volatile std::uint64_t n = 0;
  for (;;)
    n = n + 1;
}

[[noreturn]] void sleep_forever() {
  for (;;)
    ::pause();
}

std::uint64_t rl(rlim_t v) {
  return static_cast<std::uint64_t>(v);
}

Expected<Message> allocate_until_failure(const nlohmann::json& h) {
  rlimit as{};
  ::getrlimit(RLIMIT_AS, &as);
  // Refuse to eat the host's memory when the pool forgot the limit.
  if (as.rlim_cur == RLIM_INFINITY)
    return make_error(Errc::invalid_argument, "alloc job needs an address-space limit");
  const std::size_t chunk = h.value("chunk", std::size_t{1} << 20);
  const std::string mode = h.value("mode", std::string("new"));
  if (mode == "new") {
    std::vector<std::unique_ptr<char[]>> blocks;
    for (;;) {
      blocks.emplace_back(new char[chunk]); // throws std::bad_alloc at the limit
      std::memset(blocks.back().get(), 1, chunk);
    }
  }
  if (mode == "malloc") {
    // Like careless C code: never checks for NULL, so it dies of SIGSEGV at the limit.
    for (;;) {
      char* volatile p = static_cast<char*>(std::malloc(chunk));
      for (std::size_t i = 0; i < chunk; i += 4096)
        p[i] = 1;
    }
  }
  return make_error(Errc::invalid_argument, "unknown alloc mode '" + mode + "'");
}

Expected<Message> list_fds() {
  std::vector<int> fds;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd"))
    fds.push_back(std::stoi(entry.path().filename().string()));
  // The directory iterator's own descriptor was listed too; it is closed now.
  std::sort(fds.begin(), fds.end());
  nlohmann::json open = nlohmann::json::array(), targets = nlohmann::json::array();
  for (int fd : fds)
    if (::fcntl(fd, F_GETFD) != -1) {
      open.push_back(fd);
      std::error_code ec;
      auto target = std::filesystem::read_symlink("/proc/self/fd/" + std::to_string(fd), ec);
      targets.push_back(ec ? std::string() : target.string());
    }
  return Message{{{"fds", open}, {"targets", targets}, {"pid", static_cast<long>(::getpid())}}, {}};
}

// The tenant this process was bound to ("" before binding).
std::string& bound_tenant() {
  static std::string tenant;
  return tenant;
}

// A typed job (an "FDO3" envelope, op exec): its body is a command —
// "whoami" answers "pid tenant job-id", "leave_thread" also leaves a thread
// running (the worker is then retired) — answered in a typed reply whose body
// is that text, the bytes after the job's body following it.
Expected<Message> handle_typed(const Message& req, const JobContext& ctx) {
  if (req.body->op != TypedOp::exec || req.body->bytes > req.payload.size())
    return make_error(Errc::invalid_argument, "typed test job: op exec and a body, please");
  const std::string command = req.payload.substr(0, req.body->bytes);
  if (command == "leave_thread")
    std::thread([] { sleep_forever(); }).detach();
  else if (command != "whoami")
    return make_error(Errc::invalid_argument, "typed test job: unknown command " + command);
  Message out;
  out.payload = std::to_string(::getpid()) + " " + bound_tenant() + " " + std::to_string(ctx.id);
  out.body = TypedBody{TypedOp::none, out.payload.size()};
  out.payload += req.payload.substr(req.body->bytes);
  return out;
}

Expected<Message> handle(int sock, const std::string& role, const Message& req,
                         const JobContext& ctx) {
  if (req.body) return handle_typed(req, ctx);
  const auto& h = req.header;
  const std::string op = h.value("op", std::string());
  if (op == "echo") {
    nlohmann::json out = {{"op", "echo"},
                          {"pid", static_cast<long>(::getpid())},
                          {"role", role},
                          {"job_id", ctx.id},
                          {"request", h}};
    return Message{std::move(out), req.payload};
  }
  if (op == "fail") {
    auto code = parse_errc(h.value("code", std::string("internal")));
    return make_error(code.value_or(Errc::internal), h.value("message", std::string("failed")));
  }
  if (op == "throw") throw std::runtime_error("boom from the test worker");
  if (op == "segv") {
    // An unmapped address that is not null, so the store really faults (UBSan
    // would stop a null store before the kernel could).
    int* volatile p = reinterpret_cast<int*>(std::uintptr_t{16});
    *p = 42;
  }
  if (op == "abort") std::abort();
  if (op == "fpe") divide_by_zero();
  if (op == "trap") __builtin_trap(); // SIGILL (ud2) on x86-64
  if (op == "loop") spin_forever();
  if (op == "alloc") return allocate_until_failure(h);
  if (op == "exit") std::exit(3);
  if (op == "big_output")
    return Message{{{"op", "big_output"}}, std::string(h.value("bytes", std::size_t{0}), 'x')};
  if (op == "sleep_ms") {
    std::this_thread::sleep_for(std::chrono::milliseconds(h.value("ms", 0)));
    return Message{{{"op", "sleep_ms"}, {"pid", static_cast<long>(::getpid())}}, {}};
  }
  if (op == "cpu_ms") {
    // Spins until this thread has used `ms` more of CPU: a job whose wall
    // time grows by whatever time the process spends stopped.
    auto cpu = [] {
      timespec ts{};
      ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
      return std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec);
    };
    const auto until = cpu() + std::chrono::milliseconds(h.value("ms", 0));
    while (cpu() < until) {
    }
    return Message{{{"op", "cpu_ms"}, {"pid", static_cast<long>(::getpid())}}, {}};
  }
  if (op == "fds") return list_fds();
  if (op == "whoami")
    return Message{{{"pid", static_cast<long>(::getpid())}, {"tenant", bound_tenant()}}, {}};
  if (op == "print") {
    std::string out = h.value("out", std::string()), err = h.value("err", std::string());
    std::size_t repeat = h.value("repeat", std::size_t{1});
    for (std::size_t i = 0; i < repeat; ++i) {
      std::fputs(out.c_str(), stdout);
      std::fputs(err.c_str(), stderr);
    }
    if (h.value("then", std::string()) == "exit") std::exit(h.value("status", 0));
    return Message{{{"printed", true}}, {}};
  }
  if (op == "priority") {
    // The handling thread's nice value and policy, and a thread's it starts.
    auto read = [] {
      errno = 0;
      const int nice = ::getpriority(PRIO_PROCESS, 0); // this thread's, on Linux
      return nlohmann::json{{"nice", nice}, {"policy", ::sched_getscheduler(0)}};
    };
    nlohmann::json started;
    std::thread([&] { started = read(); }).join();
    return Message{{{"handler", read()}, {"started", started}}, {}};
  }
  if (op == "leave_thread") {
    std::thread([] { sleep_forever(); }).detach();
    return Message{{{"left", 1}}, {}};
  }
  if (op == "leak") {
    const std::size_t bytes = h.value("bytes", std::size_t{0});
    char* p = static_cast<char*>(std::malloc(bytes));
    for (std::size_t i = 0; i < bytes; i += 4096)
      p[i] = 1;
    return Message{{{"leaked", bytes}}, {}};
  }
  if (op == "page_cache") {
    // Pages of an unmapped memory file: charged to the worker's cgroup, never
    // counted by RLIMIT_AS, so only a cgroup memory limit stops them.
    const std::size_t bytes = h.value("bytes", std::size_t{0});
    Fd f(static_cast<int>(::memfd_create("fdo-test-page-cache", MFD_CLOEXEC)));
    if (!f.valid()) return Error::from_errno("memfd_create", errno);
    const std::string chunk(1 << 20, 'x');
    std::size_t done = 0;
    while (done < bytes) {
      ssize_t n = ::write(f.get(), chunk.data(), chunk.size());
      if (n < 0) return Error::from_errno("write to a memory file", errno);
      done += static_cast<std::size_t>(n);
    }
    return Message{{{"written", done}}, {}};
  }
  if (op == "threads") {
    // Starts up to `count` threads at once; reports how many the host allowed.
    const int count = h.value("count", 0);
    std::vector<pthread_t> started;
    int refused = 0;
    for (int i = 0; i < count; ++i) {
      pthread_t t;
      int rc = ::pthread_create(
          &t, nullptr,
          [](void*) -> void* {
            ::usleep(200 * 1000);
            return nullptr;
          },
          nullptr);
      if (rc != 0) {
        refused = rc;
        break;
      }
      started.push_back(t);
    }
    for (pthread_t t : started)
      ::pthread_join(t, nullptr);
    return Message{
        {{"started", started.size()}, {"refused", refused != 0 ? std::strerror(refused) : ""}}, {}};
  }
  if (op == "limits") {
    rlimit as{}, cpu{}, core{};
    ::getrlimit(RLIMIT_AS, &as);
    ::getrlimit(RLIMIT_CPU, &cpu);
    ::getrlimit(RLIMIT_CORE, &core);
    return Message{{{"as_soft", rl(as.rlim_cur)},
                    {"as_hard", rl(as.rlim_max)},
                    {"cpu_soft", rl(cpu.rlim_cur)},
                    {"cpu_hard", rl(cpu.rlim_max)},
                    {"core_soft", rl(core.rlim_cur)},
                    {"core_hard", rl(core.rlim_max)},
                    {"parent_pid_env", std::getenv(kWorkerParentPidEnv) != nullptr}},
                   {}};
  }
  if (op == "lie") {
    // A compromised worker claiming an enormous answer.
    auto prefix = encode_frame_prefix(1, std::uint64_t{1} << 62);
    (void)::send(sock, prefix.data(), prefix.size(), MSG_NOSIGNAL);
    (void)::send(sock, "\xa0", 1, MSG_NOSIGNAL); // an empty CBOR map
    sleep_forever();
  }
  if (op == "evil_header") {
    // A compromised worker answering with a header built to hurt the reader:
    // a million nested arrays (stack), or a text string of 2^64-1 bytes.
    std::string header = "\xa1\x61k";
    if (h.value("kind", std::string()) == "deep")
      header += std::string(1000000, '\x81') + '\x00';
    else
      header += std::string("\x7b\xff\xff\xff\xff\xff\xff\xff\xff", 9);
    (void)send_frame_encoded(sock, header, {});
    sleep_forever();
  }
  if (op == "trailing") {
    // Its reply and, in the same write, the start of a message out of turn.
    nlohmann::json reply = {{"id", ctx.id}, {"ok", true}, {"result", {{"op", "trailing"}}}};
    auto frame = encode_message(Message{reply, "done"});
    if (!frame) return frame.error();
    const std::string bytes = *frame + "and then some more";
    (void)::send(sock, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    sleep_forever();
  }
  if (op == "garbage") {
    const char junk[] = "this is not a frame at all......";
    (void)::send(sock, junk, sizeof junk, MSG_NOSIGNAL);
    sleep_forever();
  }
  if (op == "fork") {
    // A grandchild that inherits the channel and outlives the job's worker.
    pid_t child = ::fork();
    if (child == 0) sleep_forever();
    if (child < 0) return Error::from_errno("fork", errno);
    std::ofstream(h.value("pid_file", std::string("/dev/null"))) << child << "\n";
    const std::string then = h.value("then", std::string("loop"));
    if (then == "abort") std::abort();
    if (then == "exit") std::exit(3);
    spin_forever();
  }
  return make_error(Errc::invalid_argument, "unknown op '" + op + "'");
}

} // namespace

int main(int argc, char** argv) {
  log::set_ident("fdo-test-worker[" + std::to_string(::getpid()) + "]");
  auto fd = worker_fd_from_args(argc, argv);
  if (!fd) {
    log::error(fd.error().describe());
    return 64;
  }
  auto nice = worker_nice_from_args(argc, argv); // as fdo-worker's main
  if (!nice) {
    log::error(nice.error().describe());
    return 64;
  }
  if (auto st = lower_cpu_priority(*nice); !st) log::warning(st.error().describe());
  std::string role = "none";
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string_view(argv[i]) == "--role") role = argv[i + 1];
  const int sock = *fd;
  WorkerLoopOptions options;
  options.bind = [](const nlohmann::json& spec) -> Expected<nlohmann::json> {
    std::string tenant = spec.value("tenant", std::string());
    if (tenant == "refuse") return make_error(Errc::unsupported, "no sandbox for 'refuse'");
    bound_tenant() = tenant;
    return nlohmann::json{{"tenant", tenant}};
  };
  return run_worker_loop(
      sock, [&](const Message& req, const JobContext& ctx) { return handle(sock, role, req, ctx); },
      options);
}
