#include "schema.h"

#include "fdo/profile_store/testing.h"
#include "fdo/util/log.h"

#include <iterator>
#include <optional>
#include <string>
#include <utility>

namespace fdo::profile_store::schema {

namespace {

// Whether a migration runs with foreign keys enforced. One that rebuilds a
// parent table (copy, drop, rename: SQLite's way to change a table's layout)
// runs without them, as SQLite's ALTER TABLE documentation prescribes: with
// them, dropping the old parent would first delete its rows and cascade into
// every child table. Its result is checked (PRAGMA foreign_key_check) before
// it commits.
enum class ForeignKeys { enforced, off_while_rebuilt };

struct Migration {
  std::string_view description;
  std::string_view sql;
  ForeignKeys foreign_keys = ForeignKeys::enforced;
};

// Append-only: a migration that has shipped is never edited, because
// databases in the field already ran it. A fresh database runs them all in
// order, so old and new databases end with byte-identical schemas.
constexpr Migration kMigrations[] = {
    // v1
    {"profiles, version history, profile key and virtual key mappings",
     R"sql(
PRAGMA application_id = 1178881872; -- 0x46444f50 "FDOP" (schema::kApplicationId)
CREATE TABLE profiles (
  pk              TEXT PRIMARY KEY NOT NULL,
  owner           INTEGER NOT NULL,
  current_version INTEGER,                    -- NULL: no profile (reset)
  last_version    INTEGER NOT NULL,           -- highest version ever written
  pinned          INTEGER NOT NULL DEFAULT 0 CHECK (pinned IN (0, 1)),
  updated_at      INTEGER NOT NULL,           -- unix ms
  CHECK (current_version IS NULL OR (current_version > 0 AND current_version <= last_version))
) STRICT, WITHOUT ROWID;
CREATE INDEX profiles_by_owner ON profiles (owner);
CREATE TABLE profile_versions (
  pk         TEXT NOT NULL REFERENCES profiles (pk) ON DELETE CASCADE,
  version    INTEGER NOT NULL CHECK (version > 0),
  digest     TEXT NOT NULL,
  body       TEXT NOT NULL,                   -- canonical JSON of the ProfileDoc
  functions  INTEGER NOT NULL,
  source     TEXT NOT NULL CHECK (source IN ('feedback', 'operator', 'import')),
  reason     TEXT NOT NULL,
  author     INTEGER NOT NULL,
  host       TEXT NOT NULL,
  stage      INTEGER NOT NULL,
  program    TEXT NOT NULL,
  created_at INTEGER NOT NULL,                -- unix ms
  PRIMARY KEY (pk, version)
) STRICT, WITHOUT ROWID;
CREATE TABLE profile_keys (
  ik         TEXT PRIMARY KEY NOT NULL,
  pk         TEXT NOT NULL,                   -- no FK: mapped before a profile exists
  updated_at INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
CREATE INDEX profile_keys_by_pk ON profile_keys (pk);
CREATE TABLE virtual_keys (
  ck         TEXT PRIMARY KEY NOT NULL,
  vk         TEXT NOT NULL,
  updated_at INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
)sql"},
    // v2
    {"program registry (backfilled from the profile key mapping)",
     R"sql(
CREATE TABLE programs (
  ik         TEXT PRIMARY KEY NOT NULL,
  name       TEXT NOT NULL,
  size       INTEGER NOT NULL CHECK (size >= 0),
  owner      INTEGER NOT NULL,
  first_seen INTEGER NOT NULL,
  last_used  INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
CREATE INDEX programs_by_owner ON programs (owner);
-- Programs seen before the registry existed: known by their IK only; the
-- owner is the owner of the profile they map to (0 if it has none yet).
INSERT INTO programs (ik, name, size, owner, first_seen, last_used)
  SELECT k.ik, '', 0, COALESCE(p.owner, 0), k.updated_at, k.updated_at
  FROM profile_keys k LEFT JOIN profiles p ON p.pk = k.pk;
)sql"},
    // v3
    {"feedback aggregates per profile version",
     R"sql(
CREATE TABLE feedback (
  pk         TEXT NOT NULL,
  version    INTEGER NOT NULL,
  stages     INTEGER NOT NULL,                -- uint64 stored bit-for-bit
  exec_ns    INTEGER NOT NULL,                -- uint64 stored bit-for-bit
  updated_at INTEGER NOT NULL,
  PRIMARY KEY (pk, version),
  FOREIGN KEY (pk, version) REFERENCES profile_versions (pk, version) ON DELETE CASCADE
) STRICT, WITHOUT ROWID;
CREATE TABLE feedback_counters (
  pk      TEXT NOT NULL,
  version INTEGER NOT NULL,
  name    TEXT NOT NULL,
  value   INTEGER NOT NULL,                   -- uint64 stored bit-for-bit
  PRIMARY KEY (pk, version, name),
  FOREIGN KEY (pk, version) REFERENCES feedback (pk, version) ON DELETE CASCADE
) STRICT, WITHOUT ROWID;
CREATE TABLE feedback_function_counts (
  pk       TEXT NOT NULL,
  version  INTEGER NOT NULL,
  function TEXT NOT NULL,
  counts   BLOB NOT NULL,                     -- little-endian uint64 array
  PRIMARY KEY (pk, version, function),
  FOREIGN KEY (pk, version) REFERENCES feedback (pk, version) ON DELETE CASCADE
) STRICT, WITHOUT ROWID;
)sql"},
    // v4
    {"virtual key mappings remember their program (IK)",
     R"sql(
-- NULL for mappings made before v4: their program is not known.
ALTER TABLE virtual_keys ADD COLUMN ik TEXT;
CREATE INDEX virtual_keys_by_ik ON virtual_keys (ik);
)sql"},
    // v5
    {"programs record their program hash and scoped profile key",
     R"sql(
-- program_hash lets the daemon refuse a program file that no longer holds
-- the registered bytes. It needs the bytes, so rows from before v5 keep it
-- NULL until the daemon verifies their file against their IK and records it.
ALTER TABLE programs ADD COLUMN program_hash TEXT;
-- The profile key a program's tenant owns through it. The profile key
-- mapping already knows it for every program that was ever compiled.
ALTER TABLE programs ADD COLUMN pk TEXT;
UPDATE programs SET pk = (SELECT k.pk FROM profile_keys k WHERE k.ik = programs.ik);
CREATE INDEX programs_by_pk ON programs (pk, owner);
)sql"},
    // v6
    {"feedback kept per host; applied feedback batch ids",
     R"sql(
-- A profile version's evidence is the sum over the hosts that ran it. Rows
-- from before v6 did not know their host: they become host ''.
CREATE TABLE feedback_v6 (
  pk         TEXT NOT NULL,
  version    INTEGER NOT NULL,
  host       TEXT NOT NULL,                   -- '' = not known
  stages     INTEGER NOT NULL,                -- uint64 stored bit-for-bit
  exec_ns    INTEGER NOT NULL,                -- uint64 stored bit-for-bit
  updated_at INTEGER NOT NULL,
  PRIMARY KEY (pk, version, host),
  FOREIGN KEY (pk, version) REFERENCES profile_versions (pk, version) ON DELETE CASCADE
) STRICT, WITHOUT ROWID;
CREATE TABLE feedback_counters_v6 (
  pk      TEXT NOT NULL,
  version INTEGER NOT NULL,
  host    TEXT NOT NULL,
  name    TEXT NOT NULL,
  value   INTEGER NOT NULL,                   -- uint64 stored bit-for-bit
  PRIMARY KEY (pk, version, host, name),
  FOREIGN KEY (pk, version, host) REFERENCES feedback_v6 (pk, version, host) ON DELETE CASCADE
) STRICT, WITHOUT ROWID;
CREATE TABLE feedback_function_counts_v6 (
  pk       TEXT NOT NULL,
  version  INTEGER NOT NULL,
  host     TEXT NOT NULL,
  function TEXT NOT NULL,
  counts   BLOB NOT NULL,                     -- little-endian uint64 array
  PRIMARY KEY (pk, version, host, function),
  FOREIGN KEY (pk, version, host) REFERENCES feedback_v6 (pk, version, host) ON DELETE CASCADE
) STRICT, WITHOUT ROWID;
INSERT INTO feedback_v6 (pk, version, host, stages, exec_ns, updated_at)
  SELECT pk, version, '', stages, exec_ns, updated_at FROM feedback;
INSERT INTO feedback_counters_v6 (pk, version, host, name, value)
  SELECT pk, version, '', name, value FROM feedback_counters;
INSERT INTO feedback_function_counts_v6 (pk, version, host, function, counts)
  SELECT pk, version, '', function, counts FROM feedback_function_counts;
DROP TABLE feedback_function_counts;
DROP TABLE feedback_counters;
DROP TABLE feedback;
ALTER TABLE feedback_v6 RENAME TO feedback;
ALTER TABLE feedback_counters_v6 RENAME TO feedback_counters;
ALTER TABLE feedback_function_counts_v6 RENAME TO feedback_function_counts;
-- Ids of applied feedback batches (append_feedback's batch_id), so a batch
-- replayed after a lost acknowledgement is applied once. Pruned by age.
CREATE TABLE feedback_batches (
  batch_id   TEXT PRIMARY KEY NOT NULL,
  applied_at INTEGER NOT NULL                 -- unix ms
) STRICT, WITHOUT ROWID;
CREATE INDEX feedback_batches_by_age ON feedback_batches (applied_at);
)sql"},
    // v7
    {"profile versions in a rowid table, the document last",
     R"sql(
-- A big program's document is hundreds of KB. As the row of a WITHOUT ROWID
-- table (an index b-tree) a 400 KiB one cost ~2 ms more to insert and delete
-- and ~1 ms more to commit than in a rowid table; the body goes last, so the
-- columns a summary reads lie before its overflow pages.
CREATE TABLE profile_versions_v7 (
  pk         TEXT NOT NULL REFERENCES profiles (pk) ON DELETE CASCADE,
  version    INTEGER NOT NULL CHECK (version > 0),
  digest     TEXT NOT NULL,
  functions  INTEGER NOT NULL,
  source     TEXT NOT NULL CHECK (source IN ('feedback', 'operator', 'import')),
  reason     TEXT NOT NULL,
  author     INTEGER NOT NULL,
  host       TEXT NOT NULL,
  stage      INTEGER NOT NULL,
  program    TEXT NOT NULL,
  created_at INTEGER NOT NULL,                -- unix ms
  body       TEXT NOT NULL,                   -- canonical JSON of the ProfileDoc
  PRIMARY KEY (pk, version)
) STRICT;
INSERT INTO profile_versions_v7 (pk, version, digest, functions, source, reason, author, host,
                                 stage, program, created_at, body)
  SELECT pk, version, digest, functions, source, reason, author, host, stage, program,
         created_at, body
  FROM profile_versions;
DROP TABLE profile_versions;
ALTER TABLE profile_versions_v7 RENAME TO profile_versions;
)sql",
     ForeignKeys::off_while_rebuilt},
};

constexpr int kLatest = static_cast<int>(std::size(kMigrations));

// Foreign keys off on `db` for its lifetime; on again (when they were on)
// after it.
class ForeignKeysOff {
public:
  static Expected<ForeignKeysOff> take(sqlite::Connection& db) {
    FDO_TRY(std::int64_t on, db.query_int("PRAGMA foreign_keys"));
    FDO_TRY_STATUS(db.exec("PRAGMA foreign_keys = OFF"));
    return ForeignKeysOff(db, on != 0);
  }
  ForeignKeysOff(ForeignKeysOff&& o) noexcept : db_(std::exchange(o.db_, nullptr)), on_(o.on_) {}
  ForeignKeysOff& operator=(ForeignKeysOff&&) = delete;
  ~ForeignKeysOff() {
    if (db_ == nullptr || !on_) return;
    if (Status s = db_->exec("PRAGMA foreign_keys = ON"); !s)
      log::error("profile store " + db_->path() +
                 ": foreign keys could not be turned on again: " + s.error().describe());
  }

private:
  ForeignKeysOff(sqlite::Connection& db, bool on) : db_(&db), on_(on) {}
  sqlite::Connection* db_;
  bool on_;
};

} // namespace

int latest_version() {
  return kLatest;
}

std::string_view description(int version) {
  if (version < 1 || version > kLatest) return "unknown schema version";
  return kMigrations[version - 1].description;
}

Expected<Info> read_info(sqlite::Connection& db) {
  // One read transaction so a concurrent first-time migration by another
  // process is seen either entirely or not at all.
  FDO_TRY(auto tx, sqlite::Transaction::begin(db, sqlite::TxKind::deferred));
  Info info;
  FDO_TRY(info.user_version, db.query_int("PRAGMA user_version"));
  FDO_TRY(info.application_id, db.query_int("PRAGMA application_id"));
  FDO_TRY(info.objects, db.query_int("SELECT count(*) FROM sqlite_schema"));
  FDO_TRY_STATUS(tx.commit());
  return info;
}

Status migrate(sqlite::Connection& db, int target) {
  if (target < 0 || target > kLatest)
    return make_error(Errc::internal, "migration target " + std::to_string(target) +
                                          " outside 0.." + std::to_string(kLatest));
  for (int v = 1; v <= target; ++v) {
    const Migration& m = kMigrations[v - 1];
    // Declared before the transaction, so it ends after it (the pragma is a
    // no-op inside one).
    std::optional<ForeignKeysOff> fk_off;
    if (m.foreign_keys == ForeignKeys::off_while_rebuilt) {
      Expected<ForeignKeysOff> off = ForeignKeysOff::take(db);
      if (!off) return std::move(off).error();
      fk_off.emplace(std::move(*off));
    }
    FDO_TRY(auto tx, sqlite::Transaction::begin(db, sqlite::TxKind::immediate));
    FDO_TRY(std::int64_t current, db.query_int("PRAGMA user_version"));
    if (current >= v) continue; // already applied (possibly by another process just now)
    if (current != v - 1)
      return make_error(Errc::internal, "schema version " + std::to_string(current) +
                                            " cannot take migration " + std::to_string(v));
    const std::string what = "migration to schema version " + std::to_string(v) + " (" +
                             std::string(m.description) + ")";
    if (Status s = db.exec(m.sql); !s) return std::move(s).error().context(what);
    if (fk_off) {
      FDO_TRY(auto check, db.prepare("PRAGMA foreign_key_check"));
      FDO_TRY(bool violation, check.step());
      if (violation)
        return make_error(Errc::corrupt, what + " left a row of table '" + check.column_text(0) +
                                             "' without its parent in '" + check.column_text(2) +
                                             "' (nothing changed)");
    }
    // PRAGMA arguments cannot be bound parameters.
    FDO_TRY_STATUS(db.exec("PRAGMA user_version = " + std::to_string(v)));
    FDO_TRY_STATUS(tx.commit());
    log::debug("profile store " + db.path() + ": schema upgraded to version " + std::to_string(v) +
               " (" + std::string(m.description) + ")");
  }
  return ok();
}

} // namespace fdo::profile_store::schema

namespace fdo::profile_store::testing {

int latest_schema_version() {
  return schema::latest_version();
}

std::string_view migration_description(int version) {
  return schema::description(version);
}

Status create_database_at_version(const std::string& path, int version) {
  FDO_TRY(auto db, sqlite::Connection::open(path, sqlite::Access::read_write_create));
  FDO_TRY_STATUS(db.exec("PRAGMA journal_mode = WAL"));
  FDO_TRY_STATUS(db.exec("PRAGMA foreign_keys = ON"));
  return schema::migrate(db, version);
}

} // namespace fdo::profile_store::testing
