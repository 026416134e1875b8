#include "fdo/daemon/isolation.h"

#include "fdo/daemon/ipc.h"
#include "fdo/util/log.h"

#include <algorithm>
#include <filesystem>
#include <unistd.h>

namespace fdo::daemon {

namespace fs = std::filesystem;

std::string_view to_string(WorkerRole role) {
  return role == WorkerRole::compile ? "compile" : role == WorkerRole::exec ? "exec" : "gpu";
}

std::string sandbox_tenant(std::string_view scope) {
  if (scope.empty()) return "shared";
  return std::string(scope);
}

const std::vector<std::string>& Isolation::readable_paths() {
  // Shared libraries and their configuration, the worker's own /proc entry,
  // what libc and libpfm read about the machine. Nothing of the daemon's.
  static const std::vector<std::string> paths = {
      "/usr",          "/lib",      "/lib64",       "/lib32",           "/libx32",
      "/etc",          "/sys",      "/proc/self",   "/proc/sys/kernel", "/proc/cpuinfo",
      "/proc/meminfo", "/dev/zero", "/dev/urandom", "/dev/random"};
  return paths;
}

std::vector<std::string> gpu_device_nodes() {
  // /dev/nvidiactl, /dev/nvidia0.., /dev/nvidia-uvm(-tools), /dev/nvidia-caps/...
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/dev", ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("nvidia", 0) == 0) out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

namespace {

// True if `path` lies at or beneath `dir` (both made absolute and normal).
bool beneath(const fs::path& path, const fs::path& dir) {
  auto p = path.begin();
  for (auto d = dir.begin(); d != dir.end(); ++d, ++p)
    if (p == path.end() || *p != *d) return false;
  return true;
}

fs::path canonical_or_absolute(const std::string& p) {
  std::error_code ec;
  fs::path c = fs::weakly_canonical(fs::absolute(p, ec), ec);
  return ec ? fs::absolute(p).lexically_normal() : c;
}

std::optional<std::string> readable_parent_of(const std::string& state_dir) {
  fs::path sd = canonical_or_absolute(state_dir);
  for (const std::string& r : Isolation::readable_paths())
    if (beneath(sd, canonical_or_absolute(r))) return r;
  return std::nullopt;
}

} // namespace

Expected<Isolation> Isolation::choose(const Config& config, const SandboxSupport& host) {
  Isolation iso;
  iso.uid_base_ = config.sandbox_uid_base;
  iso.uid_count_ = config.sandbox_uid_count;
  iso.switch_uids_ = host.can_switch_uid;
  iso.landlock_abi_ = host.landlock_abi;
  iso.state_dir_ = canonical_or_absolute(config.state_dir).string();
  auto exposed = readable_parent_of(config.state_dir);
  const std::string why_not_landlock =
      host.landlock_abi == 0 ? std::string("the kernel has no Landlock")
      : exposed              ? "the state dir " + iso.state_dir_ + " is beneath " + *exposed +
                      ", which sandboxed workers must be able to read"
                : std::string();
  switch (config.sandbox_filesystem) {
  case SandboxFilesystem::landlock:
    if (!why_not_landlock.empty())
      return make_error(Errc::unsupported,
                        "sandbox_filesystem = landlock, but " + why_not_landlock);
    iso.filesystem_ = FilesystemIsolation::landlock;
    break;
  case SandboxFilesystem::mount_namespace:
    if (!host.mount_namespace)
      return make_error(Errc::unsupported,
                        "sandbox_filesystem = mount_namespace, but this process can create no "
                        "mount namespace (not root, and unprivileged user namespaces are off)");
    iso.filesystem_ = FilesystemIsolation::mount_namespace;
    break;
  case SandboxFilesystem::automatic:
    if (why_not_landlock.empty()) {
      iso.filesystem_ = FilesystemIsolation::landlock;
    } else if (host.mount_namespace) {
      iso.filesystem_ = FilesystemIsolation::mount_namespace;
    } else {
      return make_error(Errc::unsupported,
                        "cannot keep client code out of the state dir: no Landlock (" +
                            why_not_landlock +
                            ") and no mount namespace; set sandbox_filesystem = none to run "
                            "without (unsafe, docs/security.md)");
    }
    break;
  case SandboxFilesystem::none:
    iso.filesystem_ = FilesystemIsolation::none;
    log::warning("sandbox_filesystem = none: client programs can open every file fdod's "
                 "sandbox uid can (docs/security.md)");
    break;
  }
  return iso;
}

std::optional<std::uint32_t> Isolation::uid_for(const std::string& tenant) const {
  if (!switch_uids_) return std::nullopt;
  constexpr std::string_view kUid = "uid:";
  if (tenant.starts_with(kUid)) {
    std::uint64_t n = std::strtoull(tenant.c_str() + kUid.size(), nullptr, 10);
    return uid_base_ + 1 + static_cast<std::uint32_t>(n % (uid_count_ - 1));
  }
  return uid_base_; // shared profiles and the daemon's own jobs
}

nlohmann::json Isolation::bind_request(WorkerRole role, const std::string& tenant,
                                       const Config& c) const {
  SandboxSpec spec;
  spec.tenant = tenant.empty() ? "system" : tenant;
  spec.uid = uid_for(spec.tenant);
  spec.filesystem = filesystem_;
  spec.readable = readable_paths();
  spec.writable = {"/dev/null"};
  spec.hidden = {state_dir_};
  if (role == WorkerRole::exec) {
    spec.address_space_bytes = c.exec_memory_mb * kMiB;
    // One byte over the capture limit, so a cut stream shows as longer than it.
    spec.file_size_bytes = c.job_output_bytes + 1;
  } else if (role == WorkerRole::gpu) {
    // The device nodes the driver opens, and what it reads about them; no
    // address-space limit (the driver reserves terabytes of virtual address
    // space for unified addressing): the worker's cgroup bounds its memory.
    for (const std::string& node : gpu_device_nodes())
      spec.writable.push_back(node);
    for (const char* p : {"/proc/driver/nvidia", "/proc/devices"})
      spec.readable.push_back(p);
    // The driver names its threads (/proc/self/task/<tid>/comm): cuInit
    // fails with CUDA_ERROR_OPERATING_SYSTEM if it cannot (seen on an H200
    // host, driver 580). Only the worker's own threads.
    spec.writable.push_back("/proc/self/task");
    if (c.gpu_driver.find('/') != std::string::npos) spec.readable.push_back(c.gpu_driver);
    spec.file_size_bytes = c.job_output_bytes + 1;
    spec.seccomp = SeccompProfile::gpu_worker;
  } else {
    spec.address_space_bytes = c.compile_memory_mb * kMiB;
  }
  // The driver maps what it maps (100+ MiB for a context): a GPU worker is
  // not retired for that.
  return {{"spec", daemon::to_json(spec)},
          {"retire_growth_bytes", role == WorkerRole::gpu ? 0 : c.worker_retire_growth_mb * kMiB}};
}

Status Isolation::open_cgroups(const Config& c) {
  if (c.sandbox_cgroup == SandboxCgroup::off) {
    cgroup_unavailable_ = "sandbox_cgroup = off";
    return ok();
  }
  auto without = [&](const Error& e) -> Status {
    if (c.sandbox_cgroup == SandboxCgroup::required)
      return make_error(Errc::unsupported, "sandbox_cgroup = required, but " + e.message());
    cgroup_unavailable_ = e.message();
    log::info("workers get no cgroup of their own (" + e.message() +
              "); hard rlimits bound each job");
    return ok();
  };
  auto where = own_cgroup();
  if (!where) return without(where.error());
  if (c.sandbox_cgroup == SandboxCgroup::automatic && !cgroup_is_ours(*where))
    return without(
        make_error(Errc::unavailable, "fdod's cgroup " +
                                          (!where->directory.empty() ? where->directory
                                           : where->systemd_v1       ? where->systemd_v1->directory
                                                                     : std::string("(cgroup v1)")) +
                                          " is not delegated to it (Delegate=yes)"));
  auto tree = CgroupTree::open(*where, system_cgroup_fs(), ::getpid());
  if (!tree) return without(tree.error());
  cgroups_ = std::move(*tree);
  log::info("workers are placed in cgroups: " + cgroups_->summary());
  return ok();
}

std::string Isolation::describe() const {
  std::string fsys = filesystem_ == FilesystemIsolation::landlock
                         ? "Landlock (ABI " + std::to_string(landlock_abi_) + ")"
                     : filesystem_ == FilesystemIsolation::mount_namespace
                         ? std::string("a mount namespace hiding the state dir")
                         : std::string("NO filesystem restriction");
  std::string uids = switch_uids_ ? "jobs run as uids " + std::to_string(uid_base_) + ".." +
                                        std::to_string(uid_base_ + uid_count_ - 1)
                                  : std::string("jobs run as fdod's uid (it cannot switch uids)");
  std::string groups = cgroups_ ? ", a cgroup per worker (" + cgroups_->summary() + ")"
                                : ", no cgroups (" + cgroup_unavailable_ + ")";
  return "sandbox: one worker per tenant, seccomp, " + fsys + ", " + uids + groups;
}

nlohmann::json Isolation::to_json() const {
  return {{"filesystem", std::string(daemon::to_string(filesystem_))},
          {"landlock_abi", landlock_abi_},
          {"switches_uids", switch_uids_},
          {"uid_base", uid_base_},
          {"uid_count", uid_count_},
          {"seccomp", true},
          {"one_tenant_per_worker", true},
          {"cgroup", cgroups_ ? cgroups_->describe() : nlohmann::json(nullptr)},
          {"cgroup_unavailable", cgroup_unavailable_}};
}

} // namespace fdo::daemon
