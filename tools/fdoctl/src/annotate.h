// `fdoctl profile annotate`: a program's IR with each block's execution count
// from its current profile, in source names. The daemon hands over the IR
// (program.source: the owner's own program) and the profile (profile.get);
// LLVM parses and annotates it here, in the user's process, never in fdod
// (docs/security.md, "Annotated IR"). `fdoctl web` serves the same document.
#pragma once

#include "fdo/ctl/backend.h"
#include "fdo/util/expected.h"

#include <nlohmann/json.hpp>
#include <string>

namespace fdo::ctl {

// Another uid's IR is parsed only when asked: LLVM is not hardened against
// hostile IR, and an operator's fdoctl runs with the operator's rights.
enum class ForeignIr { refuse, trust };

struct AnnotateRequest {
  std::string target;   // program id (or unique prefix), program name, or profile key
  std::string function; // "" = every function; else a source, symbol or canonical name
  ForeignIr foreign = ForeignIr::refuse;
};

// {program, program_name, profile_key, profile_version, sampling: {event,
// samples} | null, functions: [{name, source_name, pgo_name, signature,
// entry_count, approximate, unplaced_samples: {event: n}, blocks: [{label,
// count, per_call, canonical_blocks, samples: {event: n}, sample_share,
// lines}]}], diagnostics}. Counts are null where the profile has none for the
// function; samples come from hardware.sampling.blocks (jit/annotate.h), and
// sample_share is null without clock samples.
Expected<nlohmann::json> annotate_program(Backend& backend, const AnnotateRequest& request);

// The document as IR text, each block's label followed by its count and
// its sampled share and misses.
std::string render_annotation(const nlohmann::json& doc);

} // namespace fdo::ctl
