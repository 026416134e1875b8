// A program's IR annotated with per-block execution counts from a profile:
// what `fdoctl profile annotate` and `fdoctl web` show.
//
// The counts are the profile's own: the program is canonicalised and run
// through the same pipeline as an optimized compile (the profile's knobs,
// the pre-inliner and early cleanup), up to and including
// PGOInstrumentationUse, which turns the stored counters into the function's
// entry count and exact branch weights. Each block's count is then the sum of
// its incoming edges' counts, solved over the CFG; nothing is estimated. The
// IR shown is the IR at that point, the shape the counters were gathered on.
//
// Where the profile holds sampled tallies (hardware.sampling.blocks: samples
// of each event per block of the function's *canonical* IR, numbered by the
// block map, docs/perf.md "Attribution to IR branches"), each block also
// shows the samples of the canonical blocks it holds. The IR shown is not
// the canonical IR (the pre-inliner and early cleanup merge, split and drop
// blocks), so blocks are matched through the canonical IR, never by
// position: annotate() gives the canonical module the same block locations
// a compile gives it (line = canonical block index + 1), LLVM carries them
// through the passes, and each shown block holds the canonical blocks whose
// instructions it holds.
//
// LLVM is not hardened against hostile IR: only call this on IR the calling
// process may trust as much as itself (docs/security.md, "Annotated IR").
#pragma once

#include "fdo/jit/types.h"
#include "fdo/util/expected.h"
#include "fdo/util/profile.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fdo::jit {

// Samples by sampled event ("cpu-clock", "branch-misses", ...).
using EventSamples = std::map<std::string, std::uint64_t>;

struct AnnotatedBlock {
  std::string label; // as the IR names it: "entry", "for.body", "5"
  // Executions of the block; nullopt when the function has no counts in the
  // profile or the block's count cannot be derived from them.
  std::optional<std::uint64_t> count;
  std::vector<std::string> lines; // the block's instructions, one per line
  // The canonical IR's block indexes (the block map's numbering) whose
  // samples this block shows: those with most of their instructions here
  // (each index is shown by one block at most). Empty for a block made
  // only of code inlined from elsewhere.
  std::vector<std::uint32_t> canonical_blocks;
  // Sum over canonical_blocks of the profile's per-block samples, per event;
  // empty when the profile has none for them.
  EventSamples samples;
  // samples[clock event] over all clock samples in program code; nullopt
  // when the profile holds no clock samples, or the block holds no canonical
  // block (code inlined from elsewhere counts for the function it came from).
  std::optional<double> sample_share;
};

struct AnnotatedFunction {
  std::string pgo_name;    // canonical PGO name: the profile document's key
  std::string source_name; // PGO name in the submitted program (`helper`, `file.c:helper`)
  std::string symbol;      // symbol name in the submitted program
  std::string signature;   // the `define ...` line, in source names
  std::optional<std::uint64_t> entry_count; // nullopt: no counts in the profile
  // The profile's counts exceed 32 bits, so LLVM scaled the branch weights
  // down: block counts are proportional, not exact.
  bool approximate = false;
  std::vector<AnnotatedBlock> blocks;
  // Samples of canonical blocks that no shown block holds (their code was
  // folded away before PGO use, or the index is past the function's end).
  EventSamples unplaced_samples;
};

// What the profile's sampling section says overall (hardware.sampling).
struct SamplingSummary {
  std::string clock_event;         // "cpu-clock": the event time shares count
  std::uint64_t clock_samples = 0; // its samples in program code
};

struct Annotation {
  std::vector<AnnotatedFunction> functions; // module order
  // LLVM warnings (e.g. a stale profile), sample tallies left out as
  // unreadable, and samples of functions the IR shown no longer has.
  std::vector<std::string> diagnostics;
  std::optional<SamplingSummary> sampling; // nullopt: no per-block samples in the profile
};

// Fails like compile() on IR that does not parse or verify, and with
// Errc::invalid_argument when the profile holds no counts at all.
Expected<Annotation> annotate(std::string_view program_bytes, const fdo::ProfileDoc& profile,
                              const Limits& limits = {});

} // namespace fdo::jit
