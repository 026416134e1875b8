// cgroup.h: the /proc parsers, the tree and worker groups over a fake cgroupfs
// (what is written where, on v2, hybrid and v1-only hosts), and the same
// operations on the host's real cgroup v2 and v1 hierarchies where this
// process may create groups in them.
#include "fdo/daemon/cgroup.h"
#include "support/skip.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <sys/mman.h>
#include <sys/prctl.h>
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
    bool refuse_v1_procs = false;
  };
  std::shared_ptr<State> st;
  explicit FakeCgroupFs(std::shared_ptr<State> s) : st(std::move(s)) {}

  // Directories under /v1/ are cgroup v1 groups (memory and pids files alike).
  void populate(const std::string& dir) {
    st->dirs.insert(dir);
    if (dir.starts_with("/v1/")) {
      for (const char* f :
           {"cgroup.procs", "tasks", "memory.limit_in_bytes", "memory.memsw.limit_in_bytes",
            "memory.usage_in_bytes", "memory.oom_control", "pids.max", "pids.current"})
        st->files.emplace(dir + "/" + f, "");
      return;
    }
    for (const char* f : {"cgroup.procs", "cgroup.kill", "cgroup.subtree_control", "memory.max",
                          "memory.swap.max", "pids.max", "memory.current", "memory.events"})
      st->files.emplace(dir + "/" + f, "");
    st->files[dir + "/cgroup.controllers"] = st->offered;
  }
  // cgroup.procs lists what a test put there, less processes that have ended.
  Expected<std::string> read(const std::string& path) override {
    auto it = st->files.find(path);
    if (it == st->files.end()) return make_error(Errc::not_found, path);
    if (!path.ends_with("/cgroup.procs")) return it->second;
    std::string alive;
    std::istringstream in(it->second);
    for (long pid; in >> pid;)
      if (running(static_cast<pid_t>(pid))) alive += std::to_string(pid) + "\n";
    return alive;
  }
  static bool running(pid_t pid) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    if (!std::getline(stat, line)) return false;
    auto close_paren = line.rfind(')');
    return close_paren != std::string::npos && close_paren + 2 < line.size() &&
           line[close_paren + 2] != 'Z';
  }
  Status write(const std::string& path, std::string_view value) override {
    if (!st->files.count(path)) return make_error(Errc::not_found, "no file " + path);
    if ((st->refuse_procs || (st->refuse_v1_procs && path.starts_with("/v1/"))) &&
        path.ends_with("/cgroup.procs"))
      return make_error(Errc::io, "write " + path + ": Device or resource busy");
    st->writes.emplace_back(path, std::string(value));
    if (path.ends_with("/cgroup.subtree_control")) {
      std::string enabled;
      for (const char* c : {"memory", "pids"})
        if (std::string(value).find(std::string("+") + c) != std::string::npos &&
            st->offered.find(c) != std::string::npos)
          enabled += std::string(enabled.empty() ? "" : " ") + c;
      st->files[path] = enabled;
    } else if (path.ends_with("/cgroup.procs")) {
      // Membership is not kept: only the write is recorded.
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

CgroupLocation v2_at(std::string directory, bool namespace_root) {
  CgroupLocation where;
  where.directory = std::move(directory);
  where.namespace_root = namespace_root;
  return where;
}

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
  auto tree = CgroupTree::open(v2_at(own, false), std::move(fs), 4242);
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
  auto tree = CgroupTree::open(v2_at("/cg/svc", false), std::move(fs), 1);
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
    auto tree = CgroupTree::open(v2_at("/cg", true), std::move(fs), 4242);
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
  auto tree = CgroupTree::open(v2_at("/cg", true), std::move(fs), 4242);
  REQUIRE_FALSE(tree);
  CHECK(tree.error().message().find("place a process in a worker cgroup") != std::string::npos);
  CHECK_FALSE(st->dirs.count("/cg/fdod-workers.4242")); // nothing left behind

  auto missing = CgroupTree::open(v2_at("/nowhere", false), std::make_unique<FakeCgroupFs>(st), 1);
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
    auto tree = CgroupTree::open(v2_at(base, false), system_cgroup_fs(), daemon_stand_in);
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

TEST_CASE("cgroup: v1 hierarchies come from /proc, joined below a mounted subtree",
          "[sandbox][cgroup]") {
  // A hybrid host as this project's machines have it: every controller on v1,
  // name=systemd beside them and an empty cgroup2 at unified/.
  const std::string mountinfo =
      "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
      "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct\n"
      "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
      "39 31 0:36 /docker/abc /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n"
      "40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd\n"
      "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
  const std::string proc = "9:name=systemd:/system.slice/fdod.service\n"
                           "8:pids:/docker/abc\n"
                           "4:memory:/process_api/ac3a\n"
                           "1:cpu,cpuacct:/\n"
                           "0::/system.slice/fdod.service\n";
  auto memory = cgroup_v1_location(mountinfo, proc, "memory");
  REQUIRE(memory);
  CHECK(memory->directory == "/sys/fs/cgroup/memory/process_api/ac3a");
  CHECK_FALSE(memory->root);
  // The pids hierarchy is mounted from the process's own group: its root.
  auto pids = cgroup_v1_location(mountinfo, proc, "pids");
  REQUIRE(pids);
  CHECK(pids->directory == "/sys/fs/cgroup/pids");
  CHECK(pids->root);
  auto cpu = cgroup_v1_location(mountinfo, proc, "cpuacct");
  REQUIRE(cpu);
  CHECK(cpu->directory == "/sys/fs/cgroup/cpu,cpuacct");
  auto systemd = cgroup_v1_location(mountinfo, proc, "name=systemd");
  REQUIRE(systemd);
  CHECK(systemd->directory == "/sys/fs/cgroup/systemd/system.slice/fdod.service");
  // Not a v1 controller of this process, or outside the mounted subtree.
  CHECK_FALSE(cgroup_v1_location(mountinfo, proc, "blkio"));
  CHECK_FALSE(cgroup_v1_location(mountinfo, "8:pids:/other\n", "pids"));
  CHECK_FALSE(cgroup_v1_location(mountinfo, "8:pids:/docker/abcdef\n", "pids"));
  // cgroup2's own line ("0::") names no controller.
  CHECK_FALSE(cgroup_v1_location(mountinfo, "0::/\n", "memory"));
}

TEST_CASE("cgroup: a hybrid host - memory and pids limits through the v1 hierarchies",
          "[sandbox][cgroup]") {
  auto st = std::make_shared<FakeCgroupFs::State>();
  st->offered = ""; // an empty cgroup2 beside the v1 controllers
  auto fs = std::make_unique<FakeCgroupFs>(st);
  fs->populate("/cg");
  fs->populate("/v1/memory/box");
  fs->populate("/v1/pids");
  fs->populate("/v1/pids/fdod-workers.999999999"); // left by a killed daemon
  CgroupLocation where = v2_at("/cg", true);
  where.memory_v1 = CgroupV1Location{"/v1/memory/box", false};
  where.pids_v1 = CgroupV1Location{"/v1/pids", true};
  {
    auto tree = CgroupTree::open(where, std::move(fs), 4242);
    REQUIRE(tree);
    CHECK((*tree)->directory() == "/cg/fdod-workers.4242");
    CHECK((*tree)->memory_version() == CgroupVersion::v1);
    CHECK((*tree)->pids_version() == CgroupVersion::v1);
    CHECK((*tree)->memory_v1_directory() == "/v1/memory/box/fdod-workers.4242");
    CHECK((*tree)->pids_v1_directory() == "/v1/pids/fdod-workers.4242");
    CHECK_FALSE(st->dirs.count("/v1/pids/fdod-workers.999999999"));
    // Each subtree was probed: this process in and straight back.
    CHECK(written(*st, "/v1/memory/box/fdod-workers.4242/probe/cgroup.procs") == "4242");
    CHECK(written(*st, "/v1/memory/box/cgroup.procs") == "4242");
    CHECK_FALSE(st->dirs.count("/v1/memory/box/fdod-workers.4242/probe"));
    auto d = (*tree)->describe();
    CHECK(d["memory"] == true);
    CHECK(d["memory_version"] == "v1");
    CHECK(d["pids_version"] == "v1");
    CHECK(d["memory_limit"] == "memory.limit_in_bytes, memory.memsw.limit_in_bytes");
    CHECK((*tree)->summary().find("memory limited by cgroup v1") != std::string::npos);
    {
      auto group = (*tree)->create("w77");
      REQUIRE(group);
      REQUIRE((*group)->add(77));
      CHECK(written(*st, "/cg/fdod-workers.4242/w77/cgroup.procs") == "77");
      CHECK(written(*st, "/v1/memory/box/fdod-workers.4242/w77/cgroup.procs") == "77");
      CHECK(written(*st, "/v1/pids/fdod-workers.4242/w77/cgroup.procs") == "77");
      st->files["/v1/memory/box/fdod-workers.4242/w77/memory.usage_in_bytes"] = "30000000\n";
      CHECK((*group)->memory_current() == 30000000);
      REQUIRE((*group)->limit({30000000 + (256u << 20), 64}));
      const std::string limit = std::to_string(30000000 + (256u << 20));
      CHECK(written(*st, "/v1/memory/box/fdod-workers.4242/w77/memory.limit_in_bytes") == limit);
      CHECK(written(*st, "/v1/memory/box/fdod-workers.4242/w77/memory.memsw.limit_in_bytes") ==
            limit);
      CHECK(written(*st, "/v1/pids/fdod-workers.4242/w77/pids.max") == "64");
      CHECK(written(*st, "/cg/fdod-workers.4242/w77/memory.max") == "(never written)");
      // Written in that order: memsw may never be below limit_in_bytes.
      std::vector<std::string> order;
      for (const auto& [p, v] : st->writes)
        if (p.find("/memory.") != std::string::npos) order.push_back(p.substr(p.rfind('/') + 1));
      CHECK(order ==
            std::vector<std::string>{"memory.limit_in_bytes", "memory.memsw.limit_in_bytes"});
      st->files["/v1/memory/box/fdod-workers.4242/w77/memory.oom_control"] =
          "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n";
      CHECK((*group)->oom_kills() == 2);
    }
    // cgroup.kill on the v2 group; every hierarchy's directory removed.
    CHECK(written(*st, "/cg/fdod-workers.4242/w77/cgroup.kill") == "1");
    CHECK_FALSE(st->dirs.count("/cg/fdod-workers.4242/w77"));
    CHECK_FALSE(st->dirs.count("/v1/memory/box/fdod-workers.4242/w77"));
    CHECK_FALSE(st->dirs.count("/v1/pids/fdod-workers.4242/w77"));
  }
  CHECK_FALSE(st->dirs.count("/v1/memory/box/fdod-workers.4242"));
  CHECK_FALSE(st->dirs.count("/v1/pids/fdod-workers.4242"));
  CHECK_FALSE(st->dirs.count("/cg/fdod-workers.4242"));
}

TEST_CASE("cgroup: a v1-only host - groups killed by signalling what they list",
          "[sandbox][cgroup]") {
  auto st = std::make_shared<FakeCgroupFs::State>();
  auto fs = std::make_unique<FakeCgroupFs>(st);
  fs->populate("/v1/memory");
  fs->populate("/v1/pids");
  CgroupLocation where; // no cgroup2 mounted
  where.memory_v1 = CgroupV1Location{"/v1/memory", true};
  where.pids_v1 = CgroupV1Location{"/v1/pids", true};
  auto tree = CgroupTree::open(where, std::move(fs), 4242);
  REQUIRE(tree);
  CHECK((*tree)->directory().empty());
  CHECK((*tree)->describe()["directory"].is_null());
  auto group = (*tree)->create("w5");
  REQUIRE(group);
  CHECK((*group)->path() == "/v1/memory/fdod-workers.4242/w5");
  // Two real processes the group "holds": kill() ends both.
  auto sleeper = [] {
    pid_t p = ::fork();
    if (p == 0) {
      ::pause();
      ::_exit(0);
    }
    return p;
  };
  const pid_t a = sleeper(), b = sleeper();
  st->files["/v1/memory/fdod-workers.4242/w5/cgroup.procs"] = std::to_string(a) + "\n";
  st->files["/v1/pids/fdod-workers.4242/w5/cgroup.procs"] =
      std::to_string(a) + "\n" + std::to_string(b) + "\n";
  // The fake lists a process until it is reaped: reap them as they die.
  std::thread reaper([&] {
    int status = 0;
    for (pid_t p : {a, b}) {
      REQUIRE(::waitpid(p, &status, 0) == p);
      CHECK(WIFSIGNALED(status));
      CHECK(WTERMSIG(status) == SIGKILL);
    }
  });
  REQUIRE((*group)->kill());
  reaper.join();
  CHECK_FALSE(FakeCgroupFs::running(a));
  CHECK_FALSE(FakeCgroupFs::running(b));
}

TEST_CASE("cgroup: a v1 hierarchy that refuses processes is left off, and alone is an error",
          "[sandbox][cgroup]") {
  auto st = std::make_shared<FakeCgroupFs::State>();
  st->offered = "";
  st->refuse_v1_procs = true;
  auto fs = std::make_unique<FakeCgroupFs>(st);
  fs->populate("/cg");
  fs->populate("/v1/memory");
  CgroupLocation where = v2_at("/cg", true);
  where.memory_v1 = CgroupV1Location{"/v1/memory", true};
  {
    auto tree = CgroupTree::open(where, std::move(fs), 4242);
    REQUIRE(tree);
    CHECK_FALSE((*tree)->memory_controller());
    CHECK((*tree)->memory_version() == CgroupVersion::none);
    CHECK_FALSE(st->dirs.count("/v1/memory/fdod-workers.4242")); // nothing left behind
  }
  CgroupLocation v1_only;
  v1_only.memory_v1 = CgroupV1Location{"/v1/memory", true};
  auto none = CgroupTree::open(v1_only, std::make_unique<FakeCgroupFs>(st), 4242);
  REQUIRE_FALSE(none);
  CHECK(none.error().code() == Errc::unavailable);
}

// The real v1 hierarchies (legacy and hybrid hosts, this project's machines
// among them): a worker group whose process touches pages past its memory
// limit is killed by the kernel and counted; one that forks past its cap is
// refused; the group's end kills what is left and removes everything.
TEST_CASE("cgroup: on the host's cgroup v1 hierarchies a worker group enforces its limits",
          "[sandbox][cgroup]") {
  auto where = own_cgroup();
  if (!where) FDO_SKIP("skipped: " + where.error().message());
  if (!where->memory_v1 || !where->pids_v1)
    FDO_SKIP("skipped: this host has no cgroup v1 memory and pids hierarchies (cgroup v2 only)");
  if (::geteuid() != 0)
    FDO_SKIP("skipped: creating cgroup v1 groups under " + where->memory_v1->directory +
             " needs root");
  CgroupLocation v1; // v1 alone, whatever the host's cgroup2 holds
  v1.memory_v1 = where->memory_v1;
  v1.pids_v1 = where->pids_v1;
  // A pipe to start each child once it is in its group.
  auto child = [](auto body) {
    int p[2];
    REQUIRE(::pipe(p) == 0);
    pid_t pid = ::fork();
    if (pid == 0) {
      char c;
      ::close(p[1]);
      if (::read(p[0], &c, 1) != 1) ::_exit(90);
      ::_exit(body());
    }
    ::close(p[0]);
    return std::pair{pid, p[1]};
  };
  auto go = [](int fd) {
    REQUIRE(::write(fd, "g", 1) == 1);
    ::close(fd);
  };
  // The forker's children, orphaned, come back to this process to be reaped.
  REQUIRE(::prctl(PR_SET_CHILD_SUBREAPER, 1) == 0);
  const pid_t daemon_stand_in = ::fork();
  if (daemon_stand_in == 0) {
    ::pause();
    ::_exit(0);
  }
  std::string memory_dir, pids_dir;
  {
    auto tree = CgroupTree::open(v1, system_cgroup_fs(), daemon_stand_in);
    REQUIRE(tree);
    REQUIRE((*tree)->memory_version() == CgroupVersion::v1);
    REQUIRE((*tree)->pids_version() == CgroupVersion::v1);
    memory_dir = (*tree)->memory_v1_directory();
    pids_dir = (*tree)->pids_v1_directory();

    // Memory: 64 MiB allowed, 256 MiB touched.
    auto [hog, hog_go] = child([] {
      const std::size_t bytes = 256u << 20;
      void* m = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (m == MAP_FAILED) return 91;
      std::memset(m, 1, bytes);
      return 0;
    });
    {
      auto group = (*tree)->create("w" + std::to_string(hog));
      REQUIRE(group);
      REQUIRE((*group)->add(hog));
      REQUIRE((*group)->limit({64u << 20, 0}));
      go(hog_go);
      int status = 0;
      REQUIRE(::waitpid(hog, &status, 0) == hog);
      CHECK(WIFSIGNALED(status));
      if (WIFSIGNALED(status)) CHECK(WTERMSIG(status) == SIGKILL);
      CHECK((*group)->oom_kills() >= 1);
    }
    CHECK(::access((memory_dir + "/w" + std::to_string(hog)).c_str(), F_OK) != 0);

    // Processes: 8 allowed; it tries 20 children that wait to be killed.
    auto [forker, forker_go] = child([] {
      int made = 0;
      for (int i = 0; i < 20; ++i) {
        pid_t c = ::fork();
        if (c == 0) {
          ::pause();
          ::_exit(0);
        }
        if (c < 0) break;
        ++made;
      }
      return made;
    });
    std::vector<pid_t> grandchildren;
    {
      auto group = (*tree)->create("w" + std::to_string(forker));
      REQUIRE(group);
      REQUIRE((*group)->add(forker));
      REQUIRE((*group)->limit({0, 8}));
      go(forker_go);
      int status = 0;
      REQUIRE(::waitpid(forker, &status, 0) == forker);
      REQUIRE(WIFEXITED(status));
      CHECK(WEXITSTATUS(status) == 7); // itself and 7 children
      std::ifstream procs((*group)->paths().pids_v1 + "/cgroup.procs");
      for (long p; procs >> p;)
        grandchildren.push_back(static_cast<pid_t>(p));
      CHECK(grandchildren.size() == 7);
    } // the group's end kills them (no cgroup.kill on v1)
    for (pid_t p : grandchildren) {
      int st = 0;
      REQUIRE(::waitpid(p, &st, 0) == p);
      CHECK(WIFSIGNALED(st));
    }
    CHECK(::access((pids_dir + "/w" + std::to_string(forker)).c_str(), F_OK) != 0);
  }
  CHECK(::access(memory_dir.c_str(), F_OK) != 0);
  CHECK(::access(pids_dir.c_str(), F_OK) != 0);
  int status = 0;
  ::kill(daemon_stand_in, SIGKILL);
  ::waitpid(daemon_stand_in, &status, 0);
  ::prctl(PR_SET_CHILD_SUBREAPER, 0);
}

TEST_CASE("cgroup: auto takes over a container's root or a delegated cgroup, on v2 and v1",
          "[sandbox][cgroup]") {
  // None of these directories exist, so none carries systemd's delegation mark.
  CHECK(cgroup_is_ours(v2_at("/nonexistent/cg", true)));
  CHECK_FALSE(cgroup_is_ours(v2_at("/nonexistent/cg/system.slice/fdod.service", false)));
  // Hybrid: cgroup2's path decides, whatever the v1 paths are.
  CgroupLocation hybrid = v2_at("/nonexistent/unified/system.slice/fdod.service", false);
  hybrid.memory_v1 = CgroupV1Location{"/nonexistent/memory", true};
  hybrid.systemd_v1 = CgroupV1Location{"/nonexistent/systemd", true};
  CHECK_FALSE(cgroup_is_ours(hybrid));
  // Legacy (no cgroup2): name=systemd's path, else the controllers' own.
  CgroupLocation legacy;
  legacy.memory_v1 = CgroupV1Location{"/nonexistent/memory", true};
  legacy.systemd_v1 = CgroupV1Location{"/nonexistent/systemd/system.slice/fdod.service", false};
  CHECK_FALSE(cgroup_is_ours(legacy));
  legacy.systemd_v1->root = true;
  CHECK(cgroup_is_ours(legacy));
  legacy.systemd_v1.reset();
  CHECK(cgroup_is_ours(legacy));
  legacy.memory_v1->root = false;
  CHECK_FALSE(cgroup_is_ours(legacy));
}
