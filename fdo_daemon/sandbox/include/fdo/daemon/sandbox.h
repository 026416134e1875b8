// The sandbox a worker process enters before it touches a tenant's program
// (docs/security.md). Applied once, to the whole single-threaded process, and
// irreversible: the process then serves that one tenant until it is retired.
//
// Layers, in the order they are applied:
//   1. a private mount namespace with the hidden paths (the state dir) under
//      an empty read-only tmpfs          (FilesystemIsolation::mount_namespace)
//   2. a uid/gid of its own, no supplementary groups (when `uid` is set; needs
//      root or CAP_SETUID/CAP_SETGID)
//   3. PR_SET_NO_NEW_PRIVS, PR_SET_DUMPABLE(0), hard rlimits the process cannot
//      raise (core 0, address space, file size)
//   4. Landlock: read-only access beneath `readable`, read-write beneath
//      `writable`, nothing else               (FilesystemIsolation::landlock)
//   5. a seccomp filter (seccomp_policy.h) denying ptrace and process memory
//      access, signals to other processes, execve, new processes, sockets,
//      namespaces, mounts, kernel keyrings, SysV IPC and the like.
#pragma once

#include "fdo/daemon/seccomp_policy.h"
#include "fdo/util/expected.h"

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fdo::daemon {

enum class FilesystemIsolation { landlock, mount_namespace, none };
std::string_view to_string(FilesystemIsolation f);

struct SandboxSpec {
  std::string tenant; // "uid:1000", "shared", "system": for messages and the pool's affinity
  std::optional<std::uint32_t> uid; // switch to this uid (and gid) when set
  FilesystemIsolation filesystem = FilesystemIsolation::landlock;
  // Landlock: read-only beneath these (directories or files; "/proc/self" is
  // the process's own /proc entry). Missing paths are skipped.
  std::vector<std::string> readable;
  // Landlock: read-write beneath these (a worker's private temp dir, /dev/null).
  std::vector<std::string> writable;
  // Mount namespace: covered by an empty read-only tmpfs (the state dir).
  std::vector<std::string> hidden;
  // Hard RLIMIT_AS: what the process has mapped at entry plus this; 0 leaves it.
  std::uint64_t address_space_bytes = 0;
  // Hard RLIMIT_FSIZE (bounds what a program can write to its captured
  // stdout/stderr); 0 leaves it.
  std::uint64_t file_size_bytes = 0;
  // The seccomp filter (seccomp_policy.h): GPU workers' lets the driver
  // open an AF_UNIX socket.
  SeccompProfile seccomp = SeccompProfile::worker;
};

nlohmann::json to_json(const SandboxSpec& spec);
Expected<SandboxSpec> sandbox_spec_from_json(const nlohmann::json& j);

// What enter_sandbox applied, for the pool's log and `capabilities`.
struct SandboxReport {
  std::string tenant;
  std::uint32_t uid = 0, gid = 0; // after the switch (or unchanged)
  bool uid_switched = false;
  std::string filesystem; // "landlock (ABI 7)", "mount namespace", "none"
  bool seccomp = false;
  std::uint64_t address_space_limit = 0; // the hard limit set, 0 = none
};
nlohmann::json to_json(const SandboxReport& report);

// Applies the spec to this process. Refuses (changing nothing it could not
// undo... in practice: call it from a process that exits on failure) when the
// process has more than one thread, or when a requested layer is unavailable.
Expected<SandboxReport> enter_sandbox(const SandboxSpec& spec);

// What this host and process can do, probed without changing anything.
struct SandboxSupport {
  int landlock_abi = 0;         // 0 = no Landlock
  bool can_switch_uid = false;  // root, or CAP_SETUID and CAP_SETGID
  bool mount_namespace = false; // root/CAP_SYS_ADMIN, or unprivileged user namespaces
  bool seccomp = false;
};
SandboxSupport probe_sandbox_support();
nlohmann::json to_json(const SandboxSupport& support);

} // namespace fdo::daemon
