// cgroup.h: the /proc parsers, the tree and worker groups over a fake cgroupfs
// (what is written where), and the same operations on the host's real cgroup
// v2 hierarchy where this process may create groups in it.
#include "fdo/daemon/cgroup.h"
#include "support/skip.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <csignal>
#include <fstream>
#include <map>
#include <set>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

using namespace fdo;
using namespace fdo::daemon;

namespace {

// A cgroupfs in memory: directories get the control files a real one has;
// writes are recorded in order.
struct FakeCgroupFs final : CgroupFs {
  struct State {
    std::set<std::string> dirs;
    std::map<std::string, std::string> files;
    std::vector<std::pair<std::string, std::string>> writes;
    std::string offered = "cpu memory pids";
    bool refuse_procs = false;
  };
  std::shared_ptr<State> st;
  explicit FakeCgroupFs(std::shared_ptr<State> s) : st(std::move(s)) {}

  void populate(const std::string& dir) {
    st->dirs.insert(dir);
    for (const char* f : {"cgroup.procs", "cgroup.kill", "cgroup.subtree_control", "memory.max",
                          "memory.swap.max", "pids.max", "memory.current", "memory.events"})
      st->files.emplace(dir + "/" + f, "");
    st->files[dir + "/cgroup.controllers"] = st->offered;
  }
  Expected<std::string> read(const std::string& path) override {
    auto it = st->files.find(path);
    if (it == st->files.end()) return make_error(Errc::not_found, path);
    return it->second;
  }
  Status write(const std::string& path, std::string_view value) override {
    if (!st->files.count(path)) return make_error(Errc::not_found, "no file " + path);
    if (st->refuse_procs && path.ends_with("/cgroup.procs"))
      return make_error(Errc::io, "write " + path + ": Device or resource busy");
    st->writes.emplace_back(path, std::string(value));
    if (path.ends_with("/cgroup.subtree_control")) {
      std::string enabled;
      for (const char* c : {"memory", "pids"})
        if (std::string(value).find(std::string("+") + c) != std::string::npos &&
            st->offered.find(c) != std::string::npos)
          enabled += std::string(enabled.empty() ? "" : " ") + c;
      st->files[path] = enabled;
    } else {
      st->files[path] = std::string(value);
    }
    return ok();
  }
  Status make_dir(const std::string& path) override {
    if (!st->dirs.count(path)) populate(path);
    return ok();
  }
  Status remove_dir(const std::string& path) override {
    if (!st->dirs.erase(path)) return make_error(Errc::not_found, path);
    for (auto it = st->files.begin(); it != st->files.end();)
      it = it->first.starts_with(path + "/") ? st->files.erase(it) : std::next(it);
    return ok();
  }
  bool exists(const std::string& path) override {
    return st->dirs.count(path) || st->files.count(path);
  }
  std::vector<std::string> subdirectories(const std::string& path) override {
    std::vector<std::string> out;
    for (const auto& d : st->dirs)
      if (d.starts_with(path + "/") && d.find('/', path.size() + 1) == std::string::npos)
        out.push_back(d.substr(path.size() + 1));
    return out;
  }
};

std::string written(const FakeCgroupFs::State& st, const std::string& path) {
  std::string last = "(never written)";
  for (const auto& [p, v] : st.writes)
    if (p == path) last = v;
  return last;
}

} // namespace

TEST_CASE("cgroup: the v2 mount point and path come from /proc", "[sandbox][cgroup]") {
  const std::string mountinfo =
      "25 30 0:22 / /sys rw,nosuid shared:7 - sysfs sysfs rw\n"
      "33 25 0:28 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
      "35 25 0:30 / /sys/fs/cgroup/my\\040tree rw,nosuid,nodev shared:9 - cgroup2 cgroup2 rw\n";
  auto mount = cgroup2_mount_from_mountinfo(mountinfo);
  REQUIRE(mount);
  CHECK(*mount == "/sys/fs/cgroup/my tree");
  CHECK_FALSE(cgroup2_mount_from_mountinfo("33 25 0:28 / /x rw - cgroup cgroup rw,memory\n"));

  auto path = cgroup2_path_from_proc("4:memory:/a\n1:cpu:/\n0::/system.slice/fdod.service\n");
  REQUIRE(path);
  CHECK(*path == "/system.slice/fdod.service");
  auto none = cgroup2_path_from_proc("4:memory:/a\n");
  REQUIRE_FALSE(none);
  CHECK(none.error().code() == Errc::not_found);
}

TEST_CASE("cgroup: a delegated service cgroup - the daemon moves to a leaf, workers get limits",
          "[sandbox][cgroup]") {
  auto st = std::make_shared<FakeCgroupFs::State>();
  auto fs = std::make_unique<FakeCgroupFs>(st);
  const std::string own = "/cg/system.slice/fdod.service";
  fs->populate(own);
  auto tree = CgroupTree::open({own, false}, std::move(fs), 4242);
  REQUIRE(tree);
  CHECK(written(*st, own + "/daemon/cgroup.procs") == "4242");
  CHECK(written(*st, own + "/cgroup.subtree_control") == "+memory +pids");
  CHECK((*tree)->memory_controller());
  CHECK((*tree)->pids_controller());
  CHECK((*tree)->directory() == own);

  {
    auto group = (*tree)->create("w77");
    REQUIRE(group);
    REQUIRE((*group)->add(77));
    CHECK(written(*st, own + "/w77/cgroup.procs") == "77");
    st->files[own + "/w77/memory.current"] = "20000000\n";
    CHECK((*group)->memory_current() == 20000000);
    REQUIRE((*group)->limit({20000000 + (512u << 20), 64}));
    CHECK(written(*st, own + "/w77/memory.max") == std::to_string(20000000 + (512u << 20)));
    CHECK(written(*st, own + "/w77/memory.swap.max") == "0");
    CHECK(written(*st, own + "/w77/pids.max") == "64");
    st->files[own + "/w77/memory.events"] = "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n";
    CHECK((*group)->oom_kills() == 1);
  }
  // Gone: everything in it was killed, then the directory removed.
  CHECK(written(*st, own + "/w77/cgroup.kill") == "1");
  CHECK_FALSE(st->dirs.count(own + "/w77"));

  CHECK_FALSE((*tree)->create("../escape"));
  CHECK_FALSE((*tree)->create("daemon"));
}

TEST_CASE("cgroup: without the memory and pids controllers the limits are skipped",
          "[sandbox][cgroup]") {
  auto st = std::make_shared<FakeCgroupFs::State>();
  st->offered = "cpu hugetlb";
  auto fs = std::make_unique<FakeCgroupFs>(st);
  fs->populate("/cg/svc");
  auto tree = CgroupTree::open({"/cg/svc", false}, std::move(fs), 1);
  REQUIRE(tree);
  CHECK_FALSE((*tree)->memory_controller());
  CHECK_FALSE((*tree)->pids_controller());
  auto group = (*tree)->create("w5");
  REQUIRE(group);
  REQUIRE((*group)->limit({1u << 30, 64}));
  CHECK(written(*st, "/cg/svc/w5/memory.max") == "(never written)");
  CHECK(written(*st, "/cg/svc/w5/pids.max") == "(never written)");
  CHECK((*group)->oom_kills() == 0);
}

TEST_CASE("cgroup: a container's root - a subtree beside its processes, probed, removed at the end",
          "[sandbox][cgroup]") {
  auto st = std::make_shared<FakeCgroupFs::State>();
  auto fs = std::make_unique<FakeCgroupFs>(st);
  fs->populate("/cg");
  // A subtree left by a daemon that was SIGKILLed (no such pid) is swept.
  fs->populate("/cg/fdod-workers.999999999");
  fs->populate("/cg/fdod-workers.999999999/w12");
  {
    auto tree = CgroupTree::open({"/cg", true}, std::move(fs), 4242);
    REQUIRE(tree);
    CHECK((*tree)->directory() == "/cg/fdod-workers.4242");
    CHECK_FALSE(st->dirs.count("/cg/fdod-workers.999999999"));
    // The probe moved this process in and straight back; the daemon stays put.
    CHECK(written(*st, "/cg/fdod-workers.4242/probe/cgroup.procs") == "4242");
    CHECK(written(*st, "/cg/cgroup.procs") == "4242");
    CHECK_FALSE(st->dirs.count("/cg/fdod-workers.4242/probe"));
    CHECK_FALSE(st->dirs.count("/cg/daemon"));
  }
  CHECK_FALSE(st->dirs.count("/cg/fdod-workers.4242"));
}

TEST_CASE("cgroup: a hierarchy that refuses to move processes is an error at open",
          "[sandbox][cgroup]") {
  auto st = std::make_shared<FakeCgroupFs::State>();
  st->refuse_procs = true;
  auto fs = std::make_unique<FakeCgroupFs>(st);
  fs->populate("/cg");
  auto tree = CgroupTree::open({"/cg", true}, std::move(fs), 4242);
  REQUIRE_FALSE(tree);
  CHECK(tree.error().message().find("place a process in a worker cgroup") != std::string::npos);
  CHECK_FALSE(st->dirs.count("/cg/fdod-workers.4242")); // nothing left behind

  auto missing = CgroupTree::open({"/nowhere", false}, std::make_unique<FakeCgroupFs>(st), 1);
  REQUIRE_FALSE(missing);
  CHECK(missing.error().message().find("not a cgroup v2 directory") != std::string::npos);
}

// The real hierarchy: a tree in a fresh child of this process's own cgroup,
// a sleeping process as "the daemon" and another as the worker; retiring the
// group kills the worker and removes everything.
TEST_CASE("cgroup: on the host's cgroup v2 hierarchy a worker group holds and kills its process",
          "[sandbox][cgroup]") {
  auto where = own_cgroup();
  if (!where) {
    FDO_SKIP("skipped: " + where.error().message());
  }
  const std::string base = where->directory + "/fdo-cgroup-test." + std::to_string(::getpid());
  if (::mkdir(base.c_str(), 0755) != 0) {
    FDO_SKIP("skipped: cannot create a cgroup under " + where->directory + " (" +
             std::strerror(errno) + "): needs root or a delegated cgroup");
  }
  if (::access((base + "/cgroup.kill").c_str(), F_OK) != 0) {
    ::rmdir(base.c_str());
    FDO_SKIP("skipped: this kernel has no cgroup.kill (Linux 5.14+)");
  }
  auto sleeper = [] {
    pid_t p = ::fork();
    if (p == 0) {
      ::pause();
      ::_exit(0);
    }
    return p;
  };
  const pid_t daemon_stand_in = sleeper();
  const pid_t worker = sleeper();
  auto cgroup_of = [](pid_t p) {
    std::ifstream f("/proc/" + std::to_string(p) + "/cgroup");
    std::string line, v2;
    while (std::getline(f, line))
      if (line.starts_with("0::")) v2 = line.substr(3);
    return v2;
  };
  {
    auto tree = CgroupTree::open({base, false}, system_cgroup_fs(), daemon_stand_in);
    REQUIRE(tree);
    CHECK(cgroup_of(daemon_stand_in)
              .ends_with("/fdo-cgroup-test." + std::to_string(::getpid()) + "/daemon"));
    auto group = (*tree)->create("w" + std::to_string(worker));
    REQUIRE(group);
    REQUIRE((*group)->add(worker));
    CHECK(cgroup_of(worker).ends_with("/w" + std::to_string(worker)));
    REQUIRE((*group)->limit({256u << 20, 16})); // written where the controllers are enabled
  }
  // The group's end killed the worker.
  int status = 0;
  REQUIRE(::waitpid(worker, &status, 0) == worker);
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGKILL);
  CHECK(::access((base + "/w" + std::to_string(worker)).c_str(), F_OK) != 0);

  ::kill(daemon_stand_in, SIGKILL);
  ::waitpid(daemon_stand_in, &status, 0);
  for (int i = 0; i < 100 && ::rmdir((base + "/daemon").c_str()) != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK(::rmdir(base.c_str()) == 0);
}
