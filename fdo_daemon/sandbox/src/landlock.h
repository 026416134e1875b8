// Landlock through its raw syscalls (glibc 2.36 has no wrappers): which ABI
// the kernel offers, and restricting this thread (and its future threads) to
// read-only and read-write path trees.
#pragma once

#include "fdo/util/expected.h"

#include <string>
#include <vector>

namespace fdo::daemon::landlock {

// 0 when the kernel has no Landlock (or it is disabled).
int abi_version();

// Everything outside `readable` (read files, list directories) and `writable`
// (any file operation beneath) is denied from now on. Paths that do not exist
// are skipped. Needs PR_SET_NO_NEW_PRIVS first.
Status restrict_self(const std::vector<std::string>& readable,
                     const std::vector<std::string>& writable);

} // namespace fdo::daemon::landlock
