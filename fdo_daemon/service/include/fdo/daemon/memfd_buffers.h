// execute's memfd buffers (docs/fdod-protocol.md, "Buffers as memfds"): the
// descriptors a client sent with its request, checked and read. A client is
// hostile until proven otherwise, so every descriptor must be a memfd sealed
// against writing, growing and shrinking (its bytes cannot change while and
// after fdod reads them), no bigger than the request's buffer budget.
#pragma once

#include "fdo/util/expected.h"
#include "fdo/util/fd.h"

#include <cstddef>
#include <span>
#include <string>
#include <vector>

namespace fdo::daemon {

// Seals every memfd buffer must carry.
int required_buffer_seals();

// The bytes of each descriptor, in order. Errors name the descriptor's index:
// invalid_argument (not a sealed memfd, not a regular file), resource_exhausted
// (all of them together over max_total_bytes: checked before reading), io.
Expected<std::vector<std::string>> read_memfd_buffers(std::span<const Fd> fds,
                                                      std::size_t max_total_bytes);

} // namespace fdo::daemon
