#include "fdo/daemon/systemd.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sys/socket.h>
#include <sys/un.h>
#include <systemd/sd-daemon.h>

namespace fdo::daemon::systemd {

bool notify_socket_set() {
  const char* s = std::getenv("NOTIFY_SOCKET");
  return s != nullptr && *s != '\0';
}

Status notify(std::string_view state) {
  if (!notify_socket_set()) return ok();
  std::string msg(state);
  int r = sd_notify(0, msg.c_str());
  if (r < 0) return Error::from_errno("sd_notify(" + msg + ")", -r);
  return ok();
}

std::optional<std::chrono::microseconds> watchdog_ping_interval() {
  uint64_t usec = 0;
  if (sd_watchdog_enabled(0, &usec) <= 0 || usec == 0) return std::nullopt;
  // systemd's advice: ping at half the timeout so one late tick is not fatal.
  return std::chrono::microseconds(usec / 2);
}

Expected<std::optional<Fd>> take_activation_socket() {
  // unset_environment=1: the LISTEN_* variables describe this process only.
  int n = sd_listen_fds(1);
  if (n < 0) return Error::from_errno("sd_listen_fds", -n);
  if (n == 0) return std::optional<Fd>{};
  if (n > 1) {
    for (int i = 0; i < n; ++i)
      Fd discard(SD_LISTEN_FDS_START + i);
    return make_error(Errc::invalid_argument,
                      "socket activation passed " + std::to_string(n) +
                          " file descriptors; fdod expects exactly one ListenStream= socket");
  }
  Fd fd(SD_LISTEN_FDS_START);
  int r = sd_is_socket_unix(fd.get(), SOCK_STREAM, 1, nullptr, 0);
  if (r < 0) return Error::from_errno("sd_is_socket_unix(fd " + std::to_string(fd.get()) + ")", -r);
  if (r == 0)
    return make_error(Errc::invalid_argument,
                      "socket activation passed fd " + std::to_string(fd.get()) +
                          " that is not a listening AF_UNIX stream socket (check ListenStream=)");
  return std::optional<Fd>(std::move(fd));
}

std::string unix_socket_path(int fd) {
  sockaddr_un addr{};
  socklen_t len = sizeof addr;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return {};
  if (addr.sun_family != AF_UNIX || len <= offsetof(sockaddr_un, sun_path) ||
      addr.sun_path[0] == '\0')
    return {};
  std::size_t max = len - offsetof(sockaddr_un, sun_path);
  return std::string(addr.sun_path, strnlen(addr.sun_path, max));
}

} // namespace fdo::daemon::systemd
