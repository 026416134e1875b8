// fdod_test_server: the Server with the test methods, as a process. Used for
// the SIGTERM exit-status test, socket activation through
// systemd-socket-activate, and as the ExecStart binary for systemd-analyze.
#include "fdo/daemon/server.h"
#include "fdo/util/log.h"
#include "server_test_support.h"

#include <CLI/CLI.hpp>
#include <csignal>

int main(int argc, char** argv) {
  using namespace fdo::daemon;
  CLI::App app{"fdo server test daemon"};
  std::string socket = "/run/fdod/fdod.sock";
  std::string state_dir;
  std::string config_file;
  std::string log_level = "info";
  std::size_t max_request_bytes = 16u << 20;
  long timeout_ms = 120000;
  long drain_ms = 30000;
  bool require_activation = false;
  app.add_option("--socket", socket);
  app.add_option("--state-dir", state_dir);
  app.add_option("--config", config_file);
  app.add_option("--log-level", log_level);
  app.add_option("--max-request-bytes", max_request_bytes);
  app.add_option("--request-timeout-ms", timeout_ms);
  app.add_option("--drain-timeout-ms", drain_ms);
  app.add_flag("--require-activation", require_activation);
  CLI11_PARSE(app, argc, argv);

  fdo::log::set_ident("fdod-test");
  fdo::log::Level level;
  if (fdo::log::parse_level(log_level, level)) fdo::log::set_level(level);
  std::signal(SIGPIPE, SIG_IGN);

  ServerOptions opts;
  opts.socket_path = socket;
  opts.listen = require_activation ? ListenMode::activation : ListenMode::automatic;
  opts.limits.max_request_bytes = max_request_bytes;
  opts.limits.request_timeout = std::chrono::milliseconds(timeout_ms);
  opts.limits.drain_timeout = std::chrono::milliseconds(drain_ms);
  opts.handler_threads = 4;
  opts.on_reload = [] { fdo::log::info("reload requested"); };

  // Methods are added after create() (nothing is served before run()) so
  // health can report whether the socket came from systemd.
  Dispatcher dispatcher;
  testing::TestState state;
  auto server = Server::create(opts, dispatcher);
  if (!server) {
    fdo::log::error(server.error().describe());
    return 1;
  }
  testing::add_test_methods(dispatcher, state,
                            (*server)->listen_source() == ListenSource::activated);
  state.io_thread = std::this_thread::get_id();
  fdo::Status st = (*server)->run();
  if (!st) {
    fdo::log::error(st.error().describe());
    return 1;
  }
  return 0;
}
