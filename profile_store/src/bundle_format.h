// The bundle format (docs/profile_store.md, "Export/import bundle"), shared by
// the back ends: the JSON of a version, the envelope, validation of an
// incoming bundle, and what import does with each bundled profile.
#pragma once

#include "fdo/profile_store/profile_store.h"

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace fdo::profile_store::detail {

nlohmann::json version_json(const StoredProfile& p);
// {"format", "format_version", "exported_at", "history", "profiles"}
nlohmann::json bundle_envelope(nlohmann::json profiles, ExportHistory history);
// One exported profile: its state, current version (or null) and, for
// ExportHistory::full, its history.
nlohmann::json bundle_entry(const std::string& pk, std::int64_t owner, bool pinned,
                            std::int64_t last_version, const std::optional<StoredProfile>& current,
                            const std::vector<StoredProfile>* history);

// One bundled profile, validated.
struct Incoming {
  std::string pk;
  bool pinned = false;
  std::optional<ProfileDoc> doc; // nullopt: the bundle has no current version
  std::string digest;
  std::int64_t version = 0; // in the source store
  std::string reason, host, program;
  std::int64_t stage = 0;
};
// Format, version, keys, documents and digests, before anything is written.
Expected<std::vector<Incoming>> parse_bundle(const nlohmann::json& bundle);

// With r.version / r.digest holding the local current version and digest:
// sets r.action and says whether the bundled profile is written (conflict
// under ImportConflict::fail).
Expected<bool> decide_import(const Incoming& in, ImportConflict policy, ImportedProfile& r);
// The write that imports `in` over local version `local`.
WriteRequest import_request(const Incoming& in, std::int64_t owner, const ActingOwner& acting_owner,
                            std::int64_t local);

} // namespace fdo::profile_store::detail
