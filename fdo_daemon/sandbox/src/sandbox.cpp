#include "fdo/daemon/sandbox.h"

#include "fdo/daemon/seccomp_policy.h"
#include "fdo/util/enum_names.h"
#include "fdo/util/fd.h"
#include "landlock.h"

#include <cerrno>
#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

namespace fdo::daemon {

using nlohmann::json;

namespace {

constexpr EnumNames<FilesystemIsolation, 3> kFilesystemNames{
    {{{FilesystemIsolation::landlock, "landlock"},
      {FilesystemIsolation::mount_namespace, "mount_namespace"},
      {FilesystemIsolation::none, "none"}}}};

std::size_t thread_count() {
  std::size_t n = 0;
  if (DIR* d = ::opendir("/proc/self/task")) {
    while (dirent* e = ::readdir(d))
      if (e->d_name[0] != '.') ++n;
    ::closedir(d);
  }
  return n;
}

std::uint64_t mapped_bytes() {
  auto text = read_file("/proc/self/statm", 4096);
  if (!text) return 0;
  return std::strtoull(text->c_str(), nullptr, 10) *
         static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
}

// Effective capabilities of this process (capget, no libcap).
std::uint64_t effective_caps() {
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  if (::syscall(SYS_capget, &hdr, data) != 0) return 0;
  return std::uint64_t(data[0].effective) | (std::uint64_t(data[1].effective) << 32);
}

bool has_cap(int cap) {
  return (effective_caps() >> cap) & 1u;
}

Status write_proc(const std::string& path, const std::string& text) {
  Fd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd.valid()) return Error::from_errno("open " + path, errno);
  if (::write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size()))
    return Error::from_errno("write " + path, errno);
  return ok();
}

// A private mount namespace in which each hidden path is covered by an empty,
// read-only tmpfs. Without CAP_SYS_ADMIN a user namespace mapping this uid to
// itself comes first.
Status hide_paths(const std::vector<std::string>& hidden) {
  if (has_cap(CAP_SYS_ADMIN)) {
    if (::unshare(CLONE_NEWNS) != 0) return Error::from_errno("unshare(CLONE_NEWNS)", errno);
  } else {
    const uid_t uid = ::getuid();
    const gid_t gid = ::getgid();
    if (::unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0)
      return Error::from_errno("unshare(CLONE_NEWUSER|CLONE_NEWNS)", errno);
    FDO_TRY_STATUS(write_proc("/proc/self/setgroups", "deny"));
    FDO_TRY_STATUS(
        write_proc("/proc/self/uid_map", std::to_string(uid) + " " + std::to_string(uid) + " 1\n"));
    FDO_TRY_STATUS(
        write_proc("/proc/self/gid_map", std::to_string(gid) + " " + std::to_string(gid) + " 1\n"));
  }
  // Nothing done here may leak back into the daemon's namespace.
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
    return Error::from_errno("make mounts private", errno);
  for (const std::string& path : hidden) {
    if (::access(path.c_str(), F_OK) != 0) continue;
    if (::mount("fdo-hidden", path.c_str(), "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                "size=4k,mode=000") != 0)
      return Error::from_errno("cover " + path + " with an empty tmpfs", errno);
  }
  return ok();
}

Status switch_uid(std::uint32_t uid) {
  const gid_t gid = uid;
  if (::setgroups(0, nullptr) != 0) return Error::from_errno("setgroups", errno);
  if (::setresgid(gid, gid, gid) != 0) return Error::from_errno("setresgid", errno);
  if (::setresuid(uid, uid, uid) != 0) return Error::from_errno("setresuid", errno);
  uid_t r, e, s;
  if (::getresuid(&r, &e, &s) != 0 || r != uid || e != uid || s != uid)
    return make_error(Errc::internal, "setresuid did not take effect");
  return ok();
}

Status hard_limit(int resource, const char* name, rlim_t value) {
  rlimit r{value, value};
  if (::setrlimit(resource, &r) != 0)
    return Error::from_errno(std::string("setrlimit(") + name + ")", errno);
  return ok();
}

} // namespace

std::string_view to_string(FilesystemIsolation f) {
  return kFilesystemNames.name(f);
}

json to_json(const SandboxSpec& s) {
  json j = {{"tenant", s.tenant},
            {"filesystem", std::string(to_string(s.filesystem))},
            {"readable", s.readable},
            {"writable", s.writable},
            {"hidden", s.hidden},
            {"address_space_bytes", s.address_space_bytes},
            {"file_size_bytes", s.file_size_bytes},
            {"seccomp", std::string(to_string(s.seccomp))}};
  j["uid"] = s.uid ? json(*s.uid) : json(nullptr);
  return j;
}

Expected<SandboxSpec> sandbox_spec_from_json(const json& j) {
  if (!j.is_object()) return make_error(Errc::invalid_argument, "sandbox spec is not an object");
  try {
    SandboxSpec s;
    s.tenant = j.at("tenant").get<std::string>();
    auto f = kFilesystemNames.parse(j.at("filesystem").get<std::string>());
    if (!f) return make_error(Errc::invalid_argument, "sandbox spec: unknown filesystem isolation");
    s.filesystem = *f;
    if (!j.at("uid").is_null()) s.uid = j.at("uid").get<std::uint32_t>();
    s.readable = j.at("readable").get<std::vector<std::string>>();
    s.writable = j.at("writable").get<std::vector<std::string>>();
    s.hidden = j.at("hidden").get<std::vector<std::string>>();
    s.address_space_bytes = j.at("address_space_bytes").get<std::uint64_t>();
    s.file_size_bytes = j.at("file_size_bytes").get<std::uint64_t>();
    // Absent in a spec from before the profiles: the worker filter.
    const std::string profile = j.value("seccomp", "worker");
    if (profile == "gpu_worker")
      s.seccomp = SeccompProfile::gpu_worker;
    else if (profile != "worker")
      return make_error(Errc::invalid_argument, "sandbox spec: unknown seccomp profile");
    if (s.tenant.empty()) return make_error(Errc::invalid_argument, "sandbox spec: no tenant");
    return s;
  } catch (const json::exception& e) {
    return make_error(Errc::invalid_argument, std::string("sandbox spec: ") + e.what());
  }
}

json to_json(const SandboxReport& r) {
  return {{"tenant", r.tenant},
          {"uid", r.uid},
          {"gid", r.gid},
          {"uid_switched", r.uid_switched},
          {"filesystem", r.filesystem},
          {"seccomp", r.seccomp},
          {"address_space_limit", r.address_space_limit}};
}

Expected<SandboxReport> enter_sandbox(const SandboxSpec& spec) {
  // Landlock and the uid switch would bind only the calling thread's view.
  if (std::size_t n = thread_count(); n != 1)
    return make_error(Errc::internal, "cannot enter the sandbox with " + std::to_string(n) +
                                          " threads running (it must be entered single-threaded)");
  SandboxReport report;
  report.tenant = spec.tenant;
  const std::uint64_t mapped = mapped_bytes();

  if (spec.filesystem == FilesystemIsolation::mount_namespace) {
    FDO_TRY_STATUS(hide_paths(spec.hidden));
    report.filesystem = "mount namespace";
  }
  if (spec.uid) {
    FDO_TRY_STATUS(switch_uid(*spec.uid));
    report.uid_switched = true;
  }
  report.uid = ::getuid();
  report.gid = ::getgid();

  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
    return Error::from_errno("prctl(PR_SET_NO_NEW_PRIVS)", errno);
  // No ptrace-style access to this process by anyone of the same uid, no core.
  if (::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0)
    return Error::from_errno("prctl(PR_SET_DUMPABLE)", errno);
  FDO_TRY_STATUS(hard_limit(RLIMIT_CORE, "RLIMIT_CORE", 0));
  if (spec.address_space_bytes != 0) {
    report.address_space_limit = mapped + spec.address_space_bytes;
    FDO_TRY_STATUS(
        hard_limit(RLIMIT_AS, "RLIMIT_AS", static_cast<rlim_t>(report.address_space_limit)));
  }
  if (spec.file_size_bytes != 0)
    FDO_TRY_STATUS(
        hard_limit(RLIMIT_FSIZE, "RLIMIT_FSIZE", static_cast<rlim_t>(spec.file_size_bytes)));

  if (spec.filesystem == FilesystemIsolation::landlock) {
    FDO_TRY_STATUS(landlock::restrict_self(spec.readable, spec.writable));
    report.filesystem = "landlock (ABI " + std::to_string(landlock::abi_version()) + ")";
  }
  if (spec.filesystem == FilesystemIsolation::none) report.filesystem = "none";

  FDO_TRY_STATUS(install_seccomp_filter(spec.seccomp));
  report.seccomp = true;
  return report;
}

SandboxSupport probe_sandbox_support() {
  SandboxSupport s;
  s.landlock_abi = landlock::abi_version();
  s.can_switch_uid = has_cap(CAP_SETUID) && has_cap(CAP_SETGID);
  // Try it in a throwaway child: whether unprivileged user namespaces work
  // depends on sysctls and the container this runs in.
  pid_t pid = ::fork();
  if (pid == 0) {
    int flags = has_cap(CAP_SYS_ADMIN) ? CLONE_NEWNS : (CLONE_NEWUSER | CLONE_NEWNS);
    ::_exit(::unshare(flags) == 0 ? 0 : 1);
  }
  if (pid > 0) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    s.mount_namespace = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  s.seccomp = ::prctl(PR_GET_SECCOMP, 0, 0, 0, 0) >= 0;
  return s;
}

json to_json(const SandboxSupport& s) {
  return {{"landlock_abi", s.landlock_abi},
          {"can_switch_uid", s.can_switch_uid},
          {"mount_namespace", s.mount_namespace},
          {"seccomp", s.seccomp}};
}

} // namespace fdo::daemon
