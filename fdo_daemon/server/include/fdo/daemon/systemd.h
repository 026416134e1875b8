// The daemon's contact with the service manager: readiness and watchdog
// notifications and socket activation. Every function is a no-op (or says
// "not activated") when the process was not started by systemd, so the same
// binary runs by hand, under systemd-socket-activate and as a unit.
#pragma once

#include "fdo/util/expected.h"
#include "fdo/util/fd.h"

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace fdo::daemon::systemd {

// True when NOTIFY_SOCKET is set (notify() will actually send).
bool notify_socket_set();

// sd_notify(state), e.g. "READY=1\nSTATUS=listening on /run/fdod/fdod.sock".
// Ok without doing anything when NOTIFY_SOCKET is unset.
Status notify(std::string_view state);

// How often to send WATCHDOG=1: half of WATCHDOG_USEC when the unit has
// WatchdogSec= set (and WATCHDOG_PID, if present, is this process); nullopt
// when no watchdog is expected.
std::optional<std::chrono::microseconds> watchdog_ping_interval();

// The listening socket passed through LISTEN_FDS/LISTEN_PID, if any. Clears
// the LISTEN_* variables so child processes (workers) do not see them; the fd
// is close-on-exec. Errors when systemd passed more than one fd or the fd is
// not a listening AF_UNIX stream socket (a unit file mistake worth failing on).
Expected<std::optional<Fd>> take_activation_socket();

// The filesystem path a bound AF_UNIX socket fd listens on ("" if abstract
// or unnamed).
std::string unix_socket_path(int fd);

} // namespace fdo::daemon::systemd
