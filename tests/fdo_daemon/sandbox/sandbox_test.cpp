#include "fdo/daemon/sandbox.h"
#include "fdo/daemon/seccomp_policy.h"
#include "support/sanitizer.h"
#include "support/skip.h"
#include "support/temp_dir.h"

#include <catch2/catch.hpp>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <functional>
#include <linux/perf_event.h>
#include <pthread.h>
#include <sched.h>
#include <sys/ipc.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/shm.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace fdo;
using namespace fdo::daemon;
using fdo::test_support::TempDir;

namespace {

// Runs `body` in a forked child and returns the lines it wrote to `out`
// (one finding per line) and how it ended. The child never returns into Catch.
struct ChildResult {
  std::vector<std::string> lines;
  int status = 0;
  bool exited_ok() const { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }
  bool has(const std::string& line) const {
    return std::find(lines.begin(), lines.end(), line) != lines.end();
  }
};

// The sandbox is entered single-threaded; a TSan build's forked child has
// the sanitizer's own thread (tests/support/sanitizer.h).
bool skipped_under_tsan() {
  if (!fdo::test_support::thread_sanitizer_build()) return false;
  const std::string why = "skipped: ThreadSanitizer build: a forked child is not single-threaded, "
                          "so the sandbox cannot be entered there; checked in the other builds";
  fdo::test_support::note_skip(why);
  WARN(why);
  return true;
}

ChildResult in_child(const std::function<void(FILE* out)>& body) {
  int p[2];
  REQUIRE(::pipe(p) == 0);
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(p[0]);
    FILE* out = ::fdopen(p[1], "w");
    std::setvbuf(out, nullptr, _IONBF, 0);
    body(out);
    std::fflush(out);
    ::_exit(0);
  }
  ::close(p[1]);
  ChildResult r;
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = ::read(p[0], buf, sizeof buf)) > 0;)
    text.append(buf, static_cast<std::size_t>(n));
  ::close(p[0]);
  ::waitpid(pid, &r.status, 0);
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t nl = text.find('\n', start);
    if (nl == std::string::npos) nl = text.size();
    r.lines.push_back(text.substr(start, nl - start));
    start = nl + 1;
  }
  return r;
}

// "<what> ok" or "<what> errno=<name>".
void report(FILE* out, const char* what, long rc) {
  if (rc >= 0)
    std::fprintf(out, "%s ok\n", what);
  else
    std::fprintf(out, "%s errno=%s\n", what, ::strerrorname_np(errno));
}

SandboxSpec base_spec(FilesystemIsolation fs = FilesystemIsolation::none) {
  SandboxSpec s;
  s.tenant = "uid:4242";
  s.filesystem = fs;
  s.readable = {"/usr", "/lib", "/lib64", "/etc", "/proc/self", "/sys"};
  s.writable = {"/dev/null"};
  return s;
}

void enter_or_die(FILE* out, const SandboxSpec& spec) {
  auto r = enter_sandbox(spec);
  if (!r) {
    std::fprintf(out, "enter failed: %s\n", r.error().describe().c_str());
    std::fflush(out);
    ::_exit(3);
  }
  std::fprintf(out, "entered\n");
}

void* idle_thread(void*) {
  return nullptr;
}

bool root() {
  return ::geteuid() == 0;
}

} // namespace

TEST_CASE("sandbox: seccomp denies escapes and keeps what programs and measurement need",
          "[sandbox][security]") {
  if (skipped_under_tsan()) return;
  pid_t parent = ::getpid();
  auto r = in_child([&](FILE* out) {
    enter_or_die(out, base_spec());
    report(out, "fork", ::fork());
    report(out, "vfork", ::syscall(SYS_vfork));
    char* argv[] = {const_cast<char*>("/bin/true"), nullptr};
    report(out, "execve", ::execve("/bin/true", argv, nullptr));
    report(out, "socket", ::socket(AF_UNIX, SOCK_STREAM, 0));
    report(out, "kill parent", ::kill(parent, 0));
    report(out, "kill all", ::kill(-1, 0));
    report(out, "kill self", ::kill(::getpid(), 0));
    report(out, "tgkill self", ::syscall(SYS_tgkill, ::getpid(), ::gettid(), 0));
    report(out, "ptrace attach", ::ptrace(PTRACE_ATTACH, parent, nullptr, nullptr));
    report(out, "unshare", ::unshare(CLONE_NEWNS));
    report(out, "setuid", ::setuid(0));
    report(out, "dumpable", ::prctl(PR_SET_DUMPABLE, 1, 0, 0, 0));
    report(out, "shmget", ::shmget(IPC_PRIVATE, 4096, IPC_CREAT | 0600));
    report(out, "clone3", ::syscall(SYS_clone3, nullptr, 0));
    pthread_t t;
    int rc = ::pthread_create(&t, nullptr, idle_thread, nullptr);
    if (rc == 0) ::pthread_join(t, nullptr);
    std::fprintf(out, "thread %s\n", rc == 0 ? "ok" : ::strerrorname_np(rc));
    perf_event_attr attr{};
    attr.size = sizeof attr;
    attr.type = PERF_TYPE_SOFTWARE;
    attr.config = PERF_COUNT_SW_TASK_CLOCK;
    attr.disabled = 1;
    attr.exclude_kernel = 1;
    long own = ::syscall(SYS_perf_event_open, &attr, 0, -1, -1, 0);
    report(out, "perf self", own);
    report(out, "perf parent", ::syscall(SYS_perf_event_open, &attr, parent, -1, -1, 0));
    std::fprintf(out, "dumpable now %d\n", ::prctl(PR_GET_DUMPABLE, 0, 0, 0, 0));
  });
  INFO(Catch::Detail::stringify(r.lines));
  REQUIRE(r.exited_ok());
  REQUIRE(r.has("entered"));
  for (const char* denied : {"fork", "vfork", "execve", "socket", "kill parent", "kill all",
                             "ptrace attach", "unshare", "setuid", "dumpable", "shmget"})
    CHECK(r.has(std::string(denied) + " errno=EPERM"));
  CHECK(r.has("clone3 errno=ENOSYS"));
  CHECK(r.has("kill self ok"));
  CHECK(r.has("tgkill self ok"));
  CHECK(r.has("thread ok"));
  CHECK(r.has("perf self ok"));
  CHECK(r.has("perf parent errno=EPERM"));
  CHECK(r.has("dumpable now 0"));
}

TEST_CASE("sandbox: GPU workers' filter lets the driver open an AF_UNIX socket, nothing more",
          "[sandbox][security]") {
  if (skipped_under_tsan()) return;
  auto r = in_child([&](FILE* out) {
    SandboxSpec spec = base_spec();
    spec.seccomp = SeccompProfile::gpu_worker;
    // The profile travels in the bind spec.
    auto back = sandbox_spec_from_json(to_json(spec));
    if (!back || back->seccomp != SeccompProfile::gpu_worker) {
      std::fprintf(out, "spec lost the profile\n");
      ::_exit(4);
    }
    enter_or_die(out, *back);
    report(out, "unix socket", ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    report(out, "inet socket", ::socket(AF_INET, SOCK_STREAM, 0));
    report(out, "netlink socket", ::socket(AF_NETLINK, SOCK_RAW, 0));
    int sv[2];
    report(out, "socketpair", ::socketpair(AF_UNIX, SOCK_STREAM, 0, sv));
    report(out, "fork", ::fork());
    char* const argv[] = {const_cast<char*>("/bin/true"), nullptr};
    char* const envp[] = {nullptr};
    report(out, "execve", ::execve("/bin/true", argv, envp));
  });
  INFO(Catch::Detail::stringify(r.lines));
  REQUIRE(r.exited_ok());
  CHECK(r.has("unix socket ok"));
  for (const char* denied : {"inet socket", "netlink socket", "socketpair", "fork", "execve"})
    CHECK(r.has(std::string(denied) + " errno=EPERM"));
  // A spec without a profile (an older daemon's) gets the worker filter.
  nlohmann::json old = to_json(base_spec());
  old.erase("seccomp");
  auto parsed = sandbox_spec_from_json(old);
  REQUIRE(parsed);
  CHECK(parsed->seccomp == SeccompProfile::worker);
  old["seccomp"] = "anything";
  CHECK_FALSE(sandbox_spec_from_json(old));
}

TEST_CASE("sandbox: the filter's deny list is what the docs say", "[sandbox][security]") {
  auto names = seccomp_denied_syscalls();
  for (const char* must :
       {"ptrace", "process_vm_readv", "process_vm_writev", "execve", "fork", "vfork", "clone",
        "socket", "unshare", "setns", "mount", "kill", "perf_event_open"})
    CHECK(std::find(names.begin(), names.end(), must) != names.end());
}

TEST_CASE("sandbox: Landlock leaves readable paths readable and nothing else",
          "[sandbox][security]") {
  if (skipped_under_tsan()) return;
  auto support = probe_sandbox_support();
  if (support.landlock_abi == 0) {
    FDO_SKIP("skipped: this kernel has no Landlock");
  }
  TempDir state("fdo-state");
  TempDir scratch("fdo-scratch");
  { std::ofstream(state.file("profiles.db")) << "secret"; }
  auto r = in_child([&](FILE* out) {
    SandboxSpec spec = base_spec(FilesystemIsolation::landlock);
    spec.writable.push_back(scratch.str());
    enter_or_die(out, spec);
    report(out, "read state", ::open(state.file("profiles.db").c_str(), O_RDONLY));
    report(out, "list state", ::open(state.str().c_str(), O_RDONLY | O_DIRECTORY));
    report(out, "create in state", ::open(state.file("x").c_str(), O_WRONLY | O_CREAT, 0600));
    report(out, "read /etc/passwd", ::open("/etc/passwd", O_RDONLY));
    report(out, "write /etc/hostname", ::open("/etc/hostname", O_WRONLY));
    report(out, "read own status", ::open("/proc/self/status", O_RDONLY));
    report(out, "write scratch", ::open((scratch.str() + "/f").c_str(), O_WRONLY | O_CREAT, 0600));
    report(out, "write /dev/null", ::open("/dev/null", O_WRONLY));
    report(out, "read /tmp", ::open("/tmp", O_RDONLY | O_DIRECTORY));
  });
  INFO(Catch::Detail::stringify(r.lines));
  REQUIRE(r.exited_ok());
  CHECK(r.has("read state errno=EACCES"));
  CHECK(r.has("list state errno=EACCES"));
  CHECK(r.has("create in state errno=EACCES"));
  CHECK(r.has("read /etc/passwd ok"));
  CHECK(r.has("write /etc/hostname errno=EACCES"));
  CHECK(r.has("read own status ok"));
  CHECK(r.has("write scratch ok"));
  CHECK(r.has("write /dev/null ok"));
  CHECK(r.has("read /tmp errno=EACCES"));
}

TEST_CASE("sandbox: a mount namespace hides the state dir", "[sandbox][security]") {
  if (skipped_under_tsan()) return;
  auto support = probe_sandbox_support();
  if (!support.mount_namespace) {
    FDO_SKIP("skipped: this process can create no mount namespace (not root and no user "
             "namespaces)");
    return;
  }
  TempDir state("fdo-state");
  { std::ofstream(state.file("profiles.db")) << "secret"; }
  auto r = in_child([&](FILE* out) {
    SandboxSpec spec = base_spec(FilesystemIsolation::mount_namespace);
    spec.hidden = {state.str()};
    enter_or_die(out, spec);
    report(out, "read state", ::open(state.file("profiles.db").c_str(), O_RDONLY));
    report(out, "create in state", ::open(state.file("x").c_str(), O_WRONLY | O_CREAT, 0600));
    report(out, "read /etc/passwd", ::open("/etc/passwd", O_RDONLY));
  });
  INFO(Catch::Detail::stringify(r.lines));
  REQUIRE(r.exited_ok());
  CHECK((r.has("read state errno=EACCES") || r.has("read state errno=ENOENT")));
  CHECK_FALSE(r.has("create in state ok"));
  CHECK(r.has("read /etc/passwd ok"));
  // The daemon's view is unchanged.
  CHECK(std::ifstream(state.file("profiles.db")).good());
}

TEST_CASE("sandbox: jobs run as their own uid with no way back", "[sandbox][security]") {
  if (skipped_under_tsan()) return;
  if (!root()) {
    FDO_SKIP("skipped: switching uids needs root (CI runs as root)");
  }
  TempDir dir("fdo-private");
  std::string secret = dir.file("secret");
  { std::ofstream(secret) << "root only"; }
  ::chmod(secret.c_str(), 0600);
  ::chmod(dir.str().c_str(), 0755);
  auto r = in_child([&](FILE* out) {
    SandboxSpec spec = base_spec();
    spec.uid = 1879048193u;
    enter_or_die(out, spec);
    std::fprintf(out, "uid %u gid %u\n", ::getuid(), ::getgid());
    report(out, "read root file", ::open(secret.c_str(), O_RDONLY));
    rlimit r{};
    ::getrlimit(RLIMIT_CORE, &r);
    r.rlim_max = RLIM_INFINITY;
    report(out, "raise core hard", ::setrlimit(RLIMIT_CORE, &r));
  });
  INFO(Catch::Detail::stringify(r.lines));
  REQUIRE(r.exited_ok());
  CHECK(r.has("uid 1879048193 gid 1879048193"));
  CHECK(r.has("read root file errno=EACCES"));
  CHECK(r.has("raise core hard errno=EPERM"));
}

TEST_CASE("sandbox: hard memory and file-size limits cannot be raised", "[sandbox][security]") {
  if (skipped_under_tsan()) return;
  auto r = in_child([&](FILE* out) {
    SandboxSpec spec = base_spec();
    if (root()) spec.uid = 1879048194u; // as fdod does where it can switch
    spec.address_space_bytes = 256ull << 20;
    spec.file_size_bytes = 1000;
    enter_or_die(out, spec);
    rlimit as{};
    ::getrlimit(RLIMIT_AS, &as);
    std::fprintf(out, "as soft==hard %d\n", as.rlim_cur == as.rlim_max ? 1 : 0);
    rlimit more = as;
    more.rlim_max = as.rlim_max + (1ull << 30);
    more.rlim_cur = more.rlim_max;
    report(out, "raise as", ::setrlimit(RLIMIT_AS, &more));
    rlimit fs{};
    ::getrlimit(RLIMIT_FSIZE, &fs);
    std::fprintf(out, "fsize %llu\n", static_cast<unsigned long long>(fs.rlim_max));
    if (!fdo::test_support::sanitizer_build()) {
      void* big = ::malloc(512ull << 20);
      std::fprintf(out, "malloc 512M %s\n", big == nullptr ? "failed" : "ok");
    }
  });
  INFO(Catch::Detail::stringify(r.lines));
  REQUIRE(r.exited_ok());
  CHECK(r.has("as soft==hard 1"));
  CHECK(r.has("raise as errno=EPERM"));
  if (fdo::test_support::sanitizer_build())
    // The sanitizer's allocator aborts instead of returning null (and its
    // shadow reservation makes RLIMIT_AS meaningless there).
    WARN("sanitizer build: a malloc past the limit aborts the child; not checked");
  else
    CHECK(r.has("malloc 512M failed"));
  CHECK(r.has("fsize 1000"));
}

TEST_CASE("sandbox: it is entered single-threaded or not at all", "[sandbox][security]") {
  if (skipped_under_tsan()) return;
  auto r = in_child([&](FILE* out) {
    pthread_t t;
    ::pthread_create(
        &t, nullptr,
        [](void*) -> void* {
          ::pause();
          return nullptr;
        },
        nullptr);
    auto entered = enter_sandbox(base_spec());
    std::fprintf(out, "%s\n", entered ? "entered" : entered.error().message().c_str());
  });
  REQUIRE(r.exited_ok());
  REQUIRE(r.lines.size() == 1);
  CHECK_THAT(r.lines[0], Catch::Contains("2 threads running"));
}

TEST_CASE("sandbox: specs round-trip through JSON and bad ones are refused", "[sandbox]") {
  SandboxSpec s = base_spec(FilesystemIsolation::landlock);
  s.uid = 77;
  s.hidden = {"/var/lib/fdod"};
  s.address_space_bytes = 123;
  s.file_size_bytes = 456;
  auto back = sandbox_spec_from_json(to_json(s));
  REQUIRE(back);
  CHECK(back->tenant == s.tenant);
  CHECK(back->uid == s.uid);
  CHECK(back->filesystem == FilesystemIsolation::landlock);
  CHECK(back->readable == s.readable);
  CHECK(back->hidden == s.hidden);
  CHECK(back->address_space_bytes == 123);
  CHECK(back->file_size_bytes == 456);
  auto j = to_json(s);
  j["filesystem"] = "chroot";
  CHECK_FALSE(sandbox_spec_from_json(j));
  j = to_json(s);
  j.erase("readable");
  CHECK_FALSE(sandbox_spec_from_json(j));
  CHECK_FALSE(sandbox_spec_from_json(nlohmann::json::array()));
}
