// Where a store lives, as ProfileStore::open reads it: a filesystem path
// (SQLite) or a libpq URI (PostgreSQL).
#pragma once

#include <string>
#include <string_view>

namespace fdo::profile_store {

// "postgresql://..." or "postgres://...".
bool is_postgres_uri(std::string_view location);

// The location fit for logs and error messages: a URI's password (in the
// user info, or a password= parameter) replaced by "***"; a path unchanged.
std::string redact_location(std::string_view location);

} // namespace fdo::profile_store
