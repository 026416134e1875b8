// A profile document as an LLVM indexed profile (.profdata), the format
// clang's -fprofile-use and `llvm-profdata-16 show` read. The JIT's
// optimized-with-profile compile feeds PGOInstrumentationUse this same
// serialisation; `fdoctl profile export --format profdata` hands it to people.
#pragma once

#include "fdo/util/expected.h"
#include "fdo/util/profile.h"

#include <string>

namespace fdo::jit {

// IR-level instrumentation profile with one record per function that has
// counts. Errc::invalid_argument when the document holds no counts at all.
Expected<std::string> indexed_profile(const fdo::ProfileDoc& profile);

} // namespace fdo::jit
