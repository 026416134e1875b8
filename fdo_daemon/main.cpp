// fdod: the feedback-directed optimization daemon.
//   fdod [--socket PATH] [--state-dir DIR] [--config FILE | --no-config] [--log-level LEVEL]
//   fdod --print-config [...]   fdod --version
// Exit status (docs/fdod.md): 0 clean stop, 1 setup failed, 2 bad command
// line or configuration.
#include "fdo/daemon/config.h"
#include "fdo/daemon/journal.h"
#include "fdo/daemon/server.h"
#include "fdo/daemon/service.h"
#include "fdo/jit/compiler.h"
#include "fdo/util/log.h"
#include "fdo/version.h"

#include <CLI/CLI.hpp>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <malloc.h>
#include <sys/prctl.h>
#include <unistd.h>

#ifdef FDO_MALLOC_JEMALLOC
#include <jemalloc/jemalloc.h>

// jemalloc reads its options from this symbol at its first allocation
// (jemalloc(3), "TUNING"). Allocations of 1 MiB or more (request lines, replies,
// IR and objects of big programs) go to its oversize arena, whose freed pages
// go back to the kernel at once, so a burst of large requests does not leave
// fdod's RSS at its peak (docs/fdod.md, "Memory"). One arena for every thread:
// a request runs on whichever handler thread is free, and with an arena per
// thread the memory one stage freed was seldom the next stage's to reuse, so
// a big program's stages faulted fresh pages in (~10 us each in a VM).
const char* malloc_conf = "narenas:1,oversize_threshold:1048576,background_thread:true,"
                          "dirty_decay_ms:1000,muzzy_decay_ms:0";
#endif

#ifndef FDO_DEFAULT_CONFIG
#define FDO_DEFAULT_CONFIG "/etc/fdod/fdod.conf"
#endif
#ifndef FDO_WORKER_RELPATH
#define FDO_WORKER_RELPATH "../libexec/fdo/fdo-worker"
#endif

// The version in the compiler identity is the project's version.
static_assert(fdo::jit::kFdoVersion == fdo::kVersion);

namespace {
constexpr int kExitSetup = 1;
constexpr int kExitUsage = 2;

// $FDO_WORKER; else fdo-worker beside fdod (the build tree); else where the
// install rules put it relative to fdod (FDO_WORKER_RELPATH).
std::string worker_path(const std::string& argv0) {
  if (const char* env = std::getenv("FDO_WORKER")) return env;
  char self[PATH_MAX] = {};
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  std::filesystem::path dir = n > 0 ? std::filesystem::path(std::string(self, n)).parent_path()
                                    : std::filesystem::path(argv0).parent_path();
  std::filesystem::path beside = dir / "fdo-worker";
  std::filesystem::path installed = (dir / FDO_WORKER_RELPATH).lexically_normal();
  std::error_code ec;
  if (!std::filesystem::exists(beside, ec) && std::filesystem::exists(installed, ec))
    return installed.string();
  return beside.string();
}

// The allocator fdod was built with (FDO_MALLOC), as `--version` names it.
std::string allocator_text() {
#ifdef FDO_MALLOC_JEMALLOC
  const char* version = nullptr;
  std::size_t len = sizeof version;
  if (mallctl("version", &version, &len, nullptr, 0) == 0 && version != nullptr)
    return std::string("jemalloc ") + version;
  return "jemalloc";
#else
  return "glibc malloc";
#endif
}

std::string version_text() {
  return "fdod (fdo) " + std::string(fdo::kVersion) + "\nbuilt with LLVM " +
         std::string(fdo::kLlvmBuildVersion) + "\nallocator: " + allocator_text();
}

#ifndef FDO_MALLOC_JEMALLOC
// Large buffers (request lines, replies, IR and objects of big programs) are
// mapped on their own and unmapped when freed. glibc would otherwise raise its
// mmap threshold after the first such free and keep later ones in its heaps,
// so a burst of 16 MiB requests would leave fdod's RSS at its peak for good
// (docs/fdod.md, "Memory").
constexpr int kMmapThresholdBytes = 1 << 20;
#endif
} // namespace

int main(int argc, char** argv) {
#ifndef FDO_MALLOC_JEMALLOC
  ::mallopt(M_MMAP_THRESHOLD, kMmapThresholdBytes);
#endif
  CLI::App app{"fdod: feedback-directed optimization daemon (fdod(8))"};
  std::string socket, state_dir, config_path, log_level;
  bool no_config = false, print = false;
  app.set_version_flag("--version", version_text(), "Print the version and exit");
  app.add_option("--socket", socket,
                 "Unix socket path (default from the config: /run/fdod/fdod.sock)");
  app.add_option("--state-dir", state_dir, "State directory: profiles.db, cache, programs");
  auto* config_opt = app.add_option(
      "--config", config_path,
      "Config file (key = value; fdod.conf(5)); must exist. Default: " FDO_DEFAULT_CONFIG
      " if it exists, else the built-in defaults");
  app.add_flag("--no-config", no_config, "Read no config file: built-in defaults and flags only")
      ->excludes(config_opt);
  app.add_option("--log-level", log_level, "debug, info, notice, warning or error");
  app.add_flag("--print-config", print,
               "Print the effective configuration (each key's value and where it came from: "
               "default, file:line or command line) and exit");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e); // prints help, the version or the error
    return code == 0 ? 0 : kExitUsage;
  }

  fdo::log::set_ident("fdod");
  fdo::daemon::use_journal_when_available();
  fdo::daemon::ConfigOverrides overrides;
  if (!socket.empty()) overrides.emplace_back("socket", socket);
  if (!state_dir.empty()) overrides.emplace_back("state_dir", state_dir);
  if (!log_level.empty()) overrides.emplace_back("log_level", log_level);
  fdo::daemon::ConfigSource source{config_path, FDO_DEFAULT_CONFIG, no_config};
  auto loaded = fdo::daemon::load_config(source, overrides);
  if (!loaded) {
    fdo::log::error(loaded.error().describe());
    return kExitUsage;
  }
  if (print) {
    std::fputs(fdo::daemon::print_config(*loaded).c_str(), stdout);
    return std::fflush(stdout) == 0 ? 0 : kExitSetup;
  }
  const fdo::daemon::Config& config = loaded->config;
  fdo::log::set_level(config.log_level);
  // Not dumpable: no process of fdod's uid (a job where uids cannot be
  // switched, for one) may ptrace it or read its memory, environment or fds.
  if (::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0)
    fdo::log::warning(std::string("prctl(PR_SET_DUMPABLE, 0) failed: ") + std::strerror(errno));
  fdo::log::info("fdod " + std::string(fdo::kVersion) + "; configuration: " +
                 (loaded->file.empty() ? std::string("built-in defaults") : loaded->file));

  auto service = fdo::daemon::ServiceBuilder(config).worker_path(worker_path(argv[0])).create();
  if (!service) {
    fdo::log::error("cannot start: " + service.error().describe());
    return kExitSetup;
  }
  fdo::daemon::Dispatcher dispatcher;
  (*service)->register_methods(dispatcher);

  fdo::daemon::ServerOptions options = fdo::daemon::server_options(config);
  fdo::daemon::Server* server_ptr = nullptr;
  fdo::daemon::Config running = config;
  options.on_reload = [&] {
    // The file a start now would read: a default file created since is read.
    std::string path = fdo::daemon::config_file_for(source);
    if (path.empty()) {
      fdo::log::info(no_config ? "SIGHUP: started with --no-config; nothing to reload"
                               : "SIGHUP: no configuration file at " FDO_DEFAULT_CONFIG
                                 "; nothing to reload");
      return;
    }
    auto reloaded = fdo::daemon::reload_config(running, path, overrides);
    if (!reloaded) {
      fdo::log::error("reload failed, keeping the running configuration: " +
                      reloaded.error().describe());
      return;
    }
    running = reloaded->config;
    (*service)->reconfigure(running);
    if (server_ptr) server_ptr->set_limits(fdo::daemon::server_limits(running));
  };
  auto server = fdo::daemon::Server::create(options, dispatcher);
  if (!server) {
    fdo::log::error("cannot listen: " + server.error().describe());
    return kExitSetup;
  }
  server_ptr = server->get();
  (*server)->every("feedback-flush", config.feedback_flush, [&] {
    if (auto st = (*service)->flush_feedback(); !st) fdo::log::error(st.error().describe());
  });
  fdo::log::info("listening on " + (*server)->socket_path());
  auto st = (*server)->run();
  if (auto fl = (*service)->flush_feedback(); !fl) fdo::log::error(fl.error().describe());
  if (!st) {
    fdo::log::error(st.error().describe());
    return kExitSetup;
  }
  fdo::log::info("stopped");
  return 0;
}
