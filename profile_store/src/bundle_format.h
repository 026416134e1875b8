// The bundle format (docs/profile_store.md, "Export/import bundle"), shared by
// the back ends: the JSON of a version, the envelope, validation of an
// incoming bundle, and what import does with each bundled profile.
#pragma once

#include "fdo/profile_store/profile_store.h"
#include "profile_rules.h"

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

// invalid_argument for ImportNewKeys::own_programs without an acting owner.
Status check_import_request(ImportNewKeys new_keys, const ActingOwner& acting_owner);

// What import needs of a back end, inside the one transaction the import
// runs in (all or nothing).
class ImportTarget {
public:
  virtual ~ImportTarget() = default;
  // The key's profiles row (nullopt: none), locked until the transaction
  // ends where the engine locks rows.
  virtual Expected<std::optional<ProfileState>> state(const std::string& pk) = 0;
  // The digest of the key's current version (nullopt: none).
  virtual Expected<std::optional<std::string>> current_digest(const std::string& pk) = 0;
  // A program of `owner` records `pk` as its profile key.
  virtual Expected<bool> owns_program_with_pk(std::int64_t owner, const std::string& pk) = 0;
  // The versioned write with its checks; its version.
  virtual Expected<std::int64_t> write(const WriteRequest& req, std::int64_t now) = 0;
  virtual Status set_pinned(const std::string& pk) = 0;
};

// The import algorithm both back ends share (docs/profile_store.md,
// "Export/import bundle" and "Tenants"): with an acting owner every key is
// checked first (another tenant's key, or a new key the tenant may not
// create, fails the whole import as not_found); then each bundled profile
// is compared with the local current one, written or not per `policy`, and
// pinned when the bundle says so. Any error leaves nothing imported: the
// caller rolls its transaction back.
Expected<std::vector<ImportedProfile>> import_into(ImportTarget& target,
                                                   const std::vector<Incoming>& incoming,
                                                   std::int64_t owner, ImportConflict policy,
                                                   const ActingOwner& acting_owner,
                                                   ImportNewKeys new_keys, std::int64_t now);

// With r.version / r.digest holding the local current version and digest:
// sets r.action and says whether the bundled profile is written (conflict
// under ImportConflict::fail).
Expected<bool> decide_import(const Incoming& in, ImportConflict policy, ImportedProfile& r);
// The write that imports `in` over local version `local`.
WriteRequest import_request(const Incoming& in, std::int64_t owner, const ActingOwner& acting_owner,
                            std::int64_t local);

} // namespace fdo::profile_store::detail
