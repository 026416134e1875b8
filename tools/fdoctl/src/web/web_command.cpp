#include "web_command.h"

#include "fdo/util/hash.h"
#include "http_server.h"
#include "web_app.h"

#include <CLI/CLI.hpp>
#include <array>
#include <cerrno>
#include <cstring>
#include <memory>
#include <ostream>
#include <sys/random.h>

namespace fdo::ctl {

namespace {

// 128 random bits, hex: the API token of one run.
Expected<std::string> random_token() {
  std::array<std::uint8_t, 16> bytes{};
  if (::getrandom(bytes.data(), bytes.size(), 0) != static_cast<ssize_t>(bytes.size()))
    return make_error(Errc::io, std::string("getrandom: ") + std::strerror(errno));
  return to_hex(bytes);
}

} // namespace

Status cmd_web(Context& ctx, const WebOptions& options) {
  FDO_TRY(web::ListenAddress address, web::parse_listen(options.listen, options.remote));
  // Open the source now so a daemon that cannot be reached (and no usable
  // --state-dir) fails the command instead of every page.
  FDO_TRY(std::unique_ptr<Backend> first, ctx.backend(Need::read));
  std::string source = first->describe();
  FDO_TRY(std::string token, random_token());
  auto opened = std::make_shared<std::unique_ptr<Backend>>(std::move(first));
  web::WebApp app(
      [&ctx, opened]() -> Expected<std::unique_ptr<Backend>> {
        if (*opened) return std::move(*opened);
        return ctx.backend(Need::read);
      },
      web::AssetOptions{options.chartjs_dir},
      address.loopback ? web::HostCheck::loopback_only : web::HostCheck::any, token);
  FDO_TRY(std::unique_ptr<web::HttpServer> server, web::HttpServer::listen(address, app));
  ctx.io().out << "fdoctl web: serving a read-only view of " << source << " at " << server->url()
               << "?token=" << token << " (Ctrl-C to stop)" << std::endl;
  return server->run();
}

void add_web_command(CLI::App& app, std::function<Status(Context&)>& action) {
  auto options = std::make_shared<WebOptions>();
  auto allow_remote = std::make_shared<bool>(false);
  auto* web = app.add_subcommand(
      "web", "Serve a read-only web view of programs, profiles, stages and cache lineage (like "
             "`pprof -http`), reading through fdod or, with --state-dir, the profile store");
  web->add_option("--listen", options->listen,
                  "HOST:PORT to serve on (default 127.0.0.1:0, a free port; the URL is printed)");
  web->add_flag("--allow-remote", *allow_remote,
                "allow a --listen address that is not loopback (anyone who reaches it sees your "
                "profiles and program names)");
  web->add_option("--chartjs-dir", options->chartjs_dir,
                  "where Chart.js's chart.min.js is (default /usr/share/javascript/chart.js, "
                  "Debian's libjs-chart.js)");
  web->callback([&action, options, allow_remote] {
    options->remote = *allow_remote ? web::RemoteAccess::allow : web::RemoteAccess::refuse;
    action = [options](Context& c) { return cmd_web(c, *options); };
  });
}

} // namespace fdo::ctl
