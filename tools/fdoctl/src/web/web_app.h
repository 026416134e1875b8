// The web view's request handler: a GET target in, a response out. Routes
// the page, its assets and the JSON API (views.h); every backend call goes
// through a ReadOnlyBackend. Does no socket I/O, so it is tested alone
// (http_server.h carries it over HTTP).
//
//   /                          the page (index.html; the views are #/... routes)
//   /assets/NAME               app.js, style.css (built in), chart.js (Debian's libjs-chart.js)
//   /api/overview              programs and profiles
//   /api/profile/PK[?version=N]
//   /api/profile/PK/history
//   /api/profile/PK/diff?v1=A&v2=B
//   /api/profile/PK/annotate[?function=NAME]  IR of a program with that profile, block counts
//   /api/program/IK            recorded stages (timeline, lineage)
// Every /api request needs the run's token (X-Fdo-Token); the page and its
// assets hold no data and need none.
#pragma once

#include "fdo/ctl/backend.h"
#include "fdo/util/expected.h"

#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace fdo::ctl::web {

struct WebRequest {
  std::string method = "GET";
  std::string target; // path and query as sent
  std::string host;   // the Host header
  std::string token;  // the X-Fdo-Token header
};

struct WebResponse {
  unsigned status = 200;
  std::string content_type;
  std::string body;
};

// Where the page's files come from: the built-in ones (embedded at build
// time) and Chart.js from the directory Debian's libjs-chart.js installs.
struct AssetOptions {
  std::string chartjs_dir = "/usr/share/javascript/chart.js";
};

enum class HostCheck { loopback_only, any };

class WebApp {
public:
  // Opens a backend for a request (the daemon, or the store offline).
  using BackendSource = std::function<Expected<std::unique_ptr<Backend>>()>;

  // `api_token`: the secret every /api request must carry in X-Fdo-Token (the
  // page reads it from the ?token= of the URL fdoctl web prints), so another
  // local user who finds the loopback port cannot read your profiles.
  WebApp(BackendSource source, AssetOptions assets, HostCheck host_check, std::string api_token);

  // Never throws; every failure is a 4xx/5xx with a JSON or text body.
  WebResponse handle(const WebRequest& request);

private:
  WebResponse api(std::string_view path, std::string_view query);
  WebResponse asset(std::string_view name) const;
  Expected<Backend*> backend();

  BackendSource source_;
  AssetOptions assets_;
  HostCheck host_check_;
  std::string token_;
  std::unique_ptr<Backend> backend_; // kept between requests; reopened after a broken connection
};

} // namespace fdo::ctl::web
