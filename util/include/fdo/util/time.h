// Wall-clock helpers shared by the store, the daemon and the CLI, so every
// timestamp fdo prints has one format.
#pragma once

#include <cstdint>
#include <string>

namespace fdo {

// Milliseconds since the Unix epoch (system clock).
std::int64_t unix_ms_now();
// "2026-11-22T03:32:52.122Z" (UTC, millisecond precision); negative times are
// rounded towards the past.
std::string rfc3339_ms(std::int64_t unix_ms);

} // namespace fdo
