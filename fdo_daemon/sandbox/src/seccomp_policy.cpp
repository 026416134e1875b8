#include "fdo/daemon/seccomp_policy.h"

#include <cerrno>
#include <cstring>
#include <linux/sched.h>
#include <seccomp.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

namespace fdo::daemon {

namespace {

// Denied whatever their arguments.
constexpr const char* kAlwaysDenied[] = {
    // other processes' memory and execution
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_open", "pidfd_getfd",
    "pidfd_send_signal", "tkill",
    // new programs and processes
    "execve", "execveat", "fork", "vfork",
    // sockets (socket itself: per profile, below)
    "socketpair",
    // namespaces and mounts
    "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "open_tree", "move_mount",
    "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
    // identity and privilege
    "setuid", "setgid", "setreuid", "setregid", "setresuid", "setresgid", "setgroups", "setfsuid",
    "setfsgid", "capset",
    // kernel objects shared between processes (and tenants)
    "bpf", "keyctl", "add_key", "request_key", "userfaultfd", "shmget", "shmat", "shmctl", "semget",
    "semop", "semtimedop", "semctl", "msgget", "msgsnd", "msgrcv", "msgctl", "mq_open", "mq_unlink",
    "mq_timedsend", "mq_timedreceive", "mq_notify", "mq_getsetattr", "name_to_handle_at",
    "open_by_handle_at", "lookup_dcookie",
    // the machine
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "swapon",
    "swapoff", "reboot", "iopl", "ioperm", "acct", "quotactl", "syslog", "personality", "vhangup",
    "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "sethostname", "setdomainname"};

// prctl options a sandboxed process may not use: they would re-enable
// ptrace-style access to it or change its memory map's identity.
constexpr int kDeniedPrctl[] = {PR_SET_DUMPABLE, PR_SET_PTRACER, PR_SET_MM, PR_CAP_AMBIENT,
                                PR_SET_SECUREBITS};

class Filter {
public:
  Filter() : ctx_(seccomp_init(SCMP_ACT_ALLOW)) {}
  ~Filter() {
    if (ctx_ != nullptr) seccomp_release(ctx_);
  }
  Filter(const Filter&) = delete;
  Filter& operator=(const Filter&) = delete;
  scmp_filter_ctx get() const { return ctx_; }

private:
  scmp_filter_ctx ctx_;
};

Error seccomp_error(const std::string& what, int rc) {
  // libseccomp returns negative errno values.
  return make_error(Errc::unsupported, "seccomp: " + what + ": " + std::strerror(-rc));
}

// A name the running libseccomp does not know on this architecture is
// skipped: the syscall does not exist here.
int resolve(const char* name) {
  return seccomp_syscall_resolve_name(name);
}

Status deny(Filter& f, const char* name, unsigned argc = 0, const scmp_arg_cmp* args = nullptr,
            int err = EPERM) {
  int nr = resolve(name);
  if (nr == __NR_SCMP_ERROR) return ok();
  int rc = seccomp_rule_add_array(f.get(), SCMP_ACT_ERRNO(static_cast<std::uint16_t>(err)), nr,
                                  argc, args);
  if (rc != 0) return seccomp_error(std::string("deny ") + name, rc);
  return ok();
}

} // namespace

std::string_view to_string(SeccompProfile p) {
  return p == SeccompProfile::worker ? "worker" : "gpu_worker";
}

Status install_seccomp_filter(SeccompProfile profile) {
  Filter f;
  if (f.get() == nullptr) return make_error(Errc::unsupported, "seccomp: cannot create a filter");
  // Another architecture's syscall table (int 0x80 on x86-64) would bypass
  // every rule below: kill instead.
  if (int rc = seccomp_attr_set(f.get(), SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS); rc != 0)
    return seccomp_error("bad-architecture action", rc);
  // Every thread, not only the caller.
  if (int rc = seccomp_attr_set(f.get(), SCMP_FLTATR_CTL_TSYNC, 1); rc != 0)
    return seccomp_error("thread sync", rc);

  for (const char* name : kAlwaysDenied)
    FDO_TRY_STATUS(deny(f, name));

  if (profile == SeccompProfile::gpu_worker) {
    scmp_arg_cmp not_unix = SCMP_A0_32(SCMP_CMP_NE, AF_UNIX);
    FDO_TRY_STATUS(deny(f, "socket", 1, &not_unix));
  } else {
    FDO_TRY_STATUS(deny(f, "socket"));
  }

  // clone: threads (CLONE_THREAD) yes, processes no.
  scmp_arg_cmp no_thread = SCMP_A0_64(SCMP_CMP_MASKED_EQ, CLONE_THREAD, 0);
  FDO_TRY_STATUS(deny(f, "clone", 1, &no_thread));
  // clone3 passes its flags in memory the filter cannot read: report it
  // missing so glibc falls back to clone.
  FDO_TRY_STATUS(deny(f, "clone3", 0, nullptr, ENOSYS));

  // Signals only to this process (its pid is fixed: the process never forks).
  const auto self = static_cast<std::uint32_t>(::getpid());
  scmp_arg_cmp other_pid = SCMP_A0_32(SCMP_CMP_NE, self);
  for (const char* name : {"kill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo"})
    FDO_TRY_STATUS(deny(f, name, 1, &other_pid));

  // perf_event_open(attr, pid, ...): only pid 0, this process's threads.
  scmp_arg_cmp not_self = SCMP_A1_32(SCMP_CMP_NE, 0);
  FDO_TRY_STATUS(deny(f, "perf_event_open", 1, &not_self));

  for (int option : kDeniedPrctl) {
    scmp_arg_cmp is_option = SCMP_A0_32(SCMP_CMP_EQ, static_cast<std::uint32_t>(option));
    FDO_TRY_STATUS(deny(f, "prctl", 1, &is_option));
  }

  if (int rc = seccomp_load(f.get()); rc != 0) return seccomp_error("load the filter", rc);
  return ok();
}

std::vector<std::string> seccomp_denied_syscalls() {
  std::vector<std::string> out(std::begin(kAlwaysDenied), std::end(kAlwaysDenied));
  out.push_back("socket");
  for (const char* conditional : {"clone", "clone3", "kill", "tgkill", "rt_sigqueueinfo",
                                  "rt_tgsigqueueinfo", "perf_event_open", "prctl"})
    out.emplace_back(conditional);
  return out;
}

} // namespace fdo::daemon
