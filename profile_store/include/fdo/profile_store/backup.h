// Copies of the profile store with SQLite's online backup API: a consistent
// snapshot of the whole database (every profile with its full history and
// owners, the feedback, the key mappings, the program registry), safe to
// take while fdod writes to it (WAL). docs/profile_store.md, "Backup and
// restore"; `fdoctl backup` / `fdoctl restore`.
#pragma once

#include "fdo/util/expected.h"

#include <cstdint>
#include <string>

namespace fdo::profile_store {

struct BackupSummary {
  std::int64_t pages = 0; // database pages copied
  std::int64_t bytes = 0; // size of the copy
};

// Copies the database at `db_path` (opened read-only) to `to_path`, which
// must not exist yet (written as <to_path>.tmp, fsynced, then renamed, mode
// 0600). Errors name the file.
Expected<BackupSummary> backup_database(const std::string& db_path, const std::string& to_path);

// Replaces the database at `db_path` with the copy at `from_path`: the copy
// is checked (it opens, passes PRAGMA quick_check and has fdo's schema), then
// written over `db_path` page by page through the backup API, so a reader
// sees the old or the new database, never a mix. fdod must not be running
// on it (the caller checks; a running fdod restores through its own store,
// ProfileStore::restore_from); any -wal/-shm of the old database is folded
// in by SQLite.
Expected<BackupSummary> restore_database(const std::string& from_path, const std::string& db_path);

} // namespace fdo::profile_store
