// Incremental recompiles over the compile-worker protocol (docs/jit.md,
// "Incremental recompiles"; docs/fdod.md). A compile worker keeps nothing
// between jobs, so fdod hands a compile the parts of the program's last
// partitioned build it holds: the job's header names them ("held_parts": key,
// slice and object hash per part; "program_bytes": where the program ends in
// the payload) and its payload is the program followed by their object set.
// The reply's header says how each part of the new build was made ("parts").
// One encoder and one decoder per direction, both here.
#pragma once

#include "fdo/daemon/ipc.h"
#include "fdo/jit/compiler.h"
#include "fdo/util/expected.h"

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace fdo::daemon {

// The parts of one partitioned build and its object set (the objects in
// the parts' order, fdo/jit/object_set.h).
struct HeldBuild {
  std::vector<jit::PartBuild> parts;
  std::string objects;
};

// Adds `held` to a compile job whose payload is the program.
void add_held_parts(Message& job, const HeldBuild& held);

// A compile job's program and the parts it offers, as views into its
// payload. Header fields of the wrong shape are Errc::invalid_argument; an
// object set that does not unpack into exactly the parts named is no error:
// `held` is then empty and `unreadable` says why (every part is compiled).
struct JobParts {
  std::string_view program;
  std::vector<jit::HeldPart> held;
  std::string unreadable;
};
Expected<JobParts> read_job_parts(const Message& job);

// The reply's "parts": one object per part (key, slice, object_hash,
// origin, functions, first).
nlohmann::json part_builds_to_json(const std::vector<jit::PartBuild>& parts);
Expected<std::vector<jit::PartBuild>> part_builds_from_json(const nlohmann::json& j);

// One explain clause: how many parts were reused, which were recompiled and
// why ("" when nothing was held and nothing reused).
std::string explain_parts(const std::vector<jit::PartBuild>& parts,
                          const std::map<std::string, std::string>& source_names);

} // namespace fdo::daemon
