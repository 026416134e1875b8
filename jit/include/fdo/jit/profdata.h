// A profile document as an LLVM indexed profile (.profdata), the format
// clang's -fprofile-use and `llvm-profdata-16 show` read. The JIT's
// optimized-with-profile compile feeds PGOInstrumentationUse this same
// serialisation; `fdoctl profile export --format profdata` hands it to people.
#pragma once

#include "fdo/jit/types.h"
#include "fdo/util/expected.h"
#include "fdo/util/profile.h"

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace fdo::jit {

// Which name each record carries.
enum class RecordNames {
  // The function's source name (FunctionProfile::source_name: clang's PGO
  // name for the submitted source), the PGO name where none is recorded.
  // For people and tools (`llvm-profdata-16 show` lists readable names).
  source,
  // The canonical PGO name (the profile's key): what fdo's own optimized
  // compile looks records up by.
  canonical,
};

// IR-level instrumentation profile with one record per function that has
// counts. Errc::invalid_argument when the document holds no counts at all.
Expected<std::string> indexed_profile(const fdo::ProfileDoc& profile,
                                      RecordNames names = RecordNames::source);

// What an indexed profile from an offline build of the same source (clang
// -fprofile-generate, llvm-profdata merge) gives a program.
struct SeededProfile {
  std::string profile_key; // canonical profile key (fdod scopes it per tenant)
  fdo::ProfileDoc profile; // counts and value profiles under canonical PGO names
  std::size_t matched = 0; // program functions seeded from a record
  // Program functions (source names) left without counts: no record of that
  // name, or a record with another CFG hash or counter count (stale: the
  // function's code differs from what fdo instruments).
  std::vector<std::string> dropped;
  std::size_t records = 0; // records in the file
};

// Seeds `program`'s profile from `profdata` (an IR-level indexed profile).
// The program is compiled instrumented with `knobs` to learn each function's
// canonical PGO name, source name (clang's PGO name) and CFG hash; a record
// seeds a function when its name is the source name and its CFG hash and
// counter count are the function's. Indirect-call targets are renamed from
// source to canonical names (targets outside the program are dropped).
// Errors: invalid_argument (not an IR-level indexed profile), and the
// compile's errors. Call only in a process that may parse the program (LLVM
// is not hardened against hostile input).
Expected<SeededProfile> seed_profile(std::string_view profdata, std::string_view program_bytes,
                                     const fdo::Knobs& knobs = {}, const Limits& limits = {});

} // namespace fdo::jit
