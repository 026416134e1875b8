// File descriptors over a Unix stream socket (SCM_RIGHTS), as thin as the
// system calls they wrap so callers keep their own error handling: fdod's
// sessions (reply descriptors out, request descriptors in) and libfdo's
// transport (the other way round) share one encoding of the control message.
#pragma once

#include "fdo/util/fd.h"

#include <cstddef>
#include <span>
#include <string_view>
#include <sys/types.h>
#include <vector>

namespace fdo {

// sendmsg(2) of `bytes` with `fds` attached (none: a plain send). Returns
// what sendmsg returns; on -1, errno says why.
ssize_t send_with_fds(int sock, std::string_view bytes, std::span<const int> fds, int flags);

// recvmsg(2) into `buf`, taking up to max_fds descriptors (MSG_CMSG_CLOEXEC is
// added to `flags`). Returns what recvmsg returns; on -1, errno says why.
// Every descriptor that arrived is appended to `fds` (owned at once, so none
// leaks); `truncated` is set when more came than fitted (the kernel closed
// those).
ssize_t receive_with_fds(int sock, std::span<char> buf, std::size_t max_fds, int flags,
                         std::vector<Fd>& fds, bool& truncated);

} // namespace fdo
