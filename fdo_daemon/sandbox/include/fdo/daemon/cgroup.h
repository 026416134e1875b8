// cgroup v2 resource control for worker processes (docs/security.md).
//
// fdod takes over the cgroup it was started in when that cgroup is delegated
// to it (systemd's Delegate=yes, or the cgroup root of a container): it moves
// itself into a leaf `daemon` (cgroup v2 lets only leaves hold processes once
// controllers are enabled for children), enables the memory and pids
// controllers that the hierarchy offers, and gives every worker a group of
// its own. A bound worker's group gets memory.max (what the worker holds at
// bind + the job's memory limit), memory.swap.max 0 and pids.max: limits the
// job cannot raise, which count what rlimits do not (resident pages, page
// cache, threads). Retiring a worker writes cgroup.kill, so nothing it
// started outlives it, and removes the group.
#pragma once

#include "fdo/util/expected.h"

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <vector>

namespace fdo::daemon {

// The file operations cgroups need, behind a seam: tests check what is
// written without a delegated hierarchy (and the real one where there is).
class CgroupFs {
public:
  virtual ~CgroupFs() = default;
  virtual Expected<std::string> read(const std::string& path) = 0;
  // Writes `value` to an existing control file (no O_CREAT, as cgroupfs wants).
  virtual Status write(const std::string& path, std::string_view value) = 0;
  virtual Status make_dir(const std::string& path) = 0; // an existing one is fine
  virtual Status remove_dir(const std::string& path) = 0;
  virtual bool exists(const std::string& path) = 0;
  virtual std::vector<std::string> subdirectories(const std::string& path) = 0;
};
std::unique_ptr<CgroupFs> system_cgroup_fs();

// Where this process's cgroup v2 directory is: the cgroup2 mount point (from
// /proc/self/mountinfo) joined with the "0::" path of /proc/self/cgroup.
struct CgroupLocation {
  std::string directory;       // e.g. /sys/fs/cgroup/system.slice/fdod.service
  bool namespace_root = false; // "0::/": a container's own cgroup root
};
Expected<CgroupLocation> own_cgroup();
// Parsers for the two /proc files (tested on their own).
Expected<std::string> cgroup2_mount_from_mountinfo(std::string_view mountinfo);
Expected<std::string> cgroup2_path_from_proc(std::string_view proc_self_cgroup);

// Whether systemd delegated `directory` (Delegate=yes marks it with the
// trusted.delegate or user.delegate extended attribute).
bool cgroup_delegated(const std::string& directory);

struct CgroupLimits {
  std::uint64_t memory_max_bytes = 0; // 0: no memory.max
  std::uint64_t pids_max = 0;         // 0: no pids.max
};

class Cgroup;

class CgroupTree : public std::enable_shared_from_this<CgroupTree> {
public:
  // Takes over `where` for this process (see the file comment). `self` is the
  // pid moved into the `daemon` leaf (this process; tests pass another).
  static Expected<std::shared_ptr<CgroupTree>> open(const CgroupLocation& where,
                                                    std::unique_ptr<CgroupFs> fs, pid_t self);
  // A new group `name` under the tree (an existing one of that name is
  // reused: a worker pid is unique while the worker lives).
  Expected<std::unique_ptr<Cgroup>> create(const std::string& name);

  bool memory_controller() const { return memory_; }
  bool pids_controller() const { return pids_; }
  const std::string& directory() const { return dir_; }
  nlohmann::json describe() const; // for capabilities and the start-up log
  CgroupFs& fs() { return *fs_; }
  ~CgroupTree();
  CgroupTree(const CgroupTree&) = delete;
  CgroupTree& operator=(const CgroupTree&) = delete;

private:
  CgroupTree(std::string dir, std::unique_ptr<CgroupFs> fs)
      : dir_(std::move(dir)), fs_(std::move(fs)) {}
  std::string dir_;
  std::unique_ptr<CgroupFs> fs_;
  bool memory_ = false, pids_ = false;
  bool remove_on_exit_ = false; // the subtree was made for this process
};

// One worker's group. The destructor kills what is left in it and removes it.
class Cgroup {
public:
  Cgroup(std::shared_ptr<CgroupTree> tree, std::string path)
      : tree_(std::move(tree)), path_(std::move(path)) {}
  ~Cgroup();
  Cgroup(const Cgroup&) = delete;
  Cgroup& operator=(const Cgroup&) = delete;

  Status add(pid_t pid);
  // Writes the limits the tree's controllers can hold (the others are skipped).
  Status limit(const CgroupLimits& limits);
  // memory.current (0 without the memory controller).
  std::uint64_t memory_current() const;
  // memory.events oom_kill: jobs the kernel killed at memory.max.
  std::uint64_t oom_kills() const;
  // cgroup.kill: SIGKILL to every process in the group (Linux 5.14+).
  Status kill();
  const std::string& path() const { return path_; }

private:
  std::shared_ptr<CgroupTree> tree_;
  std::string path_;
};

} // namespace fdo::daemon
