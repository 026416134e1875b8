// fdod: the feedback-directed optimization daemon.
//   fdod --socket PATH --state-dir DIR [--config FILE] [--log-level LEVEL]
#include "fdo/daemon/config.h"
#include "fdo/daemon/server.h"
#include "fdo/daemon/service.h"
#include "fdo/util/log.h"

#include <CLI/CLI.hpp>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <sys/prctl.h>
#include <unistd.h>

namespace {
std::string worker_path(const std::string& argv0) {
  if (const char* env = std::getenv("FDO_WORKER")) return env;
  char self[PATH_MAX] = {};
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  std::filesystem::path dir = n > 0 ? std::filesystem::path(std::string(self, n)).parent_path()
                                    : std::filesystem::path(argv0).parent_path();
  return (dir / "fdo-worker").string();
}
} // namespace

int main(int argc, char** argv) {
  CLI::App app{"fdod: feedback-directed optimization daemon"};
  std::string socket, state_dir, config_path, log_level;
  app.add_option("--socket", socket,
                 "Unix socket path (default from the config: /run/fdod/fdod.sock)");
  app.add_option("--state-dir", state_dir, "State directory: profiles.db, cache, programs");
  app.add_option("--config", config_path, "Config file (key = value; see docs/fdod.md)")
      ->check(CLI::ExistingFile);
  app.add_option("--log-level", log_level, "debug, info, notice, warning or error");
  CLI11_PARSE(app, argc, argv);

  fdo::log::set_ident("fdod");
  // Not dumpable: no process of fdod's uid (a job where uids cannot be
  // switched, for one) may ptrace it or read its memory, environment or fds.
  if (::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0)
    fdo::log::warning(std::string("prctl(PR_SET_DUMPABLE, 0) failed: ") + std::strerror(errno));
  fdo::daemon::ConfigOverrides overrides;
  if (!socket.empty()) overrides.emplace_back("socket", socket);
  if (!state_dir.empty()) overrides.emplace_back("state_dir", state_dir);
  if (!log_level.empty()) overrides.emplace_back("log_level", log_level);
  auto config = config_path.empty() ? [&] {
    fdo::daemon::Config c = fdo::daemon::Config::defaults();
    auto st = c.apply_overrides(overrides);
    return st ? fdo::Expected<fdo::daemon::Config>(c) : fdo::Expected<fdo::daemon::Config>(std::move(st).error());
  }() : fdo::daemon::Config::load(config_path, overrides);
  if (!config) {
    fdo::log::error(config.error().describe());
    return 2;
  }
  fdo::log::set_level(config->log_level);

  auto service = fdo::daemon::ServiceBuilder(*config).worker_path(worker_path(argv[0])).create();
  if (!service) {
    fdo::log::error("cannot start: " + service.error().describe());
    return 1;
  }
  fdo::daemon::Dispatcher dispatcher;
  (*service)->register_methods(dispatcher);

  fdo::daemon::ServerOptions options = fdo::daemon::server_options(*config);
  fdo::daemon::Server* server_ptr = nullptr;
  fdo::daemon::Config running = *config;
  options.on_reload = [&] {
    if (config_path.empty()) {
      fdo::log::info("SIGHUP: no --config file to reload");
      return;
    }
    auto reloaded = fdo::daemon::reload_config(running, config_path, overrides);
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
    return 1;
  }
  server_ptr = server->get();
  (*server)->every("feedback-flush", config->feedback_flush, [&] {
    if (auto st = (*service)->flush_feedback(); !st) fdo::log::error(st.error().describe());
  });
  fdo::log::info("listening on " + (*server)->socket_path());
  auto st = (*server)->run();
  if (auto fl = (*service)->flush_feedback(); !fl) fdo::log::error(fl.error().describe());
  if (!st) {
    fdo::log::error(st.error().describe());
    return 1;
  }
  fdo::log::info("stopped");
  return 0;
}
