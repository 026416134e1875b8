// `fdoctl web`: serve the read-only web view until interrupted.
#pragma once

#include "../context.h"
#include "listen.h"

#include <functional>
#include <string>

namespace CLI {
class App;
}

namespace fdo::ctl {

struct WebOptions {
  std::string listen = "127.0.0.1:0"; // port 0: a free port, printed
  web::RemoteAccess remote = web::RemoteAccess::refuse;
  std::string chartjs_dir = "/usr/share/javascript/chart.js";
};

Status cmd_web(Context& ctx, const WebOptions& options);

// Registers `fdoctl web` on fdoctl's command line; its callback sets `action`.
void add_web_command(CLI::App& app, std::function<Status(Context&)>& action);

} // namespace fdo::ctl
