// The web view's HTTP/1.1 server (Boost.Beast over Asio): one coroutine per
// connection on one thread, each request handed to a WebApp, stopped by
// SIGINT/SIGTERM. The handler runs on the server's thread, so requests are
// answered one at a time (a local viewer's load) and the app needs no locks.
#pragma once

#include "fdo/util/expected.h"
#include "listen.h"
#include "web_app.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace fdo::ctl::web {

class HttpServer {
public:
  // Binds and listens (the port is chosen when ListenAddress::port is 0).
  // Errors: io (address in use, cannot bind), naming the address.
  static Expected<std::unique_ptr<HttpServer>> listen(const ListenAddress& address, WebApp& app);
  ~HttpServer();

  std::uint16_t port() const;
  std::string url() const;

  // Serves until SIGINT or SIGTERM (or stop()).
  Status run();
  void stop();

  struct Impl;

private:
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

} // namespace fdo::ctl::web
