// Schema versions and migrations of the profile store (PRAGMA user_version).
#pragma once

#include "fdo/profile_store/sqlite.h"

#include <cstdint>
#include <string_view>

namespace fdo::profile_store::schema {

// PRAGMA application_id of every fdo profile store ("FDOP"), so a store is
// never confused with another application's SQLite file.
inline constexpr std::int64_t kApplicationId = 0x46444f50;

int latest_version();
std::string_view description(int version);

// What the file says about itself, read in one snapshot.
struct Info {
  std::int64_t user_version = 0;
  std::int64_t application_id = 0;
  std::int64_t objects = 0; // rows of sqlite_schema
};
Expected<Info> read_info(sqlite::Connection& db);

// Applies migrations (current, target], each in its own IMMEDIATE transaction
// that re-reads user_version first, so two processes upgrading the same file
// at once apply every migration exactly once.
Status migrate(sqlite::Connection& db, int target);

} // namespace fdo::profile_store::schema
