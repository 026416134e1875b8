#include "http_server.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <csignal>

namespace fdo::ctl::web {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

constexpr auto kIdleTimeout = std::chrono::seconds(60);
constexpr std::size_t kMaxHeaderBytes = 16 * 1024;
constexpr std::size_t kMaxBodyBytes = 64 * 1024; // GET only: a body is never needed

http::response<http::string_body> to_http(WebResponse r, unsigned version, bool keep_alive,
                                          bool head) {
  http::response<http::string_body> res{static_cast<http::status>(r.status), version};
  res.set(http::field::server, "fdoctl-web");
  res.set(http::field::content_type, r.content_type);
  res.set(http::field::cache_control, "no-store");
  res.set("X-Content-Type-Options", "nosniff");
  // Everything the page needs comes from this server; no inline script.
  res.set("Content-Security-Policy",
          "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'");
  res.keep_alive(keep_alive);
  std::size_t size = r.body.size();
  if (!head) res.body() = std::move(r.body);
  res.content_length(size);
  return res;
}

asio::awaitable<void> serve_connection(tcp::socket socket, WebApp& app) {
  beast::tcp_stream stream(std::move(socket));
  beast::flat_buffer buffer;
  boost::system::error_code ec;
  for (;;) {
    http::request_parser<http::string_body> parser;
    parser.header_limit(kMaxHeaderBytes);
    parser.body_limit(kMaxBodyBytes);
    stream.expires_after(kIdleTimeout);
    co_await http::async_read(stream, buffer, parser,
                              asio::redirect_error(asio::use_awaitable, ec));
    if (ec == http::error::end_of_stream || ec == beast::error::timeout ||
        ec == asio::error::connection_reset || ec == asio::error::operation_aborted)
      break;
    if (ec) {
      // Malformed request: say so and close (the stream is out of sync).
      WebResponse bad{400, "text/plain; charset=utf-8", "bad request: " + ec.message() + "\n"};
      auto res = to_http(std::move(bad), 11, false, false);
      co_await http::async_write(stream, res, asio::redirect_error(asio::use_awaitable, ec));
      break;
    }
    const auto& req = parser.get();
    WebRequest wr{std::string(req.method_string()), std::string(req.target()),
                  std::string(req[http::field::host]), std::string(req["X-Fdo-Token"])};
    bool head = req.method() == http::verb::head;
    auto res = to_http(app.handle(wr), req.version(), req.keep_alive(), head);
    co_await http::async_write(stream, res, asio::redirect_error(asio::use_awaitable, ec));
    if (ec || !res.keep_alive()) break;
  }
  stream.socket().shutdown(tcp::socket::shutdown_send, ec);
}

} // namespace

struct HttpServer::Impl {
  asio::io_context io{1};
  tcp::acceptor acceptor{io};
  WebApp& app;
  std::string host;

  explicit Impl(WebApp& a) : app(a) {}

  asio::awaitable<void> accept_loop() {
    for (;;) {
      boost::system::error_code ec;
      tcp::socket socket =
          co_await acceptor.async_accept(asio::redirect_error(asio::use_awaitable, ec));
      if (ec == asio::error::operation_aborted) co_return;
      if (ec) continue; // e.g. EMFILE: the next accept may succeed
      asio::co_spawn(io, serve_connection(std::move(socket), app), asio::detached);
    }
  }
};

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HttpServer::~HttpServer() = default;

Expected<std::unique_ptr<HttpServer>> HttpServer::listen(const ListenAddress& address,
                                                         WebApp& app) {
  auto impl = std::make_unique<Impl>(app);
  impl->host = address.host;
  boost::system::error_code ec;
  tcp::endpoint endpoint(asio::ip::make_address(address.host, ec), address.port);
  auto fail = [&](const char* what) {
    return make_error(Errc::io, std::string("cannot ") + what + " " +
                                    url_of(address.host, address.port) + ": " + ec.message());
  };
  if (ec) return fail("parse");
  impl->acceptor.open(endpoint.protocol(), ec);
  if (ec) return fail("open a socket for");
  impl->acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  impl->acceptor.bind(endpoint, ec);
  if (ec) return fail("listen on");
  impl->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return fail("listen on");
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

std::uint16_t HttpServer::port() const {
  boost::system::error_code ec;
  auto endpoint = impl_->acceptor.local_endpoint(ec);
  return ec ? 0 : endpoint.port();
}

std::string HttpServer::url() const {
  return url_of(impl_->host, port());
}

Status HttpServer::run() {
  asio::signal_set signals(impl_->io, SIGINT, SIGTERM);
  signals.async_wait([this](const boost::system::error_code&, int) { stop(); });
  asio::co_spawn(impl_->io, impl_->accept_loop(), asio::detached);
  try {
    impl_->io.run();
  } catch (const std::exception& e) {
    return make_error(Errc::internal, std::string("web server: ") + e.what());
  }
  return ok();
}

void HttpServer::stop() {
  impl_->io.stop();
}

} // namespace fdo::ctl::web
