// Argument value profiling and value specialization (docs/jit.md, "Value
// specialization"): what no offline PGO does. The instrumented build records,
// for the integer arguments of every instrumented function, the values it is
// called with (a small table per argument, value_profile.h); the optimized
// build clones a hot function for an argument value most of its calls passed,
// behind a guard that sends every other value to the general body.
//
// Both run inside the O-level pipeline, from the compiler's pass callbacks:
// the recording right after PGOInstrumentationGen (so the pre-inliner and the
// CFG hashes see the function exactly as the optimized build will), the
// cloning right after PGOInstrumentationUse (so both bodies carry the
// profile's weights, and the inliner, the loop passes and the vectorizer
// then see the clone's constants).
#pragma once

#include "fdo/jit/types.h"
#include "fdo/util/profile.h"

#include <cstdint>
#include <string>
#include <vector>

namespace llvm {
class Module;
}

namespace fdo::jit::detail {

// Profiled arguments per function, at most.
inline constexpr std::uint32_t kMaxProfiledArgs = 4;

// Adds the recording to the functions of `layout` (read off the module right
// after PGOInstrumentationGen) and sets each one's arg_sites: on entry, one
// call of the argument value hook per integer argument (up to
// kMaxProfiledArgs), into the slot array kArgSlotsPrefix + layout index.
void instrument_arguments(llvm::Module& m, std::vector<InstrumentedFunction>& layout);

// What a specialization pass decided: the clones made, and the candidates it
// passed over for its budget (for the explain log).
struct SpecializationPlan {
  std::vector<Specialization> made;
  std::vector<std::string> skipped; // "f: over the clone budget", ...
};

// Clones the profile's hot functions for their dominant argument values, as
// the profile's knobs (spec_min_share, spec_max_clones) allow. Call right
// after PGOInstrumentationUse: functions the profile did not annotate (no
// entry count: stale or mismatched data) are left alone, as are argument
// records that do not fit the function's signature.
SpecializationPlan specialize_functions(llvm::Module& m, const fdo::ProfileDoc& profile);

} // namespace fdo::jit::detail
