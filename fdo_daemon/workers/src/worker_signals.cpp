#include "worker_signals.h"

#include "fdo/daemon/ipc.h"
#include "fdo/daemon/worker_loop.h"

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <malloc.h>
#include <string>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>
#include <utility>

namespace fdo::daemon::detail {

namespace {

// State read by the fatal-signal handler. A signal handler can reach nothing
// but globals, so this is the one justified exception to "no globals": only
// lock-free atomics, set by the loop around each job.
struct FatalSignalState {
  std::atomic<int> fd{-1};
  std::atomic<int> job_active{0};
  std::atomic<std::uint64_t> job_id{0};
  std::atomic<std::uint64_t> vm_at_job_start{0};
  std::atomic<long> page_size{4096};
  // /proc/self/statm, kept open by FatalSignalGuard: read with pread, per job
  // and in the handler, instead of opened each time (-1: open it each time).
  std::atomic<int> statm_fd{-1};
};
FatalSignalState g_fatal;

constexpr int kFatalSignals[] = {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL, SIGTRAP, SIGSYS};

// --- async-signal-safe helpers (no allocation, no stdio) ---

// The frame is CBOR (the header encoding, see ipc.h), written by hand.

// A text string of fewer than 24 bytes: its head byte, then the bytes.
std::size_t append_cbor_text(char* buf, std::size_t pos, std::size_t cap, const char* s) {
  std::size_t n = 0;
  while (s[n] != '\0')
    ++n;
  if (n >= 24 || cap - pos < n + 1) return pos;
  buf[pos++] = static_cast<char>(0x60 + n);
  for (std::size_t i = 0; i < n; ++i)
    buf[pos++] = s[i];
  return pos;
}

// One byte as is (a map head, false, ...).
std::size_t append_cbor_byte(char* buf, std::size_t pos, std::size_t cap, std::uint8_t b) {
  if (pos < cap) buf[pos++] = static_cast<char>(b);
  return pos;
}

// An unsigned integer, always in the 8-byte form (0x1B + big-endian u64).
std::size_t append_cbor_u64(char* buf, std::size_t pos, std::size_t cap, std::uint64_t v) {
  if (cap - pos < 9) return pos;
  buf[pos++] = static_cast<char>(0x1B);
  for (int i = 7; i >= 0; --i)
    buf[pos++] = static_cast<char>(v >> (8 * i));
  return pos;
}

// Tells the pool, before the worker dies of `sig`, how much address space the
// running job had added: the pool uses it to tell "exhausted its memory" from
// "crashed". Then re-raises so the worker dies of the original signal.
void fatal_signal_handler(int sig, siginfo_t*, void*) {
  int saved_errno = errno;
  int fd = g_fatal.fd.load();
  if (fd >= 0 && g_fatal.job_active.exchange(0) == 1) {
    std::uint64_t vm = read_vm_bytes();
    std::uint64_t start = g_fatal.vm_at_job_start.load();
    char frame[kFramePrefixBytes + 192];
    constexpr std::size_t cap = sizeof frame;
    std::size_t pos = kFramePrefixBytes;
    // {"id": N, "ok": false, "fatal": {"signal": S, "job_vm_bytes": B}}
    pos = append_cbor_byte(frame, pos, cap, 0xA3); // map of 3
    pos = append_cbor_text(frame, pos, cap, "id");
    pos = append_cbor_u64(frame, pos, cap, g_fatal.job_id.load());
    pos = append_cbor_text(frame, pos, cap, "ok");
    pos = append_cbor_byte(frame, pos, cap, 0xF4); // false
    pos = append_cbor_text(frame, pos, cap, "fatal");
    pos = append_cbor_byte(frame, pos, cap, 0xA2); // map of 2
    pos = append_cbor_text(frame, pos, cap, "signal");
    pos = append_cbor_u64(frame, pos, cap, static_cast<std::uint64_t>(sig));
    pos = append_cbor_text(frame, pos, cap, "job_vm_bytes");
    pos = append_cbor_u64(frame, pos, cap, vm > start ? vm - start : 0);
    auto prefix =
        encode_frame_prefix(static_cast<std::uint32_t>(pos - kFramePrefixBytes), std::uint64_t{0});
    std::memcpy(frame, prefix.data(), prefix.size());
    // Best effort: the channel is idle while a job runs, so a small frame fits.
    (void)::send(fd, frame, pos, MSG_NOSIGNAL | MSG_DONTWAIT);
  }
  errno = saved_errno;
  // SA_RESETHAND restored the default action; the signal is blocked while we
  // run, so it is delivered (and kills the process) as soon as we return.
  ::raise(sig);
}

} // namespace

std::uint64_t read_vm_bytes() noexcept {
  int fd = g_fatal.statm_fd.load();
  const bool kept = fd >= 0;
  if (!kept) fd = ::open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[64];
  ssize_t n;
  do {
    n = ::pread(fd, buf, sizeof buf - 1, 0);
  } while (n < 0 && errno == EINTR);
  if (!kept) ::close(fd);
  if (n <= 0) return 0;
  std::uint64_t pages = 0;
  for (ssize_t i = 0; i < n && buf[i] >= '0' && buf[i] <= '9'; ++i)
    pages = pages * 10 + static_cast<std::uint64_t>(buf[i] - '0');
  return pages * static_cast<std::uint64_t>(g_fatal.page_size.load());
}

Expected<FatalSignalGuard> FatalSignalGuard::install(int fd) {
  FatalSignalGuard g;
  FDO_TRY(g.stack_, Mapping::anonymous(256 * kKiB, Protection::read_write));
  stack_t ss{};
  ss.ss_sp = g.stack_.data();
  ss.ss_size = g.stack_.size();
  if (::sigaltstack(&ss, nullptr) != 0) return Error::from_errno("sigaltstack", errno);
  g.active_ = true; // from here on the destructor undoes a partial install
  g_fatal.page_size = ::sysconf(_SC_PAGESIZE);
  // Opened now, before any sandbox: a missing one only means opening it per read.
  g.statm_.reset(::open("/proc/self/statm", O_RDONLY | O_CLOEXEC));
  g_fatal.statm_fd = g.statm_.get();
  g_fatal.fd = fd;
  struct sigaction sa {};
  sa.sa_sigaction = fatal_signal_handler;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESETHAND;
  sigemptyset(&sa.sa_mask);
  for (int sig : kFatalSignals)
    if (::sigaction(sig, &sa, nullptr) != 0) return Error::from_errno("sigaction", errno);
  return g;
}

FatalSignalGuard::FatalSignalGuard(FatalSignalGuard&& o) noexcept
    : stack_(std::move(o.stack_)), statm_(std::move(o.statm_)),
      active_(std::exchange(o.active_, false)) {}

FatalSignalGuard::~FatalSignalGuard() {
  if (!active_) return;
  struct sigaction sa {};
  sa.sa_handler = SIG_DFL;
  for (int sig : kFatalSignals)
    ::sigaction(sig, &sa, nullptr);
  stack_t ss{};
  ss.ss_flags = SS_DISABLE;
  ::sigaltstack(&ss, nullptr);
  g_fatal.fd = -1;
  g_fatal.statm_fd = -1;
}

void FatalSignalGuard::job_started(std::uint64_t id, std::uint64_t vm) const {
  g_fatal.job_id = id;
  g_fatal.vm_at_job_start = vm;
  g_fatal.job_active = 1;
}

void FatalSignalGuard::job_ended() const {
  g_fatal.job_active = 0;
}

Status setup_worker_process() {
  // Die with the daemon even if it is SIGKILLed. (The pool spawns from one
  // long-lived thread, because the signal follows the spawning *thread*.)
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0)
    return Error::from_errno("prctl(PR_SET_PDEATHSIG)", errno);
  if (const char* env = std::getenv(kWorkerParentPidEnv)) {
    long expected = std::strtol(env, nullptr, 10);
    // The daemon may have died between spawning us and the prctl above.
    if (expected > 0 && ::getppid() != static_cast<pid_t>(expected))
      return make_error(Errc::unavailable, "the daemon (pid " + std::to_string(expected) +
                                               ") exited before this worker started");
    ::unsetenv(kWorkerParentPidEnv);
  }
  // One malloc arena: every extra arena reserves 64 MiB of address space,
  // which RLIMIT_AS counts, so a job that starts a thread would otherwise
  // lose most of a small memory allowance to a reservation it never uses.
  ::mallopt(M_ARENA_MAX, 1);
  // A program that prints past its capture limit gets EFBIG, not a signal
  // that would end the worker.
  ::signal(SIGXFSZ, SIG_IGN);
  rlimit no_core{0, 0};
  if (::setrlimit(RLIMIT_CORE, &no_core) != 0)
    return Error::from_errno("setrlimit(RLIMIT_CORE)", errno);
  return ok();
}

} // namespace fdo::daemon::detail
