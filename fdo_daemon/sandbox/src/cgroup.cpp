#include "fdo/daemon/cgroup.h"

#include "fdo/util/fd.h"
#include "fdo/util/log.h"

#include <cerrno>
#include <chrono>
#include <csignal>
#include <fcntl.h>
#include <filesystem>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace fdo::daemon {

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

// Subtrees left by daemons that were killed (SIGKILL runs no destructor):
// "fdod-workers.<pid>" whose pid is gone. Only empty groups can be removed,
// which is all of them once their workers have exited.
void sweep_stale_subtrees(CgroupFs& fs, const std::string& own) {
  const std::string prefix = "fdod-workers.";
  for (const std::string& name : fs.subdirectories(own)) {
    if (!name.starts_with(prefix)) continue;
    const long pid = std::strtol(name.c_str() + prefix.size(), nullptr, 10);
    if (pid <= 0 || ::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    const std::string dir = own + "/" + name;
    for (const std::string& group : fs.subdirectories(dir))
      (void)fs.remove_dir(dir + "/" + group);
    (void)fs.remove_dir(dir);
  }
}

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

std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> out;
  while (!text.empty()) {
    std::size_t nl = text.find('\n');
    out.push_back(text.substr(0, nl));
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
  return out;
}

std::vector<std::string_view> fields(std::string_view line) {
  std::vector<std::string_view> out;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && line[i] == ' ')
      ++i;
    std::size_t j = i;
    while (j < line.size() && line[j] != ' ')
      ++j;
    if (j > i) out.push_back(line.substr(i, j - i));
    i = j;
  }
  return out;
}

std::string join_path(const std::string& dir, std::string_view rel) {
  std::string out = dir;
  while (out.size() > 1 && out.back() == '/')
    out.pop_back();
  if (!rel.empty() && rel != "/") {
    if (rel.front() != '/') out += '/';
    out += rel;
  }
  return out;
}

std::uint64_t keyed_value(std::string_view text, std::string_view key) {
  for (std::string_view line : split_lines(text)) {
    auto f = fields(line);
    if (f.size() == 2 && f[0] == key) return std::strtoull(std::string(f[1]).c_str(), nullptr, 10);
  }
  return 0;
}

bool has_word(std::string_view text, std::string_view word) {
  for (std::string_view line : split_lines(text))
    for (std::string_view f : fields(line))
      if (f == word) return true;
  return false;
}

} // namespace

std::unique_ptr<CgroupFs> system_cgroup_fs() {
  return std::make_unique<SystemCgroupFs>();
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

Expected<std::string> cgroup2_mount_from_mountinfo(std::string_view mountinfo) {
  for (std::string_view line : split_lines(mountinfo)) {
    auto f = fields(line);
    // id parent major:minor root mount-point options [optional...] - fstype source super-options
    std::size_t dash = 0;
    for (std::size_t i = 6; i < f.size(); ++i)
      if (f[i] == "-") {
        dash = i;
        break;
      }
    if (dash == 0 || dash + 1 >= f.size() || f[dash + 1] != "cgroup2") continue;
    if (f[3] != "/") continue; // a bind mount of a subtree: not the hierarchy's root view
    return unescape_octal(f[4]);
  }
  return make_error(Errc::not_found, "no cgroup2 file system is mounted");
}

Expected<std::string> cgroup2_path_from_proc(std::string_view proc_self_cgroup) {
  for (std::string_view line : split_lines(proc_self_cgroup))
    if (line.starts_with("0::")) return std::string(line.substr(3));
  return make_error(Errc::not_found, "this process has no cgroup v2 membership (no \"0::\" line)");
}

Expected<CgroupLocation> own_cgroup() {
  FDO_TRY(std::string mountinfo, read_file("/proc/self/mountinfo", 4 * 1024 * 1024));
  FDO_TRY(std::string mount, cgroup2_mount_from_mountinfo(mountinfo));
  FDO_TRY(std::string membership, read_file("/proc/self/cgroup", 64 * 1024));
  FDO_TRY(std::string path, cgroup2_path_from_proc(membership));
  CgroupLocation where;
  where.directory = join_path(mount, path);
  where.namespace_root = path == "/";
  return where;
}

Expected<std::shared_ptr<CgroupTree>> CgroupTree::open(const CgroupLocation& where,
                                                       std::unique_ptr<CgroupFs> fs, pid_t self) {
  const std::string& own = where.directory;
  if (!fs->exists(own + "/cgroup.procs"))
    return make_error(Errc::unavailable, own + " is not a cgroup v2 directory");
  // A container's cgroup root holds its other processes: the workers get a
  // subtree of their own beside them. A delegated service cgroup is ours
  // alone: this process moves into a leaf so that the cgroup may enable
  // controllers for its children (cgroup v2's no-internal-processes rule).
  std::string dir = own;
  if (where.namespace_root) {
    sweep_stale_subtrees(*fs, own);
    dir = own + "/fdod-workers." + std::to_string(self);
    FDO_TRY_STATUS(fs->make_dir(dir));
    // Moving a process in must work before any worker depends on it: this
    // process goes into a probe group and straight back.
    const std::string probe = dir + "/probe";
    FDO_TRY_STATUS(fs->make_dir(probe));
    Status moved = fs->write(probe + "/cgroup.procs", std::to_string(self));
    Status back = moved ? fs->write(own + "/cgroup.procs", std::to_string(self)) : ok();
    (void)fs->remove_dir(probe);
    if (!moved || !back) {
      (void)fs->remove_dir(dir);
      return (!moved ? moved : back).error().context("place a process in a worker cgroup");
    }
  } else {
    FDO_TRY_STATUS(fs->make_dir(own + "/daemon"));
    if (auto st = fs->write(own + "/daemon/cgroup.procs", std::to_string(self)); !st)
      return std::move(st).error().context("move the daemon into a leaf of its cgroup");
  }
  std::shared_ptr<CgroupTree> tree(new CgroupTree(dir, std::move(fs)));
  tree->remove_on_exit_ = where.namespace_root;
  CgroupFs& f = *tree->fs_;
  auto offered = f.read(dir + "/cgroup.controllers");
  std::string available = offered ? *offered : "";
  std::string wanted;
  for (const char* c : {"memory", "pids"})
    if (has_word(available, c)) wanted += std::string(wanted.empty() ? "" : " ") + "+" + c;
  if (!wanted.empty()) {
    if (auto st = f.write(dir + "/cgroup.subtree_control", wanted); !st)
      log::warning("cgroup " + dir + ": cannot enable " + wanted +
                   " for worker groups: " + st.error().message() +
                   " (workers are still grouped and killed as one; rlimits bound them)");
  }
  auto enabled = f.read(dir + "/cgroup.subtree_control");
  if (enabled) {
    tree->memory_ = has_word(*enabled, "memory");
    tree->pids_ = has_word(*enabled, "pids");
  }
  return tree;
}

CgroupTree::~CgroupTree() {
  // Every worker group is gone (each holds the tree); the subtree made beside
  // a container's processes goes too.
  if (remove_on_exit_)
    if (auto st = fs_->remove_dir(dir_); !st)
      log::warning("cgroup " + dir_ + " not removed: " + st.error().message());
}

Expected<std::unique_ptr<Cgroup>> CgroupTree::create(const std::string& name) {
  if (name.empty() || name.find('/') != std::string::npos || name == "." || name == ".." ||
      name == "daemon")
    return make_error(Errc::invalid_argument, "bad cgroup name '" + name + "'");
  const std::string path = dir_ + "/" + name;
  FDO_TRY_STATUS(fs_->make_dir(path));
  return std::make_unique<Cgroup>(shared_from_this(), path);
}

nlohmann::json CgroupTree::describe() const {
  return {{"directory", dir_}, {"memory", memory_}, {"pids", pids_}};
}

Cgroup::~Cgroup() {
  if (!tree_) return;
  CgroupFs& fs = tree_->fs();
  (void)kill();
  // The processes leave the group as they exit; removing it waits for that
  // (briefly: they were SIGKILLed and the worker itself has been reaped).
  Status st = ok();
  for (int attempt = 0; attempt < 50; ++attempt) {
    st = fs.remove_dir(path_);
    if (st || st.error().code() == Errc::not_found) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (!st) log::warning("cgroup " + path_ + " not removed: " + st.error().message());
}

Status Cgroup::add(pid_t pid) {
  return tree_->fs().write(path_ + "/cgroup.procs", std::to_string(pid));
}

Status Cgroup::limit(const CgroupLimits& limits) {
  CgroupFs& fs = tree_->fs();
  if (tree_->memory_controller() && limits.memory_max_bytes != 0) {
    FDO_TRY_STATUS(fs.write(path_ + "/memory.max", std::to_string(limits.memory_max_bytes)));
    // Swap would let a job hold more than memory.max says.
    if (fs.exists(path_ + "/memory.swap.max"))
      FDO_TRY_STATUS(fs.write(path_ + "/memory.swap.max", "0"));
  }
  if (tree_->pids_controller() && limits.pids_max != 0)
    FDO_TRY_STATUS(fs.write(path_ + "/pids.max", std::to_string(limits.pids_max)));
  return ok();
}

std::uint64_t Cgroup::memory_current() const {
  if (!tree_->memory_controller()) return 0;
  auto text = tree_->fs().read(path_ + "/memory.current");
  return text ? std::strtoull(text->c_str(), nullptr, 10) : 0;
}

std::uint64_t Cgroup::oom_kills() const {
  if (!tree_->memory_controller()) return 0;
  auto text = tree_->fs().read(path_ + "/memory.events");
  return text ? keyed_value(*text, "oom_kill") : 0;
}

Status Cgroup::kill() {
  if (!tree_->fs().exists(path_ + "/cgroup.kill"))
    return make_error(Errc::unavailable, "cgroup.kill needs Linux 5.14 or later");
  return tree_->fs().write(path_ + "/cgroup.kill", "1");
}

} // namespace fdo::daemon
