#include "listen.h"

#include <boost/asio/ip/address.hpp>
#include <charconv>

namespace fdo::ctl::web {

namespace {

Error bad(std::string_view text, const std::string& why) {
  return make_error(Errc::invalid_argument,
                    "--listen '" + std::string(text) + "': " + why +
                        " (give HOST:PORT, [V6]:PORT or PORT, e.g. 127.0.0.1:8080)");
}

} // namespace

Expected<ListenAddress> parse_listen(std::string_view text, RemoteAccess remote) {
  std::string_view host = "127.0.0.1", port = text;
  if (!text.empty() && text.front() == '[') {
    std::size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':')
      return bad(text, "an IPv6 address is written [ADDRESS]:PORT");
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else if (std::size_t colon = text.rfind(':'); colon != std::string_view::npos) {
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.find(':') != std::string_view::npos)
      return bad(text, "an IPv6 address is written [ADDRESS]:PORT");
  }
  unsigned value = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || ec != std::errc() || end != port.data() + port.size() || value > 65535)
    return bad(text, "the port must be a number from 0 (any free port) to 65535");
  if (host == "localhost") host = "127.0.0.1";
  boost::system::error_code aec;
  auto address = boost::asio::ip::make_address(std::string(host), aec);
  if (aec) {
    std::string why = "'"; // appended, not `"'" + std::string(host)`: GCC 12 warns (-Wrestrict)
    why.append(host).append("' is not an IP address");
    return bad(text, why);
  }
  ListenAddress out{address.to_string(), static_cast<std::uint16_t>(value), address.is_loopback()};
  if (!out.loopback && remote == RemoteAccess::refuse)
    return make_error(Errc::invalid_argument,
                      "--listen " + std::string(text) +
                          " is not a loopback address: the web view shows your profiles and "
                          "program names to anyone who can reach it; add --allow-remote to "
                          "serve it there anyway");
  return out;
}

std::string url_of(const std::string& host, std::uint16_t port) {
  bool v6 = host.find(':') != std::string::npos;
  return "http://" + (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port) + "/";
}

bool is_loopback_host_header(std::string_view host) {
  std::string_view name = host;
  if (!name.empty() && name.front() == '[') {
    std::size_t close = name.find(']');
    if (close == std::string_view::npos) return false;
    std::string_view rest = name.substr(close + 1);
    if (!rest.empty() && rest.front() != ':') return false;
    name = name.substr(1, close - 1);
  } else if (std::size_t colon = name.rfind(':'); colon != std::string_view::npos) {
    name = name.substr(0, colon);
  }
  if (name == "localhost") return true;
  boost::system::error_code ec;
  auto address = boost::asio::ip::make_address(std::string(name), ec);
  return !ec && address.is_loopback();
}

} // namespace fdo::ctl::web
