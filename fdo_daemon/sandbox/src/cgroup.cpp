// The worker cgroup tree and each worker's group, on cgroup v2 and v1
// (cgroup.h). Locating the hierarchies and the real cgroupfs: cgroup_proc.cpp.
#include "fdo/daemon/cgroup.h"

#include "cgroup_text.h"
#include "fdo/util/log.h"

#include <cerrno>
#include <chrono>
#include <csignal>
#include <set>
#include <thread>
#include <unistd.h>
#include <vector>

namespace fdo::daemon {

using namespace cgroup_text;

namespace {

const std::string kSubtreePrefix = "fdod-workers.";

// Subtrees left by daemons that were killed (SIGKILL runs no destructor):
// "fdod-workers.<pid>" whose pid is gone. Only empty groups can be removed,
// which is all of them once their workers have exited.
void sweep_stale_subtrees(CgroupFs& fs, const std::string& own) {
  for (const std::string& name : fs.subdirectories(own)) {
    if (!name.starts_with(kSubtreePrefix)) continue;
    const long pid = std::strtol(name.c_str() + kSubtreePrefix.size(), nullptr, 10);
    if (pid <= 0 || ::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    const std::string dir = own + "/" + name;
    for (const std::string& group : fs.subdirectories(dir))
      (void)fs.remove_dir(dir + "/" + group);
    (void)fs.remove_dir(dir);
  }
}

// A subtree `fdod-workers.<self>` under `own`, after proving that a process
// can be moved into it: `self` goes into a probe group and straight back.
Expected<std::string> make_subtree(CgroupFs& fs, const std::string& own, pid_t self) {
  sweep_stale_subtrees(fs, own);
  const std::string dir = own + "/" + kSubtreePrefix + std::to_string(self);
  FDO_TRY_STATUS(fs.make_dir(dir));
  const std::string probe = dir + "/probe";
  if (auto st = fs.make_dir(probe); !st) {
    (void)fs.remove_dir(dir);
    return std::move(st).error();
  }
  Status moved = fs.write(probe + "/cgroup.procs", std::to_string(self));
  Status back = moved ? fs.write(own + "/cgroup.procs", std::to_string(self)) : ok();
  (void)fs.remove_dir(probe);
  if (!moved || !back) {
    (void)fs.remove_dir(dir);
    return (!moved ? moved : back).error().context("place a process in a worker cgroup");
  }
  return dir;
}

// Removing a group waits for its processes to leave (briefly: they were
// SIGKILLed and the worker itself has been reaped).
void remove_group(CgroupFs& fs, const std::string& dir) {
  Status st = ok();
  for (int attempt = 0; attempt < 50; ++attempt) {
    st = fs.remove_dir(dir);
    if (st || st.error().code() == Errc::not_found) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  log::warning("cgroup " + dir + " not removed: " + st.error().message());
}

std::set<pid_t> listed_processes(CgroupFs& fs, const std::string& dir) {
  std::set<pid_t> out;
  auto text = fs.read(dir + "/cgroup.procs");
  if (!text) return out;
  for (std::string_view line : lines(*text)) {
    const long pid = std::strtol(std::string(line).c_str(), nullptr, 10);
    if (pid > 0) out.insert(static_cast<pid_t>(pid));
  }
  return out;
}

} // namespace

Status CgroupTree::open_v2(const CgroupLocation& where, pid_t self) {
  CgroupFs& f = *fs_;
  const std::string& own = where.directory;
  if (!f.exists(own + "/cgroup.procs"))
    return make_error(Errc::unavailable, own + " is not a cgroup v2 directory");
  // A container's cgroup root holds its other processes: the workers get a
  // subtree of their own beside them. A delegated service cgroup is ours
  // alone: this process moves into a leaf so that the cgroup may enable
  // controllers for its children (cgroup v2's no-internal-processes rule).
  std::string dir = own;
  if (where.namespace_root) {
    FDO_TRY(dir, make_subtree(f, own, self));
  } else {
    FDO_TRY_STATUS(f.make_dir(own + "/daemon"));
    if (auto st = f.write(own + "/daemon/cgroup.procs", std::to_string(self)); !st)
      return std::move(st).error().context("move the daemon into a leaf of its cgroup");
  }
  dir_ = dir;
  remove_on_exit_ = where.namespace_root;
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
  if (auto enabled = f.read(dir + "/cgroup.subtree_control")) {
    if (has_word(*enabled, "memory")) memory_ = CgroupVersion::v2;
    if (has_word(*enabled, "pids")) pids_ = CgroupVersion::v2;
  }
  return ok();
}

std::string CgroupTree::open_v1(const CgroupV1Location& where, std::string_view controller,
                                pid_t self) {
  auto dir = make_subtree(*fs_, where.directory, self);
  if (!dir) {
    log::warning("cgroup v1 " + std::string(controller) + " hierarchy at " + where.directory +
                 " cannot hold worker groups (" + dir.error().message() + "): no " +
                 std::string(controller) + " limit per worker");
    return {};
  }
  return *dir;
}

Expected<std::shared_ptr<CgroupTree>> CgroupTree::open(const CgroupLocation& where,
                                                       std::unique_ptr<CgroupFs> fs, pid_t self) {
  std::shared_ptr<CgroupTree> tree(new CgroupTree(std::move(fs)));
  const bool v1_offered = where.memory_v1.has_value() || where.pids_v1.has_value();
  if (!where.directory.empty()) {
    Status st = tree->open_v2(where, self);
    if (!st && !v1_offered) return std::move(st).error();
    if (!st)
      log::warning("cgroup v2 at " + where.directory + " cannot hold worker groups (" +
                   st.error().message() + "); trying the cgroup v1 hierarchies");
  } else if (!v1_offered) {
    return make_error(Errc::unavailable, "no cgroup hierarchy was found for this process");
  }
  // Legacy and hybrid hosts keep memory and pids on v1 hierarchies.
  if (tree->memory_ == CgroupVersion::none && where.memory_v1) {
    tree->memory_v1_dir_ = tree->open_v1(*where.memory_v1, "memory", self);
    if (!tree->memory_v1_dir_.empty()) tree->memory_ = CgroupVersion::v1;
  }
  if (tree->pids_ == CgroupVersion::none && where.pids_v1) {
    tree->pids_v1_dir_ = tree->open_v1(*where.pids_v1, "pids", self);
    if (!tree->pids_v1_dir_.empty()) tree->pids_ = CgroupVersion::v1;
  }
  if (tree->dir_.empty() && tree->memory_v1_dir_.empty() && tree->pids_v1_dir_.empty())
    return make_error(Errc::unavailable,
                      "neither cgroup v2 nor a cgroup v1 memory or pids hierarchy can hold "
                      "worker groups (see the warnings above)");
  return tree;
}

CgroupTree::~CgroupTree() {
  // Every worker group is gone (each holds the tree); the subtrees made for
  // this process go too.
  auto remove = [&](const std::string& dir) {
    if (dir.empty()) return;
    if (auto st = fs_->remove_dir(dir); !st)
      log::warning("cgroup " + dir + " not removed: " + st.error().message());
  };
  if (remove_on_exit_) remove(dir_);
  remove(memory_v1_dir_);
  remove(pids_v1_dir_);
}

Expected<std::unique_ptr<Cgroup>> CgroupTree::create(const std::string& name) {
  if (name.empty() || name.find('/') != std::string::npos || name == "." || name == ".." ||
      name == "daemon" || name.starts_with(kSubtreePrefix))
    return make_error(Errc::invalid_argument, "bad cgroup name '" + name + "'");
  CgroupPaths paths;
  std::vector<std::string> made;
  for (auto [parent, out] :
       {std::pair{&dir_, &paths.v2}, std::pair{&memory_v1_dir_, &paths.memory_v1},
        std::pair{&pids_v1_dir_, &paths.pids_v1}}) {
    if (parent->empty()) continue;
    const std::string path = *parent + "/" + name;
    if (auto st = fs_->make_dir(path); !st) {
      for (const std::string& m : made)
        (void)fs_->remove_dir(m);
      return std::move(st).error();
    }
    made.push_back(path);
    *out = path;
  }
  return std::make_unique<Cgroup>(shared_from_this(), std::move(paths));
}

nlohmann::json CgroupTree::describe() const {
  auto how = [](CgroupVersion v, const char* v2_file, const char* v1_file) -> nlohmann::json {
    if (v == CgroupVersion::v2) return v2_file;
    if (v == CgroupVersion::v1) return v1_file;
    return nullptr;
  };
  return {{"directory", dir_.empty() ? nlohmann::json(nullptr) : nlohmann::json(dir_)},
          {"memory", memory_controller()},
          {"pids", pids_controller()},
          {"memory_version", std::string(to_string(memory_))},
          {"pids_version", std::string(to_string(pids_))},
          {"memory_limit", how(memory_, "memory.max, memory.swap.max 0",
                               "memory.limit_in_bytes, memory.memsw.limit_in_bytes")},
          {"pids_limit", how(pids_, "pids.max", "pids.max")},
          {"memory_v1_directory",
           memory_v1_dir_.empty() ? nlohmann::json(nullptr) : nlohmann::json(memory_v1_dir_)},
          {"pids_v1_directory",
           pids_v1_dir_.empty() ? nlohmann::json(nullptr) : nlohmann::json(pids_v1_dir_)}};
}

std::string CgroupTree::summary() const {
  auto one = [](const char* what, CgroupVersion v) {
    return std::string(what) + (v == CgroupVersion::v2   ? " limited by cgroup v2"
                                : v == CgroupVersion::v1 ? " limited by cgroup v1"
                                                         : " not limited (no controller)");
  };
  return (dir_.empty() ? std::string("cgroup v1 only; ") : "under " + dir_ + "; ") +
         one("memory", memory_) + ", " + one("pids", pids_);
}

const std::string& Cgroup::path() const {
  if (!paths_.v2.empty()) return paths_.v2;
  return paths_.memory_v1.empty() ? paths_.pids_v1 : paths_.memory_v1;
}

Cgroup::~Cgroup() {
  if (!tree_) return;
  (void)kill();
  for (const std::string* dir : {&paths_.v2, &paths_.memory_v1, &paths_.pids_v1})
    if (!dir->empty()) remove_group(tree_->fs(), *dir);
}

Status Cgroup::add(pid_t pid) {
  for (const std::string* dir : {&paths_.v2, &paths_.memory_v1, &paths_.pids_v1})
    if (!dir->empty())
      FDO_TRY_STATUS(tree_->fs().write(*dir + "/cgroup.procs", std::to_string(pid)));
  return ok();
}

Status Cgroup::limit(const CgroupLimits& limits) {
  CgroupFs& fs = tree_->fs();
  if (limits.memory_max_bytes != 0) {
    const std::string bytes = std::to_string(limits.memory_max_bytes);
    if (tree_->memory_version() == CgroupVersion::v2) {
      FDO_TRY_STATUS(fs.write(paths_.v2 + "/memory.max", bytes));
      // Swap would let a job hold more than memory.max says.
      if (fs.exists(paths_.v2 + "/memory.swap.max"))
        FDO_TRY_STATUS(fs.write(paths_.v2 + "/memory.swap.max", "0"));
    } else if (tree_->memory_version() == CgroupVersion::v1) {
      FDO_TRY_STATUS(fs.write(paths_.memory_v1 + "/memory.limit_in_bytes", bytes));
      // memory + swap at the same bound: no swap (present with swap accounting;
      // it may not be below memory.limit_in_bytes, so it is written second).
      if (fs.exists(paths_.memory_v1 + "/memory.memsw.limit_in_bytes"))
        FDO_TRY_STATUS(fs.write(paths_.memory_v1 + "/memory.memsw.limit_in_bytes", bytes));
    }
  }
  if (limits.pids_max != 0 && tree_->pids_controller()) {
    const std::string& dir =
        tree_->pids_version() == CgroupVersion::v2 ? paths_.v2 : paths_.pids_v1;
    FDO_TRY_STATUS(fs.write(dir + "/pids.max", std::to_string(limits.pids_max)));
  }
  return ok();
}

std::uint64_t Cgroup::memory_current() const {
  auto text = tree_->memory_version() == CgroupVersion::v2
                  ? tree_->fs().read(paths_.v2 + "/memory.current")
              : tree_->memory_version() == CgroupVersion::v1
                  ? tree_->fs().read(paths_.memory_v1 + "/memory.usage_in_bytes")
                  : Expected<std::string>(make_error(Errc::unavailable, "no memory controller"));
  return text ? std::strtoull(text->c_str(), nullptr, 10) : 0;
}

std::uint64_t Cgroup::oom_kills() const {
  auto text = tree_->memory_version() == CgroupVersion::v2
                  ? tree_->fs().read(paths_.v2 + "/memory.events")
              : tree_->memory_version() == CgroupVersion::v1
                  ? tree_->fs().read(paths_.memory_v1 + "/memory.oom_control")
                  : Expected<std::string>(make_error(Errc::unavailable, "no memory controller"));
  return text ? keyed_value(*text, "oom_kill") : 0;
}

Status Cgroup::kill() {
  CgroupFs& fs = tree_->fs();
  if (!paths_.v2.empty() && fs.exists(paths_.v2 + "/cgroup.kill"))
    return fs.write(paths_.v2 + "/cgroup.kill", "1");
  // No cgroup.kill (cgroup v1, or v2 before Linux 5.14): signal what the
  // group lists until it lists nothing. Workers cannot fork (seccomp) and the
  // pids limit caps the rest, so this ends; a process that exits in between
  // is gone anyway (ESRCH).
  for (int round = 0; round < 200; ++round) {
    std::set<pid_t> left;
    for (const std::string* dir : {&paths_.v2, &paths_.memory_v1, &paths_.pids_v1})
      if (!dir->empty()) left.merge(listed_processes(fs, *dir));
    if (left.empty()) return ok();
    for (pid_t pid : left)
      (void)::kill(pid, SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return make_error(Errc::timeout, "processes remain in cgroup " + path() + " after SIGKILL");
}

} // namespace fdo::daemon
