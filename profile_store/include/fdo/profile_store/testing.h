// Hooks for tests of schema migrations. Not for production callers:
// ProfileStore::open always upgrades to the latest version.
#pragma once

#include "fdo/util/expected.h"

#include <string>
#include <string_view>

namespace fdo::profile_store::testing {

// The schema version this build creates and upgrades to.
int latest_schema_version();
// What migration `version` does (1-based), for messages.
std::string_view migration_description(int version);
// Creates the database at `path` (or upgrades an existing one) to exactly
// `version` by applying migrations 1..version, each in its own transaction,
// as a build that knew only those migrations would have. version 0 leaves an
// empty SQLite database.
Status create_database_at_version(const std::string& path, int version);

} // namespace fdo::profile_store::testing
