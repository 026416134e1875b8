// Finding this process's cgroups (/proc/self/mountinfo, /proc/self/cgroup),
// systemd's delegation mark, and the real cgroupfs behind the CgroupFs seam.
#include "cgroup_text.h"
#include "fdo/daemon/cgroup.h"
#include "fdo/util/fd.h"

#include <cerrno>
#include <fcntl.h>
#include <filesystem>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

namespace fdo::daemon {

using namespace cgroup_text;

namespace {

class SystemCgroupFs final : public CgroupFs {
public:
  Expected<std::string> read(const std::string& path) override {
    return read_file(path, 64 * 1024);
  }
  Status write(const std::string& path, std::string_view value) override {
    int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) return Error::from_errno("open " + path, errno);
    Fd f(fd);
    ssize_t n = ::write(fd, value.data(), value.size());
    if (n < 0) return Error::from_errno("write '" + std::string(value) + "' to " + path, errno);
    return ok();
  }
  Status make_dir(const std::string& path) override {
    if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST)
      return Error::from_errno("mkdir " + path, errno);
    return ok();
  }
  Status remove_dir(const std::string& path) override {
    if (::rmdir(path.c_str()) != 0 && errno != ENOENT)
      return Error::from_errno("rmdir " + path, errno);
    return ok();
  }
  bool exists(const std::string& path) override { return ::access(path.c_str(), F_OK) == 0; }
  std::vector<std::string> subdirectories(const std::string& path) override {
    std::vector<std::string> out;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(path, ec))
      if (e.is_directory(ec)) out.push_back(e.path().filename().string());
    return out;
  }
};

// Mount points in mountinfo escape space, tab, newline and backslash as \ooo.
std::string unescape_octal(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && s.size() - i >= 4 && s[i + 1] >= '0' && s[i + 1] <= '3') {
      out += static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

// One mountinfo line: id parent major:minor root mount-point options
// [optional...] - fstype source super-options.
struct Mount {
  std::string_view root, point, fstype, super_options;
};
std::optional<Mount> parse_mount(std::string_view line) {
  auto f = fields(line);
  for (std::size_t i = 6; i < f.size(); ++i)
    if (f[i] == "-") {
      if (i + 3 >= f.size()) return std::nullopt;
      return Mount{f[3], f[4], f[i + 1], f[i + 3]};
    }
  return std::nullopt;
}

bool contains_item(std::string_view list, std::string_view item) {
  for (std::string_view x : split(list, ','))
    if (x == item) return true;
  return false;
}

} // namespace

std::unique_ptr<CgroupFs> system_cgroup_fs() {
  return std::make_unique<SystemCgroupFs>();
}

std::string_view to_string(CgroupVersion v) {
  switch (v) {
  case CgroupVersion::v2:
    return "v2";
  case CgroupVersion::v1:
    return "v1";
  case CgroupVersion::none:
    break;
  }
  return "none";
}

bool cgroup_delegated(const std::string& directory) {
  // systemd hands a unit with Delegate=yes and a User= its cgroup's control
  // files, and marks the cgroup (trusted.* when it runs as root, user.* in a
  // user manager).
  struct stat st {};
  if (::geteuid() != 0 && ::stat((directory + "/cgroup.procs").c_str(), &st) == 0 &&
      st.st_uid == ::geteuid())
    return true;
  for (const char* name : {"trusted.delegate", "user.delegate"}) {
    char value[8] = {};
    ssize_t n = ::getxattr(directory.c_str(), name, value, sizeof value - 1);
    if (n > 0 && value[0] == '1') return true;
  }
  return false;
}

bool cgroup_is_ours(const CgroupLocation& where) {
  // A container's own cgroup root, or a cgroup systemd delegated to fdod
  // (the mark is on the unified hierarchy, or on name=systemd on a legacy
  // host). Without cgroup2, the root of name=systemd, or without that, of a v1
  // memory or pids hierarchy, is a container's root.
  if (!where.directory.empty() && (where.namespace_root || cgroup_delegated(where.directory)))
    return true;
  if (where.systemd_v1 && cgroup_delegated(where.systemd_v1->directory)) return true;
  if (!where.directory.empty()) return false;
  if (where.systemd_v1) return where.systemd_v1->root;
  return (where.memory_v1 && where.memory_v1->root) || (where.pids_v1 && where.pids_v1->root);
}

Expected<std::string> cgroup2_mount_from_mountinfo(std::string_view mountinfo) {
  for (std::string_view line : lines(mountinfo)) {
    auto m = parse_mount(line);
    if (!m || m->fstype != "cgroup2") continue;
    if (m->root != "/") continue; // a bind mount of a subtree: not the hierarchy's root view
    return unescape_octal(m->point);
  }
  return make_error(Errc::not_found, "no cgroup2 file system is mounted");
}

Expected<std::string> cgroup2_path_from_proc(std::string_view proc_self_cgroup) {
  for (std::string_view line : lines(proc_self_cgroup))
    if (line.starts_with("0::")) return std::string(line.substr(3));
  return make_error(Errc::not_found, "this process has no cgroup v2 membership (no \"0::\" line)");
}

Expected<CgroupV1Location> cgroup_v1_location(std::string_view mountinfo,
                                              std::string_view proc_self_cgroup,
                                              std::string_view controller) {
  // "hierarchy-id:controller,controller:/path" (v1 lines have a non-empty list).
  std::optional<std::string_view> path;
  for (std::string_view line : lines(proc_self_cgroup)) {
    auto parts = split(line, ':');
    if (parts.size() < 3 || parts[1].empty()) continue;
    if (!contains_item(parts[1], controller)) continue;
    path = line.substr(parts[0].size() + parts[1].size() + 2);
    break;
  }
  if (!path)
    return make_error(Errc::not_found,
                      "this process is in no cgroup v1 " + std::string(controller) + " hierarchy");
  for (std::string_view line : lines(mountinfo)) {
    auto m = parse_mount(line);
    if (!m || m->fstype != "cgroup" || !contains_item(m->super_options, controller)) continue;
    // A mount of a subtree (a container's view) shows the hierarchy below
    // `root`: the process's path must lie under it.
    std::string_view rel = *path;
    if (m->root != "/") {
      if (!rel.starts_with(m->root) || (rel.size() > m->root.size() && rel[m->root.size()] != '/'))
        continue;
      rel.remove_prefix(m->root.size());
    }
    CgroupV1Location where;
    where.directory = join_path(unescape_octal(m->point), rel);
    where.root = rel.empty() || rel == "/";
    return where;
  }
  return make_error(Errc::not_found, "the cgroup v1 " + std::string(controller) +
                                         " hierarchy is not mounted where this process sees it");
}

Expected<CgroupLocation> own_cgroup() {
  FDO_TRY(std::string mountinfo, read_file("/proc/self/mountinfo", 4 * 1024 * 1024));
  FDO_TRY(std::string membership, read_file("/proc/self/cgroup", 64 * 1024));
  CgroupLocation where;
  auto mount = cgroup2_mount_from_mountinfo(mountinfo);
  auto path = mount ? cgroup2_path_from_proc(membership) : Expected<std::string>(mount.error());
  if (path) {
    where.directory = join_path(*mount, *path);
    where.namespace_root = *path == "/";
  }
  auto v1 = [&](std::string_view controller) -> std::optional<CgroupV1Location> {
    auto l = cgroup_v1_location(mountinfo, membership, controller);
    if (!l) return std::nullopt;
    return std::move(*l);
  };
  where.memory_v1 = v1("memory");
  where.pids_v1 = v1("pids");
  where.systemd_v1 = v1("name=systemd");
  if (where.directory.empty() && !where.memory_v1 && !where.pids_v1)
    return make_error(Errc::not_found,
                      path.error().message() + ", and no cgroup v1 memory or pids hierarchy");
  return where;
}

} // namespace fdo::daemon
