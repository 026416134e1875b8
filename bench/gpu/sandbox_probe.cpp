// sandbox_probe: which layer of fdod's worker sandbox keeps the NVIDIA
// driver from starting on a GPU host (docs/gpu.md, "The sandbox").
//   sandbox_probe none|seccomp|seccomp-gpu|uid|sandbox|deny:NAME,... [driver]
// Applies that layer alone (uid: the sandbox's first tenant uid; sandbox:
// enter_sandbox as a GPU worker's bind spec has it, without Landlock), then
// calls cuInit and prints the result.
#include "fdo/daemon/sandbox.h"
#include "fdo/daemon/seccomp_policy.h"
#include "fdo/gpu/session.h"

#include <cerrno>
#include <cstdio>
#include <grp.h>
#include <linux/sched.h>
#include <seccomp.h>
#include <sstream>
#include <string>
#include <unistd.h>

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "none";
  const std::string path = argc > 2 ? argv[2] : "libcuda.so.1";
  auto driver = fdo::gpu::load_cuda_driver(path);
  if (!driver) {
    std::printf("%s: %s\n", mode.c_str(), driver.error().describe().c_str());
    return 2;
  }
  if (mode == "seccomp" || mode == "seccomp-gpu") {
    const auto profile = mode == "seccomp" ? fdo::daemon::SeccompProfile::worker
                                           : fdo::daemon::SeccompProfile::gpu_worker;
    if (auto st = fdo::daemon::install_seccomp_filter(profile); !st) {
      std::printf("seccomp: %s\n", st.error().describe().c_str());
      return 2;
    }
  } else if (mode.rfind("deny:", 0) == 0) {
    // Only the named rules of the policy: "socket,shmget", "clone3", "clone".
    scmp_filter_ctx f = seccomp_init(SCMP_ACT_ALLOW);
    std::stringstream names(mode.substr(5));
    for (std::string name; std::getline(names, name, ',');) {
      const int nr = seccomp_syscall_resolve_name(name.c_str());
      if (nr == __NR_SCMP_ERROR) continue;
      if (name == "clone") {
        scmp_arg_cmp no_thread = SCMP_A0_64(SCMP_CMP_MASKED_EQ, CLONE_THREAD, 0);
        seccomp_rule_add_array(f, SCMP_ACT_ERRNO(EPERM), nr, 1, &no_thread);
      } else {
        seccomp_rule_add(f, SCMP_ACT_ERRNO(name == "clone3" ? ENOSYS : EPERM), nr, 0);
      }
    }
    if (seccomp_load(f) != 0) return 2;
    seccomp_release(f);
  } else if (mode.rfind("landlock:", 0) == 0) {
    // A GPU worker's Landlock rules (isolation.cpp) plus extra paths:
    // "landlock:r=/proc,/run;w=/dev/shm".
    fdo::daemon::SandboxSpec spec;
    spec.tenant = "uid:1000";
    spec.filesystem = fdo::daemon::FilesystemIsolation::landlock;
    spec.seccomp = fdo::daemon::SeccompProfile::gpu_worker;
    spec.readable = {"/usr",
                     "/lib",
                     "/lib64",
                     "/etc",
                     "/sys",
                     "/proc/self",
                     "/proc/sys/kernel",
                     "/proc/cpuinfo",
                     "/proc/meminfo",
                     "/dev/zero",
                     "/dev/urandom",
                     "/dev/random",
                     "/proc/driver/nvidia",
                     "/proc/devices"};
    spec.writable = {"/proc/self/task", "/dev/null",       "/dev/nvidiactl",
                     "/dev/nvidia0",    "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
                     "/dev/nvidia-caps"};
    if (path.find('/') != std::string::npos) spec.readable.push_back(path);
    std::stringstream parts(mode.substr(9));
    for (std::string part; std::getline(parts, part, ';');) {
      if (part.size() < 2) continue;
      auto& list = part[0] == 'w' ? spec.writable : spec.readable;
      std::stringstream items(part.substr(2));
      for (std::string item; std::getline(items, item, ',');)
        list.push_back(item);
    }
    auto r = fdo::daemon::enter_sandbox(spec);
    if (!r) {
      std::printf("%s: %s\n", mode.c_str(), r.error().describe().c_str());
      return 2;
    }
  } else if (mode == "uid") {
    const uid_t uid = 1879048193;
    if (::setgroups(0, nullptr) != 0 || ::setresgid(uid, uid, uid) != 0 ||
        ::setresuid(uid, uid, uid) != 0) {
      std::perror("uid switch");
      return 2;
    }
  } else if (mode == "sandbox") {
    fdo::daemon::SandboxSpec spec;
    spec.tenant = "uid:1000";
    spec.uid = 1879048193;
    spec.filesystem = fdo::daemon::FilesystemIsolation::none;
    spec.seccomp = fdo::daemon::SeccompProfile::gpu_worker;
    auto r = fdo::daemon::enter_sandbox(spec);
    if (!r) {
      std::printf("sandbox: %s\n", r.error().describe().c_str());
      return 2;
    }
  }
  auto gpus = fdo::gpu::probe(**driver);
  std::printf("%s: %s\n", mode.c_str(),
              gpus ? ("ok, " + std::to_string(gpus->size()) + " GPU(s)").c_str()
                   : gpus.error().describe().c_str());
  return gpus ? 0 : 1;
}
