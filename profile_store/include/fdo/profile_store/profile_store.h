// The profile store: versioned optimization profiles (current version +
// history per profile key), the profile key mapping IK -> PK, the virtual key
// mapping CK -> VK, the program registry and aggregated execution feedback.
// A facade over a back end (backend.h): an embedded SQLite database (one
// host, the default) or a PostgreSQL server shared by a fleet of hosts. See
// docs/profile_store.md for the schemas, migrations, durability settings and
// concurrency model; what follows describes the SQLite back end, the
// PostgreSQL one keeps the same semantics across processes and hosts.
//
// Keys (pk, ik, ck, vk) are opaque non-empty strings to the store.
//
// Thread safety: every member function may be called from any number of
// threads at once. Writes go through one write connection and take turns;
// const reads use a small pool of separate read connections
// (Options::read_connections, opened on demand), so in WAL mode a read never
// waits for a write in progress (not even one stuck waiting for another
// process's lock, or in its fsync) and sees the last committed state. A read
// that runs several statements sees one snapshot. Several processes may open
// the same file: SQLite's WAL locking serialises writers (waiting up to
// Options::busy_timeout, then Errc::timeout) and readers never block.
#pragma once

#include "fdo/profile_store/backup.h"
#include "fdo/util/enum_names.h"
#include "fdo/util/expected.h"
#include "fdo/util/profile.h"

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fdo::profile_store {

class Backend;

// Which back end a store runs on.
enum class StoreKind { sqlite, postgresql };
inline constexpr EnumNames<StoreKind, 2> kStoreKindNames{
    {{{StoreKind::sqlite, "sqlite"}, {StoreKind::postgresql, "postgresql"}}}};
std::string_view to_string(StoreKind kind);

enum class OpenMode {
  read_write, // creates the file if missing, upgrades an older schema
  read_only   // inspection: never writes; works while another process writes
};

// SQLite's synchronous setting in WAL mode. full: every commit fsyncs the WAL,
// so a committed profile version survives power loss. normal: commits survive
// process crashes but the last ones may be lost on power loss (for benchmarks
// and throwaway stores; see docs/profile_store.md for measured costs).
enum class Synchronous { full, normal };

// PostgreSQL only: what open does when the server does not answer.
// refuse: open fails with Errc::unavailable (tools, tests). defer: open
// succeeds; each call answers Errc::unavailable until the server answers, and
// the first connection that works runs the schema check and migrations before
// any call uses it (fdod, which serves through an outage: docs/fleet.md). A
// server that answers but refuses (newer schema, bad options, credentials:
// permission_denied, no such database: not_found) still fails open; once open,
// a store reports such refusals as unavailable naming the cause
// (docs/profile_store.md, "Configuration errors are not outages").
enum class WhenUnreachable { refuse, defer };

// SQLite only: whether current profiles and key mappings are also kept in this
// process's memory (read_view.h). none: every read queries the file (tools,
// tests, any process that may share the file with a writer). in_process: the
// process opening the store is its only writer while it is open (fdod, which
// holds its state directory's lock); reads are served from memory, kept
// coherent by every change made through this store, so a steady program's
// stage reads nothing from the file. PostgreSQL ignores it: its change
// listener keeps its own cache coherent across hosts.
enum class ReadView { none, in_process };

struct Options {
  OpenMode mode = OpenMode::read_write;
  // History versions kept per profile key (>= 1), oldest pruned. Changeable
  // later with ProfileStore::set_retention.
  int retention = 50;
  std::chrono::milliseconds busy_timeout{5000};
  Synchronous synchronous = Synchronous::full;
  // Most read connections the store opens (>= 1); each is opened on first
  // need, so a store that is only written never opens one. PostgreSQL: the
  // most pooled connections (reads and writes), also opened on first need.
  int read_connections = 4;
  // PostgreSQL only: the most time opening a connection may take (libpq
  // connect_timeout, whole seconds, at least 1 s; then Errc::unavailable), and
  // the server's limit on each statement (statement_timeout; then
  // Errc::timeout). 0 disables the statement limit.
  std::chrono::milliseconds connect_timeout{5000};
  std::chrono::milliseconds statement_timeout{30000};
  WhenUnreachable when_unreachable = WhenUnreachable::refuse;
  ReadView read_view = ReadView::none;
};

// The tenant (peer uid) a mutating call acts for. When set, the call may only
// change a profile that uid owns: a profile owned by another uid is reported
// as Errc::not_found "no profile <pk>", exactly like a key that does not exist
// (so existence is not leaked), checked inside the call's own transaction on
// the key it changes. std::nullopt (the default) checks nothing: operators,
// tools, tests, and a daemon that shares profiles across tenants.
using ActingOwner = std::optional<std::int64_t>;

// Who asked for a profile write. Feedback writes are refused on pinned
// profiles; operator and import writes are not.
enum class WriteSource { feedback, operator_, import };
inline constexpr EnumNames<WriteSource, 3> kWriteSourceNames{{{{WriteSource::feedback, "feedback"},
                                                               {WriteSource::operator_, "operator"},
                                                               {WriteSource::import, "import"}}}};
std::string_view to_string(WriteSource source); // "feedback", "operator", "import"
Expected<WriteSource> parse_write_source(std::string_view s);

struct StoredProfile;

struct WriteInfo {
  WriteSource source = WriteSource::feedback;
  std::string reason;
  std::int64_t owner = 0; // uid of the writer; owner of the profile if this write creates it
  std::string host;
  std::int64_t stage = 0;
  std::string program; // IK of the program whose feedback produced the version
  // Tenant check (see ActingOwner). With a tenant, writing a version to a key
  // that does not exist (expected_version > 0) is not_found as well, not
  // conflict, so the two cases read the same.
  ActingOwner acting_owner;
  // Where a successful write leaves the digest of the version it stored (the
  // store's profile_digest of the document), for a caller that needs it next
  // and would otherwise hash the document again; null: not wanted.
  std::string* digest_out = nullptr;
  // Where a successful write leaves the version it stored, exactly as a read
  // of it returns it (shared and immutable), so that the writer's next read
  // need not fetch and compare the body it just wrote; null: not wanted. Left
  // as it was by a back end that does not build it (PostgreSQL) and by a
  // write that fails (in a batch: by every write of a batch that fails).
  std::shared_ptr<const StoredProfile>* stored_out = nullptr;
};

// One version of a profile as stored. The stored document's provenance is
// stamped from the WriteInfo and the commit time, so body, doc and the
// columns below always agree.
struct StoredProfile {
  std::string pk;
  std::int64_t version = 0;
  std::string digest; // profile_digest(doc)
  ProfileDoc doc;
  std::string body;        // canonical JSON of doc
  bool pinned = false;     // the profile's pin state now (not when the version was written)
  std::int64_t owner = 0;  // the profile's owner uid
  std::int64_t author = 0; // uid that wrote this version (WriteInfo::owner)
  WriteSource source = WriteSource::feedback;
  std::int64_t created_at = 0; // unix time in milliseconds (UTC) of the commit
  std::string reason;
  std::string host;
  std::int64_t stage = 0;
  std::string program;
};

// A current profile as the read view keeps it: shared and immutable (null: none).
using SharedProfile = std::shared_ptr<const StoredProfile>;

struct ProfileSummary {
  std::string pk;
  std::int64_t version = 0;      // current version; 0 = no profile (never written or reset)
  std::int64_t last_version = 0; // highest version ever written (never reused)
  std::string digest;            // of the current version; no_profile_digest() when none
  bool pinned = false;
  std::int64_t owner = 0;
  std::int64_t updated_at = 0; // unix ms of the last write, pin, unpin or reset
  std::int64_t functions = 0;  // functions in the current version
};

struct WriteRequest {
  std::string pk;
  std::int64_t expected_version = 0; // 0: "no profile yet" (or after reset)
  ProfileDoc doc;
  WriteInfo info;
};

enum class MappingChange { inserted, unchanged, replaced };
struct MappingResult {
  MappingChange change = MappingChange::inserted;
  std::optional<std::string> previous; // the old value when replaced
};

struct MappingRemoval {
  std::int64_t profile_keys = 0;
  std::int64_t virtual_keys = 0;
};

struct RemoveSummary {
  std::int64_t versions = 0;      // history rows deleted
  std::int64_t profile_keys = 0;  // IK -> PK mappings to the profile deleted
  std::int64_t virtual_keys = 0;  // CK -> VK mappings of those IKs deleted
  std::int64_t feedback_rows = 0; // (pk, version) feedback aggregates deleted
};

struct ProgramInfo {
  std::string ik;
  std::string name;
  std::int64_t size = 0;       // program bytes
  std::int64_t owner = 0;      // uid of the first registrant
  std::int64_t first_seen = 0; // unix ms; set on first registration only
  std::int64_t last_used = 0;  // unix ms; bumped by register_program and touch_program
  // The identity-free hash of the scoped program bytes (cache::program_hash),
  // so a daemon can tell the registered bytes from a file put in their place.
  // Empty: not known (a row from before schema v5 that no daemon has verified
  // yet). Once recorded it never changes.
  std::string program_hash = {};
  // The tenant-scoped profile key of the program: the one key a tenant may
  // create by importing a profile (import_bundle, ImportNewKeys). Empty: not
  // known. Updated by each registration that knows it.
  std::string pk = {};
};

// One stage's (or several stages') feedback for one profile version.
struct FeedbackRow {
  std::string pk;
  std::int64_t version = 0;
  std::uint64_t stages = 0;
  std::uint64_t exec_ns = 0;
  std::map<std::string, std::uint64_t> counters; // e.g. "branch-misses" -> sum
  // Instrumentation counts per function, in the instrumentation's order.
  std::map<std::string, std::vector<std::uint64_t>> function_counts;
  // The host that ran the stages ("" = not known). Feedback is kept per
  // (pk, version, host); totals sum over hosts.
  std::string host = {};
};

// Rows written together by append_feedback, in one transaction.
using FeedbackBatch = std::vector<FeedbackRow>;

// All feedback recorded for one (pk, version), summed (saturating at 2^64-1).
struct FeedbackTotals {
  std::string pk;
  std::int64_t version = 0;
  std::uint64_t stages = 0;
  std::uint64_t exec_ns = 0;
  std::map<std::string, std::uint64_t> counters;
  std::map<std::string, std::vector<std::uint64_t>> function_counts;
  std::int64_t updated_at = 0; // unix ms of the last batch that touched it
  // Stages per contributing host ("" = rows that named no host).
  std::map<std::string, std::uint64_t> host_stages = {};
};

struct AppendResult {
  std::size_t applied = 0;
  // Rows whose (pk, version) is not in the history (pruned by retention,
  // removed, or never written): reported, not stored.
  std::vector<std::pair<std::string, std::int64_t>> skipped;
  // The batch id was already applied to this store: nothing applied now.
  bool duplicate = false;
};

enum class ExportHistory { current_only, full };
// The spellings are the bundle's "history" field.
inline constexpr EnumNames<ExportHistory, 2> kExportHistoryNames{
    {{{ExportHistory::current_only, "current_only"}, {ExportHistory::full, "full"}}}};
std::string_view to_string(ExportHistory history);

// What import does when the profile key already has a current profile with a
// different digest: keep the local one, write the imported one as a new
// version on top, or refuse the whole import.
enum class ImportConflict { skip, overwrite, fail };
inline constexpr EnumNames<ImportConflict, 3> kImportConflictNames{
    {{{ImportConflict::skip, "skip"},
      {ImportConflict::overwrite, "overwrite"},
      {ImportConflict::fail, "fail"}}}};
std::string_view to_string(ImportConflict policy);

enum class ImportAction {
  created,   // no local profile: written as the first version (or after a reset)
  updated,   // written as a new version on top of a different local profile
  unchanged, // the local current profile already has the imported digest
  skipped    // local profile differs and the policy is skip
};
inline constexpr EnumNames<ImportAction, 4> kImportActionNames{
    {{{ImportAction::created, "created"},
      {ImportAction::updated, "updated"},
      {ImportAction::unchanged, "unchanged"},
      {ImportAction::skipped, "skipped"}}}};
std::string_view to_string(ImportAction action);

// Which bundled profile keys that do not exist here an import may create.
enum class ImportNewKeys {
  any, // operators, tools, a daemon that shares profiles across tenants
  // Only the profile key of a program registered to the acting owner
  // (ProgramInfo::pk): profile keys are predictable, so without this a tenant
  // could create another tenant's future key first and shut its owner out.
  own_programs,
};

struct ImportedProfile {
  std::string pk;
  ImportAction action = ImportAction::created;
  std::int64_t version = 0; // the local current version after the import
  std::string digest;
};

class ProfileStore {
public:
  // Bundle format written by export_bundle and accepted by import_bundle.
  static constexpr std::string_view kBundleFormat = "fdo-profile-bundle";
  static constexpr int kBundleVersion = 1;
  // How long an applied feedback batch id is remembered (append_feedback).
  static constexpr std::chrono::hours kBatchIdRetention{24 * 7};

  // `location` is a filesystem path (SQLite) or a libpq URI
  // "postgresql://..." / "postgres://..." (PostgreSQL).
  //
  // SQLite: opens (read_write: creates or upgrades) the store at the path. A file that
  // is not an SQLite database, is damaged (PRAGMA quick_check), belongs to
  // another application, or has a newer schema than this build knows is
  // refused with an error naming the path, and is left byte-for-byte
  // untouched. A database file created here gets mode 0600 whatever the
  // umask (SQLite gives its -wal and -shm files the same mode).
  static Expected<ProfileStore> open(const std::string& location, const Options& options = {});
  // Whether `location` names a PostgreSQL server (a libpq URI) rather than a path.
  static bool is_postgres_location(std::string_view location);

  ProfileStore(ProfileStore&&) noexcept;
  ProfileStore& operator=(ProfileStore&&) noexcept;
  ~ProfileStore();

  StoreKind kind() const;
  // The path, or the URI with any password replaced by "***" (for logs and errors).
  std::string location() const;
  // PostgreSQL: whether the change listener is connected, i.e. whether
  // current()/summary() may be served from the notification-coherent cache
  // (false: every read queries the server). SQLite: nullopt (no cache).
  std::optional<bool> change_listener_up() const;
  // The SQLite file's path; for PostgreSQL the same as location().
  const std::string& path() const;
  // The options the store was opened with, with the retention now in force.
  Options options() const;
  // History versions kept per key from the next write on (>= 1, else
  // invalid_argument and nothing changes). Versions above the new limit are
  // pruned by the next write of their key, not at once.
  Status set_retention(int versions);
  Expected<int> schema_version() const;
  // SQLite: PRAGMA integrity_check and foreign_key_check; error describing the
  // first problems. PostgreSQL: unsupported (the server keeps its own integrity).
  Status integrity_check() const;
  // Replaces the whole database, while it is open and in use, with a copy
  // made by backup_database (backup.h): the copy is checked first (it opens,
  // passes PRAGMA quick_check, is an fdo store with this build's schema
  // version; anything else changes nothing), then written over this database
  // through SQLite's backup API (SQLite only; PostgreSQL: unsupported, use
  // pg_dump / pg_restore) on the write connection, so every write of
  // this store waits until it is done and every reader sees the old or the
  // new database, never a mix. Callers drop what they cached from the old one.
  Expected<BackupSummary> restore_from(const std::string& from_path);

  // --- profiles ---
  Expected<std::optional<StoredProfile>> current(std::string_view pk) const;
  // The same, shared and immutable (null: no profile). With ReadView::in_process
  // a repeated read is neither a database read nor a copy.
  Expected<std::shared_ptr<const StoredProfile>> current_shared(std::string_view pk) const;
  // How many reads have reached the database file so far (SQLite: read
  // transactions on the read connections); nullopt for PostgreSQL.
  std::optional<std::uint64_t> database_reads() const;
  Expected<std::optional<StoredProfile>> get(std::string_view pk, std::int64_t version) const;
  // Every retained version, oldest first; not_found when the key is unknown.
  Expected<std::vector<StoredProfile>> history(std::string_view pk) const;
  // The owner uid of the profile (also after a reset), without reading any
  // version; nullopt when the key is unknown.
  Expected<std::optional<std::int64_t>> owner(std::string_view pk) const;
  // The list() row of one key (current version, pin state, owner, digest),
  // without reading any version's body; nullopt when the key is unknown.
  Expected<std::optional<ProfileSummary>> summary(std::string_view pk) const;
  // Writes version (current + 1) iff the current version is expected_version.
  // Errors: not_found (info.acting_owner set and the profile is another
  // tenant's), conflict (someone else wrote first: re-read and retry), pinned
  // (feedback write to a pinned profile), invalid_argument (bad doc or key).
  Expected<std::int64_t> write(std::string_view pk, std::int64_t expected_version,
                               const ProfileDoc& doc, const WriteInfo& info);
  // Several writes in one transaction: all succeed or none is applied (the
  // error names the request that failed). Returns the new versions in order.
  // Each request's info.acting_owner is checked on its own key.
  Expected<std::vector<std::int64_t>> write_batch(std::span<const WriteRequest> requests);
  // pin/unpin/reset/remove: not_found for an unknown key, and for another
  // tenant's profile when acting_owner is set.
  Status pin(std::string_view pk, ActingOwner acting_owner = std::nullopt);
  Status unpin(std::string_view pk, ActingOwner acting_owner = std::nullopt);
  // Back to "no profile": history and pin state are kept and the next write
  // (expected_version 0) continues the numbering, so versions are never reused.
  Status reset(std::string_view pk, ActingOwner acting_owner = std::nullopt);
  // Deletes the profile, its history, its feedback, the IK -> PK mappings to it
  // and the CK -> VK mappings of those IKs. not_found if none of that existed.
  // A later write starts the key again at version 1. For a key with mappings
  // but no profile row, an acting owner removes only the mappings of programs
  // registered to that uid (see docs/profile_store.md).
  Expected<RemoveSummary> remove(std::string_view pk, ActingOwner acting_owner = std::nullopt);
  Expected<std::vector<ProfileSummary>>
  list(std::optional<std::int64_t> owner = std::nullopt) const;

  // --- profile key mapping IK -> PK ---
  Expected<std::optional<std::string>> lookup_profile_key(std::string_view ik) const;
  // Same pair again: unchanged. A different pk for a known ik (e.g. after a
  // compiler change): replaced, with the previous pk reported.
  Expected<MappingResult> put_profile_key(std::string_view ik, std::string_view pk);
  Expected<bool> remove_profile_key(std::string_view ik); // true if a mapping was removed

  // --- virtual key mapping CK -> VK ---
  Expected<std::optional<std::string>> lookup_virtual_key(std::string_view ck) const;
  // `ik` is the program the mapping belongs to (lets remove_mappings drop it);
  // empty when unknown.
  Expected<MappingResult> put_virtual_key(std::string_view ck, std::string_view vk,
                                          std::string_view ik);
  Expected<bool> remove_virtual_key(std::string_view ck);
  // Drops the IK -> PK mapping of `ik` and every CK -> VK mapping recorded for it.
  Expected<MappingRemoval> remove_mappings(std::string_view ik);

  // --- program registry ---
  // Inserts, or updates name/size/last_used (and pk, when given) of a known ik
  // (first_seen and owner stay). A program_hash is recorded once: a known ik
  // whose recorded hash differs from a given one is Errc::conflict and nothing
  // changes (an IK is a hash of the bytes, so that is never the same program).
  // Returns the stored row.
  Expected<ProgramInfo> register_program(const ProgramInfo& program);
  Status touch_program(std::string_view ik); // not_found for an unknown ik
  Expected<std::optional<ProgramInfo>> program(std::string_view ik) const;
  Expected<std::vector<ProgramInfo>>
  programs(std::optional<std::int64_t> owner = std::nullopt) const;
  // How many programs are registered to `owner`.
  Expected<std::int64_t> count_programs(std::int64_t owner) const;
  Expected<bool> remove_program(std::string_view ik);
  // Whether `owner` has a registered program whose profile key is `pk`.
  Expected<bool> owns_program_with_profile_key(std::int64_t owner, std::string_view pk) const;

  // --- feedback ---
  // One transaction for the whole batch. Rows for the same (pk, version,
  // host) add up. A row whose counts vector for a function has a different
  // length than what is stored for that (pk, version) fails the whole batch
  // (invalid_argument), nothing applied. A non-empty batch_id makes the call
  // idempotent: an id this store has already applied applies nothing and
  // returns duplicate = true. Ids are recorded in the batch's transaction and
  // kept kBatchIdRetention after they were applied.
  Expected<AppendResult> append_feedback(std::span<const FeedbackRow> rows,
                                         std::string_view batch_id = {});
  Expected<std::optional<FeedbackTotals>> feedback(std::string_view pk, std::int64_t version) const;

  // --- export / import ---
  // A format-versioned JSON bundle of the given profiles (an unknown key is
  // not_found). Profiles without a current version carry "current": null.
  Expected<nlohmann::json> export_bundle(std::span<const std::string> pks,
                                         ExportHistory history = ExportHistory::current_only) const;
  // Every profile in the store.
  Expected<nlohmann::json> export_all(ExportHistory history = ExportHistory::current_only) const;
  // Writes each bundled current profile through the versioned write path
  // (source import, owner `owner` for profiles it creates), all in one
  // transaction. The bundle is validated first (format, digests); history in
  // the bundle is informational and not replayed. Pinned in the bundle pins
  // the local profile; a local pin is never cleared. With acting_owner set,
  // any bundled key that exists here with another owner fails the whole
  // import with not_found, nothing applied. With new_keys own_programs (which
  // needs acting_owner), so does any bundled key that does not exist here and
  // is not the profile key of a program registered to acting_owner: both read
  // "no profile <pk>", exactly like each other, checked in the import's
  // transaction before anything is written.
  Expected<std::vector<ImportedProfile>> import_bundle(const nlohmann::json& bundle,
                                                       std::int64_t owner, ImportConflict policy,
                                                       ActingOwner acting_owner = std::nullopt,
                                                       ImportNewKeys new_keys = ImportNewKeys::any);

  explicit ProfileStore(std::unique_ptr<Backend> backend);

private:
  std::unique_ptr<Backend> impl_;
};

} // namespace fdo::profile_store
