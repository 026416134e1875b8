// cgroup resource control for worker processes (docs/security.md).
//
// fdod takes over the cgroup it was started in when that cgroup is delegated
// to it (systemd's Delegate=yes, or the cgroup root of a container) and gives
// every worker a group of its own. A bound worker's group gets a memory limit
// (what the worker holds at bind + the job's memory limit, no swap) and a
// process-count limit: limits the job cannot raise, which count what rlimits
// do not (resident pages, page cache, threads). Retiring a worker kills
// everything in its group and removes the group.
//
// cgroup v2 (unified): fdod moves itself into a leaf `daemon` (only leaves
// hold processes once controllers are enabled for children), enables the
// memory and pids controllers the hierarchy offers, and kills a group with
// cgroup.kill. cgroup v1 (legacy and hybrid hosts, where the memory and pids
// controllers stay on v1 hierarchies): each controller fdod's v2 tree lacks
// is taken from its v1 hierarchy, in a subtree `fdod-workers.<pid>` under
// fdod's own v1 group (memory.limit_in_bytes + memory.memsw.limit_in_bytes,
// pids.max); a host with no cgroup2 mount at all uses v1 alone, and a group
// is killed by signalling every process it lists until it is empty.
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

// This process's group in a cgroup v1 hierarchy.
struct CgroupV1Location {
  std::string directory; // e.g. /sys/fs/cgroup/memory/system.slice/fdod.service
  bool root = false;     // the hierarchy's root as this process sees it
};

// Where this process's cgroups are: the cgroup2 mount point (from
// /proc/self/mountinfo) joined with the "0::" path of /proc/self/cgroup, and
// the same for the v1 hierarchies fdod can use (memory, pids, and
// name=systemd, which carries systemd's delegation mark on legacy hosts).
struct CgroupLocation {
  std::string directory;       // v2; e.g. /sys/fs/cgroup/system.slice/fdod.service ("": none)
  bool namespace_root = false; // "0::/": a container's own cgroup root
  std::optional<CgroupV1Location> memory_v1, pids_v1, systemd_v1;
};
// An error only when this process is in no cgroup hierarchy fdod can use.
Expected<CgroupLocation> own_cgroup();
// Parsers for the two /proc files (tested on their own).
Expected<std::string> cgroup2_mount_from_mountinfo(std::string_view mountinfo);
Expected<std::string> cgroup2_path_from_proc(std::string_view proc_self_cgroup);
// The v1 hierarchy holding `controller` ("memory", "pids", "name=systemd"):
// its mount point joined with this process's path in it (a mount of a
// subtree is joined with the path below that subtree).
Expected<CgroupV1Location> cgroup_v1_location(std::string_view mountinfo,
                                              std::string_view proc_self_cgroup,
                                              std::string_view controller);

// Whether systemd delegated `directory` (Delegate=yes marks it with the
// trusted.delegate or user.delegate extended attribute).
bool cgroup_delegated(const std::string& directory);
// Whether sandbox_cgroup = auto may take over the cgroups at `where`: a
// container's own root, or a cgroup systemd delegated to fdod.
bool cgroup_is_ours(const CgroupLocation& where);

// How a limit is enforced: not at all, by a v2 controller, or a v1 one.
enum class CgroupVersion { none, v2, v1 };
std::string_view to_string(CgroupVersion v);

struct CgroupLimits {
  std::uint64_t memory_max_bytes = 0; // 0: no memory.max
  std::uint64_t pids_max = 0;         // 0: no pids.max
};

class Cgroup;

class CgroupTree : public std::enable_shared_from_this<CgroupTree> {
public:
  // Takes over `where` for this process (see the file comment). `self` is the
  // pid moved into the `daemon` leaf (this process; tests pass another). A v1
  // controller that cannot be used (no hierarchy, no right to make a group or
  // move a process into it) is logged and left off; an error only when no
  // hierarchy at all can hold a worker.
  static Expected<std::shared_ptr<CgroupTree>> open(const CgroupLocation& where,
                                                    std::unique_ptr<CgroupFs> fs, pid_t self);
  // A new group `name` under the tree (an existing one of that name is
  // reused: a worker pid is unique while the worker lives).
  Expected<std::unique_ptr<Cgroup>> create(const std::string& name);

  bool memory_controller() const { return memory_ != CgroupVersion::none; }
  bool pids_controller() const { return pids_ != CgroupVersion::none; }
  CgroupVersion memory_version() const { return memory_; }
  CgroupVersion pids_version() const { return pids_; }
  // The v2 subtree workers' groups go in ("" on a host without cgroup2).
  const std::string& directory() const { return dir_; }
  // The v1 subtrees ("" where that controller is not taken from v1).
  const std::string& memory_v1_directory() const { return memory_v1_dir_; }
  const std::string& pids_v1_directory() const { return pids_v1_dir_; }
  // For capabilities and the start-up log: which limits are enforced and how.
  nlohmann::json describe() const;
  std::string summary() const;
  CgroupFs& fs() { return *fs_; }
  ~CgroupTree();
  CgroupTree(const CgroupTree&) = delete;
  CgroupTree& operator=(const CgroupTree&) = delete;

private:
  explicit CgroupTree(std::unique_ptr<CgroupFs> fs) : fs_(std::move(fs)) {}
  Status open_v2(const CgroupLocation& where, pid_t self);
  // The v1 subtree for one controller ("" and a logged reason when unusable).
  std::string open_v1(const CgroupV1Location& where, std::string_view controller, pid_t self);
  std::string dir_;
  std::string memory_v1_dir_, pids_v1_dir_;
  std::unique_ptr<CgroupFs> fs_;
  CgroupVersion memory_ = CgroupVersion::none, pids_ = CgroupVersion::none;
  bool remove_on_exit_ = false; // the v2 subtree was made for this process
};

// The directories of one worker's group, one per hierarchy it is in.
struct CgroupPaths {
  std::string v2;        // "" on a host without cgroup2
  std::string memory_v1; // "" unless memory is limited through v1
  std::string pids_v1;   // "" unless pids are limited through v1
};

// One worker's group. The destructor kills what is left in it and removes it.
class Cgroup {
public:
  Cgroup(std::shared_ptr<CgroupTree> tree, CgroupPaths paths)
      : tree_(std::move(tree)), paths_(std::move(paths)) {}
  ~Cgroup();
  Cgroup(const Cgroup&) = delete;
  Cgroup& operator=(const Cgroup&) = delete;

  // Places `pid` in the group in every hierarchy.
  Status add(pid_t pid);
  // Writes the limits the tree's controllers can hold (the others are skipped).
  Status limit(const CgroupLimits& limits);
  // memory.current / memory.usage_in_bytes (0 without the memory controller).
  std::uint64_t memory_current() const;
  // oom_kill of memory.events / memory.oom_control: jobs the kernel killed at
  // the group's memory limit.
  std::uint64_t oom_kills() const;
  // SIGKILL to every process in the group: cgroup.kill (Linux 5.14+), else
  // (cgroup v1 only) each process the group lists, until none is left.
  Status kill();
  // The v2 directory, else the first v1 one.
  const std::string& path() const;
  const CgroupPaths& paths() const { return paths_; }

private:
  std::shared_ptr<CgroupTree> tree_;
  CgroupPaths paths_;
};

} // namespace fdo::daemon
