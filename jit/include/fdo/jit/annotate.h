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
// LLVM is not hardened against hostile IR: only call this on IR the calling
// process may trust as much as itself (docs/security.md, "Annotated IR").
#pragma once

#include "fdo/jit/types.h"
#include "fdo/util/expected.h"
#include "fdo/util/profile.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fdo::jit {

struct AnnotatedBlock {
  std::string label; // as the IR names it: "entry", "for.body", "5"
  // Executions of the block; nullopt when the function has no counts in the
  // profile or the block's count cannot be derived from them.
  std::optional<std::uint64_t> count;
  std::vector<std::string> lines; // the block's instructions, one per line
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
};

struct Annotation {
  std::vector<AnnotatedFunction> functions; // module order
  std::vector<std::string> diagnostics;     // LLVM warnings (e.g. a stale profile)
};

// Fails like compile() on IR that does not parse or verify, and with
// Errc::invalid_argument when the profile holds no counts at all.
Expected<Annotation> annotate(std::string_view program_bytes, const fdo::ProfileDoc& profile,
                              const Limits& limits = {}, const std::string& temp_dir = {});

} // namespace fdo::jit
