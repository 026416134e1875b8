// The self-test's driver (self_test.h): a private fdod on a temporary socket
// and state dir, the two programs run stage by stage, every profile version
// read back.
#include "fdo/ctl/client.h"
#include "fdo/ctl/self_test.h"
#include "fdo/util/fd.h"

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <spawn.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

extern char** environ;

namespace fdo::ctl {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// What the private daemon runs with: sampling often enough that a stage of
// tens of milliseconds gives tens of samples, decisions after few stages,
// no context-sensitive round and no guard (neither is under test here). The
// i-cache gates are opened (any counted MPKI, a tenth of the misses makes a
// function hot): the test is whether the chain works, not whether this CPU's
// prefetchers leave the program enough misses to pass the production gates.
constexpr const char* kConfig = R"(compile_workers = 1
exec_workers = 1
exec_timeout_ms = 30000
tier_up = sync
log_level = warning
guard = off
policy.cs_pgo_stages = 0
policy.min_stages = 2
sampling.events = cpu-clock,branch-misses,L1-icache-load-misses
sampling.frequency_hz = 2000
policy.icache_mpki_size_threshold = 0
policy.icache_hot_share = 0.1
)";

std::string find_fdod(const std::string& given) {
  if (!given.empty()) return given;
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path beside = self.parent_path() / "fdod";
    if (fs::exists(beside, ec)) return beside.string();
  }
  for (const char* p : {"/usr/sbin/fdod", "/usr/local/sbin/fdod", "/usr/bin/fdod"})
    if (fs::exists(p, ec)) return p;
  return {};
}

// fdod on its own socket and state dir, stopped and removed at the end.
class PrivateDaemon {
public:
  static Expected<std::unique_ptr<PrivateDaemon>> start(const std::string& fdod) {
    // mkdtemp's template. Under /tmp rather than $TMPDIR: the socket's path
    // inside it must stay within sun_path's 108 bytes.
    char tmpl[] = "/tmp/fdoctl-self-test-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) return Error::from_errno("mkdtemp", errno);
    auto d = std::unique_ptr<PrivateDaemon>(new PrivateDaemon(tmpl));
    std::ofstream(d->dir_ / "fdod.conf") << kConfig;
    const std::string socket = (d->dir_ / "fdod.sock").string();
    const std::string state = (d->dir_ / "state").string();
    const std::string config = (d->dir_ / "fdod.conf").string();
    const std::string log = (d->dir_ / "fdod.log").string();
    posix_spawn_file_actions_t fa;
    ::posix_spawn_file_actions_init(&fa);
    ::posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::posix_spawn_file_actions_adddup2(&fa, 1, 2);
    std::vector<std::string> args{fdod,  "--socket", socket, "--state-dir",
                                  state, "--config", config};
    std::vector<char*> argv;
    for (auto& a : args)
      argv.push_back(a.data());
    argv.push_back(nullptr);
    const int rc = ::posix_spawn(&d->pid_, fdod.c_str(), &fa, nullptr, argv.data(), environ);
    ::posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) return Error::from_errno("start " + fdod, rc);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (::waitpid(d->pid_, &status, WNOHANG) == d->pid_) {
        d->pid_ = -1;
        return make_error(Errc::unavailable, fdod + " exited at start: " + d->log_tail());
      }
      ClientOptions o = cli_client_options();
      o.timeout = std::chrono::seconds(120);
      auto c = RpcClient::connect(socket, o);
      if (c && c->call("health")) {
        d->client_.emplace(std::move(*c));
        return d;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return make_error(Errc::timeout, fdod + " did not answer within 30 s: " + d->log_tail());
  }
  ~PrivateDaemon() {
    client_.reset();
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      int status = 0;
      for (int i = 0; i < 300 && ::waitpid(pid_, &status, WNOHANG) == 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      if (::waitpid(pid_, &status, WNOHANG) == 0) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
      }
    }
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  RpcClient& client() { return *client_; }
  std::string log_tail() const {
    std::ifstream f(dir_ / "fdod.log");
    std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    return text.size() > 2000 ? text.substr(text.size() - 2000) : text;
  }

private:
  explicit PrivateDaemon(fs::path dir) : dir_(std::move(dir)) {}
  fs::path dir_;
  pid_t pid_ = -1;
  std::optional<RpcClient> client_;
};

// Runs `run(n)` stage by stage: at most `max_stages`, and no longer than
// four optimized stages after `done` first held for the current profile (or,
// when the hardware event never opened, six optimized stages).
SelfTestProgram run_program(RpcClient& c, const std::string& ir, std::uint64_t n, int max_stages,
                            const char* event, bool (*done)(const json&)) {
  SelfTestProgram p;
  auto reg = c.call("program.register", {{"ir", ir}, {"name", "fdoctl-self-test"}});
  if (!reg) {
    p.error = reg.error().message();
    return p;
  }
  const std::string program = (*reg)["program"].get<std::string>();
  const std::string key = (*reg)["profile_key"].get<std::string>();
  int optimized = 0, after_done = -1;
  bool event_open = false;
  for (int i = 0; i < max_stages; ++i) {
    auto r = c.call("execute", {{"program", program}, {"entry", "run"}, {"args", {n}}});
    if (!r) {
      p.error = r.error().message();
      break;
    }
    const json stage = (*r)["stage"];
    p.stages.push_back(stage);
    for (const json& e : stage.value("samples", json::object()).value("events", json::array()))
      if (e.value("name", "") == event && e.value("status", "") == "available") event_open = true;
    if (stage.value("mode", "") != "optimized") continue;
    ++optimized;
    if (after_done >= 0 && ++after_done >= 4) break;
    if (after_done < 0) {
      auto cur = c.call("profile.get", {{"profile_key", key}});
      if (cur && done((*cur)["profile"])) after_done = 0;
    }
    if (!event_open && optimized >= 6) break;
  }
  auto history = c.call("profile.history", {{"profile_key", key}});
  if (!history) {
    if (p.error.empty()) p.error = history.error().message();
    return p;
  }
  for (const json& v : (*history)["versions"]) {
    auto doc = c.call("profile.get", {{"profile_key", key}, {"version", v["version"]}});
    if (doc) p.versions.push_back(std::move(*doc));
  }
  std::sort(p.versions.begin(), p.versions.end(), [](const json& a, const json& b) {
    return a["version"].get<std::int64_t>() < b["version"].get<std::int64_t>();
  });
  return p;
}

} // namespace

SelfTestRun run_self_test(const std::string& fdod_path, int max_stages) {
  SelfTestRun run;
  const std::string fdod = find_fdod(fdod_path);
  if (fdod.empty()) {
    run.daemon_error = "no fdod beside fdoctl or installed: pass --fdod PATH";
    return run;
  }
  auto daemon = PrivateDaemon::start(fdod);
  if (!daemon) {
    run.daemon_error = daemon.error().message();
    return run;
  }
  RpcClient& c = (*daemon)->client();
  if (auto caps = c.call("capabilities")) run.capabilities = std::move(*caps);
  run.branch = run_program(c, kSelfTestBranchIr, 3'000'000, max_stages, "branch-misses",
                           self_test_branch_marked);
  run.icache = run_program(c, self_test_icache_ir(), 1500, max_stages, "L1-icache-load-misses",
                           self_test_hot_laid_out);
  return run;
}

} // namespace fdo::ctl
