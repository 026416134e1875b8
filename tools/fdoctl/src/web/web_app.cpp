#include "web_app.h"

#include "../annotate.h"
#include "embedded_assets.h"
#include "fdo/util/hash.h"
#include "listen.h"
#include "read_only_backend.h"
#include "views.h"

#include <charconv>
#include <fstream>
#include <optional>
#include <sstream>
#include <vector>

namespace fdo::ctl::web {

using nlohmann::json;

namespace {

WebResponse json_response(unsigned status, const json& doc) {
  return {status, "application/json",
          doc.dump(-1, ' ', false, json::error_handler_t::replace) + "\n"};
}

WebResponse error_response(unsigned status, const std::string& message) {
  return json_response(status, {{"error", message}});
}

// The HTTP status for a backend error: the request's fault (4xx) or the
// source's (5xx).
unsigned status_for(Errc code) {
  switch (code) {
  case Errc::invalid_argument:
    return 400;
  case Errc::permission_denied:
    return 403;
  case Errc::not_found:
    return 404;
  case Errc::unsupported:
    return 501; // the offline store cannot answer this view
  case Errc::unavailable:
  case Errc::timeout:
    return 503;
  default:
    return 502;
  }
}

std::vector<std::string_view> split_path(std::string_view path) {
  std::vector<std::string_view> parts;
  std::size_t pos = 0;
  while (pos < path.size()) {
    std::size_t slash = path.find('/', pos);
    if (slash == std::string_view::npos) slash = path.size();
    if (slash > pos) parts.push_back(path.substr(pos, slash - pos));
    pos = slash + 1;
  }
  return parts;
}

// The value of NAME in a query string ("a=1&b=2"); nullopt when absent.
std::optional<std::string_view> query_param(std::string_view query, std::string_view name) {
  for (std::string_view rest = query; !rest.empty();) {
    std::size_t amp = rest.find('&');
    std::string_view pair = rest.substr(0, amp);
    rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
    std::size_t eq = pair.find('=');
    if (pair.substr(0, eq) == name)
      return eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1);
  }
  return std::nullopt;
}

// %XX escapes and '+' (a space) of a query value; nullopt for a broken escape.
std::optional<std::string> percent_decode(std::string_view text) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '+') {
      out += ' ';
    } else if (text[i] != '%') {
      out += text[i];
    } else {
      unsigned v = 0;
      if (i + 2 >= text.size()) return std::nullopt;
      auto [end, ec] = std::from_chars(text.data() + i + 1, text.data() + i + 3, v, 16);
      if (ec != std::errc() || end != text.data() + i + 3) return std::nullopt;
      out += static_cast<char>(v);
      i += 2;
    }
  }
  return out;
}

// A version number from the query: absent -> nullopt; present it must be an
// integer >= 1.
Expected<std::optional<std::int64_t>> version_param(std::string_view query, std::string_view name) {
  auto text = query_param(query, name);
  if (!text) return std::optional<std::int64_t>();
  std::int64_t v = 0;
  auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), v);
  if (text->empty() || ec != std::errc() || end != text->data() + text->size() || v < 1)
    return make_error(Errc::invalid_argument, std::string(name) +
                                                  " must be a version number >= 1, got '" +
                                                  std::string(*text) + "'");
  return std::optional<std::int64_t>(v);
}

std::string key_error(std::string_view what, std::string_view text) {
  std::string out = "'"; // appended: `"'" + std::string(...)` draws a GCC 12 -Wrestrict false alarm
  out.append(text.substr(0, 80)).append("' is not a ").append(what);
  return out.append(" (64 lower-case hex digits)");
}

} // namespace

WebApp::WebApp(BackendSource source, AssetOptions assets, HostCheck host_check,
               std::string api_token)
    : source_(std::move(source)), assets_(std::move(assets)), host_check_(host_check),
      token_(std::move(api_token)) {}

Expected<Backend*> WebApp::backend() {
  if (!backend_) {
    FDO_TRY(std::unique_ptr<Backend> inner, source_());
    backend_ = std::make_unique<ReadOnlyBackend>(std::move(inner));
  }
  return backend_.get();
}

WebResponse WebApp::handle(const WebRequest& request) {
  try {
    if (request.method != "GET" && request.method != "HEAD")
      return error_response(405, "the web view is read-only: " + request.method +
                                     " is not served (GET only)");
    if (host_check_ == HostCheck::loopback_only && !is_loopback_host_header(request.host))
      return error_response(421, "Host '" + request.host.substr(0, 80) +
                                     "' does not name this loopback server");
    std::string_view target = request.target;
    std::size_t q = target.find('?');
    std::string_view path = target.substr(0, q);
    std::string_view query =
        q == std::string_view::npos ? std::string_view() : target.substr(q + 1);
    if (path.empty() || path.front() != '/')
      return error_response(400, "the path must start with /");
    // Nothing served has a dot segment or an escape in its path: refuse
    // them outright rather than normalise (no way out of the asset table).
    if (path.find('%') != std::string_view::npos || path.find('\\') != std::string_view::npos)
      return error_response(400, "escaped characters are not allowed in paths");
    for (std::string_view part : split_path(path))
      if (part == "." || part == "..")
        return error_response(400, "'.' and '..' are not allowed in paths");

    if (path == "/" || path == "/index.html") return asset("index.html");
    if (path.starts_with("/assets/")) return asset(path.substr(8));
    if (path.starts_with("/api/")) {
      if (token_.empty() || request.token != token_)
        return error_response(401, "the API needs the token of this fdoctl web run: open the URL "
                                   "it printed (with its ?token=)");
      return api(path.substr(4), query);
    }
    return error_response(404, "no page " + std::string(path.substr(0, 200)));
  } catch (const std::exception& e) {
    return error_response(500, std::string("internal error: ") + e.what());
  }
}

WebResponse WebApp::asset(std::string_view name) const {
  if (name == "chart.js") {
    // Debian's libjs-chart.js (Chart.js 3.9, UMD build): read per request,
    // so an upgrade of the package is picked up.
    std::string path = assets_.chartjs_dir + "/chart.min.js";
    std::ifstream in(path, std::ios::binary);
    if (!in)
      return {404, "text/plain; charset=utf-8",
              "Chart.js is not installed at " + path + " (apt-get install libjs-chart.js)\n"};
    std::ostringstream s;
    s << in.rdbuf();
    return {200, "text/javascript; charset=utf-8", s.str()};
  }
  for (const EmbeddedAsset& a : embedded_assets())
    if (a.name == name) return {200, std::string(a.content_type), std::string(a.body)};
  return error_response(404, "no asset " + std::string(name.substr(0, 200)));
}

WebResponse WebApp::api(std::string_view path, std::string_view query) {
  std::vector<std::string_view> parts = split_path(path);
  auto run = [&](auto&& view) -> WebResponse {
    auto b = backend();
    if (!b) return error_response(status_for(b.error().code()), b.error().message());
    Expected<json> doc = view(**b);
    if (!doc) {
      Errc code = doc.error().code();
      // A broken connection to the daemon: open a fresh one next time.
      if (code == Errc::io || code == Errc::corrupt || code == Errc::timeout ||
          code == Errc::unavailable)
        backend_.reset();
      return error_response(status_for(code), doc.error().message());
    }
    return json_response(200, *doc);
  };

  if (parts.size() == 1 && parts[0] == "overview")
    return run([](Backend& b) { return overview_view(b); });

  if (parts.size() >= 2 && parts[0] == "profile") {
    if (!is_hex_key(parts[1])) return error_response(400, key_error("profile key", parts[1]));
    std::string pk(parts[1]);
    if (parts.size() == 2) {
      auto version = version_param(query, "version");
      if (!version) return error_response(400, version.error().message());
      return run([&](Backend& b) { return profile_view(b, pk, *version); });
    }
    if (parts.size() == 3 && parts[2] == "history")
      return run([&](Backend& b) { return history_view(b, pk); });
    if (parts.size() == 3 && parts[2] == "diff") {
      auto v1 = version_param(query, "v1");
      auto v2 = v1 ? version_param(query, "v2") : v1;
      if (!v1 || !v2) return error_response(400, (v1 ? v2 : v1).error().message());
      if (!*v1 || !*v2) return error_response(400, "diff needs ?v1=A&v2=B (version numbers)");
      return run([&](Backend& b) { return diff_view(b, pk, **v1, **v2); });
    }
    if (parts.size() == 3 && parts[2] == "annotate") {
      // The IR of one of the caller's programs with this profile, annotated
      // here (annotate.h); only the caller's own programs (ForeignIr::refuse).
      AnnotateRequest request;
      request.target = pk;
      if (auto fn = query_param(query, "function")) {
        auto name = percent_decode(*fn);
        if (!name) return error_response(400, "function: a broken %-escape");
        request.function = std::move(*name);
      }
      return run([&](Backend& b) { return annotate_program(b, request); });
    }
  }
  if (parts.size() == 2 && parts[0] == "program") {
    if (!is_hex_key(parts[1])) return error_response(400, key_error("program id", parts[1]));
    std::string ik(parts[1]);
    return run([&](Backend& b) { return program_view(b, ik); });
  }
  return error_response(404, "no API /api" + std::string(path.substr(0, 200)));
}

} // namespace fdo::ctl::web
