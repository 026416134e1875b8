// The seccomp filter of sandboxed workers. Default allow, with a deny list
// (EPERM) for what client code must never do from inside a worker, so
// ordinary C programs (malloc, threads, stdio, libm, clocks, perf counters on
// themselves) run unchanged while attacks fail with a plain error:
//   - debugging and memory access across processes: ptrace, process_vm_*,
//     kcmp, pidfd_open/getfd/send_signal
//   - signals to any process but this one: kill, tgkill, rt_sigqueueinfo,
//     rt_tgsigqueueinfo with another pid; tkill
//   - new programs and processes: execve, execveat, fork, vfork, clone
//     without CLONE_THREAD (threads stay allowed), clone3 (ENOSYS: glibc then
//     uses clone, which is filtered)
//   - sockets: socket (GPU workers: AF_UNIX allowed), socketpair
//   - namespaces and mounts: unshare, setns, mount and the new mount API,
//     umount2, pivot_root, chroot
//   - identity and privilege: set*uid/set*gid/setgroups, capset,
//     prctl(PR_SET_DUMPABLE / PR_SET_PTRACER / PR_SET_MM / PR_CAP_AMBIENT)
//   - perf_event_open on anything but this process's own threads (pid 0)
//   - the kernel's shared objects: bpf, keyctl/add_key/request_key,
//     userfaultfd, SysV IPC (shm/sem/msg), POSIX message queues,
//     open_by_handle_at, kexec, modules, swap, reboot, iopl/ioperm, acct,
//     quotactl, syslog, personality
// Syscalls of another architecture (32-bit entry on x86-64) kill the process.
#pragma once

#include "fdo/util/expected.h"

#include <string>
#include <string_view>
#include <vector>

namespace fdo::daemon {

// Loads the filter into this process (all threads). Needs PR_SET_NO_NEW_PRIVS
// (or CAP_SYS_ADMIN) first.
// Which workers the filter is for. gpu_worker: the same, except that
// socket(AF_UNIX, ...) is allowed: the NVIDIA driver's cuInit fails with
// CUDA_ERROR_OPERATING_SYSTEM without it (seen on an H200 host, driver 580).
// A GPU worker runs no client code on the host (docs/gpu.md); socketpair and
// every other address family stay denied.
enum class SeccompProfile { worker, gpu_worker };
std::string_view to_string(SeccompProfile p);

Status install_seccomp_filter(SeccompProfile profile = SeccompProfile::worker);

// The names of the syscalls the filter denies outright or conditionally (for
// docs and tests).
std::vector<std::string> seccomp_denied_syscalls();

} // namespace fdo::daemon
