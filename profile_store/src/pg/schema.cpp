// The PostgreSQL schema and its migrations: append-only SQL scripts, the
// version in table fdo_schema (one row), applied under an advisory lock so
// hosts starting together apply each migration once.
#include "fdo/util/log.h"
#include "internal.h"

#include <iterator>

namespace fdo::profile_store::pg {

namespace {

struct Migration {
  std::string_view description;
  std::string_view sql;
};

// uint64 sums are stored bit-for-bit in bigint; times are unix ms.
constexpr Migration kMigrations[] = {
    {"profiles, history, key mappings, program registry, feedback per host, batch ids",
     R"sql(
CREATE TABLE profiles (
  pk              text PRIMARY KEY,
  owner           bigint NOT NULL,
  current_version bigint,
  last_version    bigint NOT NULL,
  pinned          boolean NOT NULL DEFAULT false,
  updated_at      bigint NOT NULL,
  CHECK (current_version IS NULL OR (current_version > 0 AND current_version <= last_version))
);
CREATE INDEX profiles_by_owner ON profiles (owner);
CREATE TABLE profile_versions (
  pk         text NOT NULL REFERENCES profiles (pk) ON DELETE CASCADE,
  version    bigint NOT NULL CHECK (version > 0),
  digest     text NOT NULL,
  body       text NOT NULL,
  functions  bigint NOT NULL,
  source     text NOT NULL CHECK (source IN ('feedback', 'operator', 'import')),
  reason     text NOT NULL,
  author     bigint NOT NULL,
  host       text NOT NULL,
  stage      bigint NOT NULL,
  program    text NOT NULL,
  created_at bigint NOT NULL,
  PRIMARY KEY (pk, version)
);
CREATE TABLE profile_keys (
  ik         text PRIMARY KEY,
  pk         text NOT NULL,
  updated_at bigint NOT NULL
);
CREATE INDEX profile_keys_by_pk ON profile_keys (pk);
CREATE TABLE virtual_keys (
  ck         text PRIMARY KEY,
  vk         text NOT NULL,
  updated_at bigint NOT NULL,
  ik         text
);
CREATE INDEX virtual_keys_by_ik ON virtual_keys (ik);
CREATE TABLE programs (
  ik           text PRIMARY KEY,
  name         text NOT NULL,
  size         bigint NOT NULL CHECK (size >= 0),
  owner        bigint NOT NULL,
  first_seen   bigint NOT NULL,
  last_used    bigint NOT NULL,
  program_hash text,
  pk           text
);
CREATE INDEX programs_by_owner ON programs (owner);
CREATE INDEX programs_by_pk ON programs (pk, owner);
CREATE TABLE feedback (
  pk         text NOT NULL,
  version    bigint NOT NULL,
  host       text NOT NULL,
  stages     bigint NOT NULL,
  exec_ns    bigint NOT NULL,
  updated_at bigint NOT NULL,
  PRIMARY KEY (pk, version, host),
  FOREIGN KEY (pk, version) REFERENCES profile_versions (pk, version) ON DELETE CASCADE
);
CREATE TABLE feedback_counters (
  pk      text NOT NULL,
  version bigint NOT NULL,
  host    text NOT NULL,
  name    text NOT NULL,
  value   bigint NOT NULL,
  PRIMARY KEY (pk, version, host, name),
  FOREIGN KEY (pk, version, host) REFERENCES feedback (pk, version, host) ON DELETE CASCADE
);
CREATE TABLE feedback_function_counts (
  pk       text NOT NULL,
  version  bigint NOT NULL,
  host     text NOT NULL,
  function text NOT NULL,
  counts   bigint[] NOT NULL,
  PRIMARY KEY (pk, version, host, function),
  FOREIGN KEY (pk, version, host) REFERENCES feedback (pk, version, host) ON DELETE CASCADE
);
CREATE TABLE feedback_batches (
  batch_id   text PRIMARY KEY,
  applied_at bigint NOT NULL
);
CREATE INDEX feedback_batches_by_age ON feedback_batches (applied_at);
)sql"},
};

constexpr int kLatest = static_cast<int>(std::size(kMigrations));
// pg_advisory_xact_lock key of migrations ("FDOP").
constexpr std::int64_t kMigrationLock = 0x46444f50;

Expected<std::optional<int>> read_version(Conn& c) {
  FDO_TRY(Result exists, c.exec("SELECT to_regclass('fdo_schema') IS NOT NULL"));
  if (!exists.boolean(0, 0)) return std::optional<int>();
  FDO_TRY(Result v, c.exec("SELECT version FROM fdo_schema"));
  if (v.rows() != 1)
    return make_error(Errc::corrupt, "profile store " + c.endpoint() +
                                         ": table fdo_schema does not hold exactly one row");
  return std::optional<int>(static_cast<int>(v.i64(0, 0)));
}

Status check_newer(Conn& c, int version) {
  if (version > kLatest)
    return make_error(Errc::unsupported,
                      "profile store " + c.endpoint() + " has schema version " +
                          std::to_string(version) + ", newer than this build knows (" +
                          std::to_string(kLatest) + "); refusing to use it (upgrade fdo)");
  return ok();
}

} // namespace

int latest_version() {
  return kLatest;
}

Expected<int> schema_version(Conn& c) {
  FDO_TRY(auto v, read_version(c));
  return v ? *v : 0;
}

Status migrate(Conn& c, OpenMode mode) {
  FDO_TRY(auto found, read_version(c));
  if (found) FDO_TRY_STATUS(check_newer(c, *found));
  if (mode == OpenMode::read_only) {
    if (!found)
      return make_error(Errc::not_found, "profile store " + c.endpoint() +
                                             " has no fdo schema (start fdod on it once)");
    if (*found < kLatest)
      return make_error(Errc::unsupported, "profile store " + c.endpoint() +
                                               " has schema version " + std::to_string(*found) +
                                               " and needs an upgrade to " +
                                               std::to_string(kLatest) + " before read-only use");
    return ok();
  }
  if (found && *found == kLatest) return ok();
  FDO_TRY(Tx tx, Tx::begin(c));
  FDO_TRY_STATUS(c.exec("SELECT pg_advisory_xact_lock($1)", {p(kMigrationLock)}));
  FDO_TRY_STATUS(
      c.exec_script("CREATE TABLE IF NOT EXISTS fdo_schema (version integer NOT NULL); "
                    "INSERT INTO fdo_schema SELECT 0 WHERE NOT EXISTS (SELECT 1 FROM fdo_schema)"));
  // Re-read under the lock: another host may have migrated meanwhile.
  FDO_TRY(auto now, read_version(c));
  int current = now ? *now : 0;
  FDO_TRY_STATUS(check_newer(c, current));
  for (int v = current + 1; v <= kLatest; ++v) {
    if (Status s = c.exec_script(kMigrations[v - 1].sql); !s)
      return std::move(s).error().context("migration to schema version " + std::to_string(v) +
                                          " (" + std::string(kMigrations[v - 1].description) + ")");
    FDO_TRY_STATUS(c.exec("UPDATE fdo_schema SET version = $1", {p(v)}));
    log::info("profile store " + c.endpoint() + ": schema upgraded to version " +
              std::to_string(v));
  }
  return tx.commit();
}

} // namespace fdo::profile_store::pg
