// The JSON views of stored profiles that fdod's profile.list / profile.history /
// program.list return (schemas/methods/) and that fdoctl prints from the database when the
// daemon is down: one definition, so both say the same thing.
#pragma once

#include "fdo/profile_store/profile_store.h"

#include <nlohmann/json.hpp>

namespace fdo::profile_store {

// {profile_key, version, digest, pinned, owner, functions, updated_at}
nlohmann::json summary_to_json(const ProfileSummary& summary);
// {version, digest, reason, created_at, stage, host, program, source}
nlohmann::json version_to_json(const StoredProfile& profile);
// {program, name, size, profile_key (null when unknown), first_seen, last_used}
nlohmann::json program_to_json(const ProgramInfo& program);

} // namespace fdo::profile_store
