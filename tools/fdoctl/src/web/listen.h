// `fdoctl web --listen`: where the web view listens, and the rule that it
// stays on loopback unless the user asks for more (the view shows the user's
// profiles and program names to whoever can reach the port).
#pragma once

#include "fdo/util/expected.h"

#include <cstdint>
#include <string>
#include <string_view>

namespace fdo::ctl::web {

enum class RemoteAccess { refuse, allow };

struct ListenAddress {
  std::string host;       // an IP literal: "127.0.0.1", "::1", "0.0.0.0"
  std::uint16_t port = 0; // 0: any free port
  bool loopback = true;
};

// "HOST:PORT", "[V6]:PORT", or "PORT" (on 127.0.0.1); HOST is an IP address
// or "localhost". A non-loopback address is invalid_argument unless
// RemoteAccess::allow (the message names the flag).
Expected<ListenAddress> parse_listen(std::string_view text, RemoteAccess remote);

// "http://127.0.0.1:8080/" ("http://[::1]:8080/" for IPv6).
std::string url_of(const std::string& host, std::uint16_t port);

// Whether an HTTP Host header names this loopback server ("127.0.0.1:PORT",
// "localhost:PORT", "[::1]:PORT", without the port too): a page from another
// origin that re-points its DNS name at 127.0.0.1 sends its own name and is
// refused.
bool is_loopback_host_header(std::string_view host);

} // namespace fdo::ctl::web
