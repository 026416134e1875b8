// Incremental recompiles over the compile-worker protocol (docs/jit.md,
// "Incremental recompiles"; docs/fdod.md). A compile worker keeps nothing
// between jobs, so fdod hands a compile the parts of the program's last
// partitioned build it holds: the typed compile job names them (key, slice
// and object hash per part) and carries their object set after the program;
// the reply says how each part of the new build was made
// (compile_messages.h). Here: what fdod holds, and the explain clause.
#pragma once

#include "fdo/jit/compiler.h"

#include <map>
#include <string>
#include <vector>

namespace fdo::daemon {

// The parts of one partitioned build and its object set (the objects in
// the parts' order, fdo/jit/object_set.h).
struct HeldBuild {
  std::vector<jit::PartBuild> parts;
  std::string objects;
};

// The pipeline's prefix of a program's last build split at the inliner
// (docs/jit.md, "The pipeline's prefix"), in any mode: its key and the
// module's bitcode as the prefix left it.
struct HeldPrefixBuild {
  std::string key;
  std::string bitcode_hash;
  std::string bitcode;
};

// One explain clause: how the compile came by the pipeline's prefix.
std::string explain_prefix(const jit::PrefixBuild& prefix);

// One explain clause: how many parts were reused, which were recompiled and
// why ("" when nothing was held and nothing reused).
std::string explain_parts(const std::vector<jit::PartBuild>& parts,
                          const std::map<std::string, std::string>& source_names);

} // namespace fdo::daemon
