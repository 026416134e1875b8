#include "fdo/profile_store/profile_store.h"

#include "fdo/profile_store/sqlite.h"
#include "fdo/util/log.h"
#include "internal.h"
#include "schema.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fcntl.h>
#include <iterator>
#include <limits>
#include <mutex>
#include <set>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

namespace fdo::profile_store {

using nlohmann::json;
using sqlite::Statement;
using sqlite::Transaction;
using sqlite::TxKind;

std::string_view to_string(WriteSource source) {
  switch (source) {
  case WriteSource::feedback:
    return "feedback";
  case WriteSource::operator_:
    return "operator";
  case WriteSource::import:
    return "import";
  }
  return "feedback";
}

Expected<WriteSource> parse_write_source(std::string_view s) {
  for (WriteSource w : {WriteSource::feedback, WriteSource::operator_, WriteSource::import})
    if (s == to_string(w)) return w;
  return make_error(Errc::invalid_argument, "unknown write source '" + std::string(s) +
                                                "' (expected feedback, operator or import)");
}

std::string_view to_string(ImportAction action) {
  switch (action) {
  case ImportAction::created:
    return "created";
  case ImportAction::updated:
    return "updated";
  case ImportAction::unchanged:
    return "unchanged";
  case ImportAction::skipped:
    return "skipped";
  }
  return "created";
}

namespace detail {

Status check_key(std::string_view what, std::string_view key) {
  if (key.empty())
    return make_error(Errc::invalid_argument, std::string(what) + " must not be empty");
  if (key.size() > kMaxKeyBytes)
    return make_error(Errc::invalid_argument, std::string(what) + " is " +
                                                  std::to_string(key.size()) + " bytes (max " +
                                                  std::to_string(kMaxKeyBytes) + ")");
  return ok();
}

Expected<std::string> canonical_text(const json& j, std::string_view what) {
  try {
    return canonical_json(j);
  } catch (const json::exception& e) {
    // Strings that are not valid UTF-8 cannot be written as JSON.
    return make_error(Errc::invalid_argument, std::string(what) + ": " + e.what());
  }
}

} // namespace detail

using detail::check_key;
using detail::now_ms;

namespace {

constexpr const char* kProfileColumns =
    "SELECT v.pk, v.version, v.digest, v.body, p.pinned, p.owner, v.author, v.source, "
    "v.created_at, v.reason, v.host, v.stage, v.program "
    "FROM profile_versions v JOIN profiles p ON p.pk = v.pk ";

std::int64_t as_i64(std::uint64_t v) {
  return static_cast<std::int64_t>(v);
}
std::uint64_t as_u64(std::int64_t v) {
  return static_cast<std::uint64_t>(v);
}

std::uint64_t sat_add(std::uint64_t a, std::uint64_t b) {
  return b > std::numeric_limits<std::uint64_t>::max() - a
             ? std::numeric_limits<std::uint64_t>::max()
             : a + b;
}

std::vector<std::uint8_t> encode_counts(const std::vector<std::uint64_t>& counts) {
  std::vector<std::uint8_t> out(counts.size() * 8);
  for (size_t i = 0; i < counts.size(); ++i)
    for (int b = 0; b < 8; ++b)
      out[i * 8 + b] = static_cast<std::uint8_t>(counts[i] >> (8 * b));
  return out;
}

Expected<std::vector<std::uint64_t>> decode_counts(const std::vector<std::uint8_t>& bytes,
                                                   const std::string& what) {
  if (bytes.size() % 8 != 0)
    return make_error(Errc::corrupt, what + ": counts blob of " + std::to_string(bytes.size()) +
                                         " bytes is not a whole number of uint64");
  std::vector<std::uint64_t> out(bytes.size() / 8);
  for (size_t i = 0; i < out.size(); ++i)
    for (int b = 0; b < 8; ++b)
      out[i] |= std::uint64_t(bytes[i * 8 + b]) << (8 * b);
  return out;
}

std::string describe_profile(std::string_view pk, std::int64_t version) {
  return "profile " + std::string(pk) + " version " + std::to_string(version);
}

// Rejects files that are certainly not SQLite databases before SQLite touches
// them: SQLite would refuse them too, but only after opening (and, in
// read-write mode, possibly creating -wal/-shm files beside them).
Status check_file(const std::string& path, OpenMode mode) {
  struct stat sb {};
  if (::stat(path.c_str(), &sb) != 0) {
    if (errno == ENOENT && mode == OpenMode::read_write) return ok(); // created by open
    if (errno == ENOENT)
      return make_error(Errc::not_found, "profile store '" + path + "' does not exist");
    return Error::from_errno("stat profile store '" + path + "'", errno);
  }
  if (!S_ISREG(sb.st_mode))
    return make_error(Errc::invalid_argument, "profile store '" + path + "' is not a regular file");
  if (sb.st_size == 0) return ok(); // SQLite treats an empty file as an empty database
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Error::from_errno("open profile store '" + path + "'", errno);
  char header[16] = {};
  ssize_t n = ::pread(fd, header, sizeof header, 0);
  int err = errno;
  ::close(fd);
  if (n < 0) return Error::from_errno("read profile store '" + path + "'", err);
  static constexpr char kMagic[16] = "SQLite format 3"; // includes the trailing NUL
  if (n < 16 || std::memcmp(header, kMagic, sizeof kMagic) != 0)
    return make_error(Errc::corrupt, "profile store '" + path +
                                         "' is not an SQLite database (bad file header); "
                                         "refusing to open or modify it");
  return ok();
}

Status check_schema(const std::string& path, const schema::Info& info, OpenMode mode) {
  const int latest = schema::latest_version();
  if (info.user_version < 0 || info.user_version > latest)
    return make_error(Errc::unsupported,
                      "profile store '" + path + "' has schema version " +
                          std::to_string(info.user_version) + ", newer than this build knows (" +
                          std::to_string(latest) + "); refusing to open it (upgrade fdo)");
  bool foreign = info.user_version == 0 ? (info.objects > 0 || info.application_id != 0)
                                        : info.application_id != schema::kApplicationId;
  if (foreign)
    return make_error(
        Errc::invalid_argument,
        "'" + path + "' is an SQLite database of another application (application_id " +
            std::to_string(info.application_id) + ", " + std::to_string(info.objects) +
            " schema objects), not an fdo profile store; refusing to modify it");
  if (mode == OpenMode::read_only && info.user_version == 0)
    return make_error(Errc::not_found, "'" + path + "' is an empty database, not a profile store");
  if (mode == OpenMode::read_only && info.user_version < latest)
    return make_error(Errc::unsupported,
                      "profile store '" + path + "' has schema version " +
                          std::to_string(info.user_version) + " and needs an upgrade to " +
                          std::to_string(latest) +
                          " before read-only use; open it read-write once (start fdod)");
  return ok();
}

// Opening a WAL database normally creates -wal and -shm files beside it,
// even when the open then fails. When nobody has the file open (no -wal file
// exists), a damaged or foreign database is therefore first checked through
// an immutable connection, which creates and locks nothing, so a refused file
// is left exactly as it was, directory included. When a -wal file exists the
// side files are already there and the normal open checks the same things.
Status inspect_quietly(const std::string& path, OpenMode mode) {
  struct stat sb {};
  if (::stat(path.c_str(), &sb) != 0 || sb.st_size == 0) return ok();
  if (struct stat wal{}; ::stat((path + "-wal").c_str(), &wal) == 0) return ok();
  FDO_TRY(auto db, sqlite::Connection::open(path, sqlite::Access::inspect));
  FDO_TRY(schema::Info info, schema::read_info(db));
  return check_schema(path, info, mode);
}

} // namespace

ProfileStore::ProfileStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ProfileStore::ProfileStore(ProfileStore&&) noexcept = default;
ProfileStore& ProfileStore::operator=(ProfileStore&&) noexcept = default;
ProfileStore::~ProfileStore() = default;

// Switching a new database to WAL needs an exclusive lock, and SQLite does not
// call the busy handler for it: a second process opening the same new file at
// that moment gets SQLITE_BUSY at once. Retry (with backoff) for as long as the
// busy timeout allows.
static Expected<std::string> enable_wal(sqlite::Connection& db,
                                        std::chrono::milliseconds busy_timeout) {
  const auto deadline = std::chrono::steady_clock::now() + busy_timeout;
  std::chrono::milliseconds pause{1};
  for (;;) {
    Expected<std::string> mode = db.query_text("PRAGMA journal_mode = WAL");
    if (mode || mode.error().code() != Errc::timeout ||
        std::chrono::steady_clock::now() + pause > deadline)
      return mode;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

Expected<ProfileStore> ProfileStore::open(const std::string& path, const Options& options) {
  if (options.retention < 1)
    return make_error(Errc::invalid_argument, "retention must keep at least 1 version (got " +
                                                  std::to_string(options.retention) + ")");
  if (options.busy_timeout.count() < 0 ||
      options.busy_timeout.count() > std::numeric_limits<int>::max())
    return make_error(Errc::invalid_argument, "busy_timeout out of range");
  FDO_TRY_STATUS(check_file(path, options.mode));
  FDO_TRY_STATUS(inspect_quietly(path, options.mode));
  auto access = options.mode == OpenMode::read_only ? sqlite::Access::read_only
                                                    : sqlite::Access::read_write_create;
  FDO_TRY(auto db, sqlite::Connection::open(path, access));
  db.set_busy_timeout(options.busy_timeout);
  // The first read parses the header and schema: NOTADB/CORRUPT surface here,
  // before anything is written.
  FDO_TRY(schema::Info info, schema::read_info(db));
  FDO_TRY_STATUS(check_schema(path, info, options.mode));
  if (options.mode == OpenMode::read_write) {
    // WAL: readers (fdoctl) never block the writer and vice versa; a commit
    // is one append to the WAL.
    FDO_TRY(std::string journal, enable_wal(db, options.busy_timeout));
    if (journal != "wal")
      return make_error(Errc::unsupported, "profile store '" + path +
                                               "': cannot use WAL journal mode (got '" + journal +
                                               "'); is it on a network file system?");
    FDO_TRY_STATUS(db.exec(options.synchronous == Synchronous::full
                               ? "PRAGMA synchronous = FULL"
                               : "PRAGMA synchronous = NORMAL"));
    FDO_TRY_STATUS(db.exec("PRAGMA foreign_keys = ON"));
    if (info.user_version < schema::latest_version()) {
      if (info.user_version > 0)
        log::info("profile store " + path + ": upgrading schema from version " +
                  std::to_string(info.user_version) + " to " +
                  std::to_string(schema::latest_version()));
      FDO_TRY_STATUS(schema::migrate(db, schema::latest_version()));
    }
  } else {
    // Belt and braces: the file was opened read-only, and query_only makes
    // any write attempt fail inside SQLite too.
    FDO_TRY_STATUS(db.exec("PRAGMA query_only = ON"));
  }
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  impl->options = options;
  impl->db = std::move(db);
  return ProfileStore(std::move(impl));
}

const std::string& ProfileStore::path() const {
  return impl_->path;
}
const Options& ProfileStore::options() const {
  return impl_->options;
}

Expected<int> ProfileStore::schema_version() const {
  std::lock_guard lock(impl_->mu);
  FDO_TRY(std::int64_t v, impl_->db.query_int("PRAGMA user_version"));
  return static_cast<int>(v);
}

Status ProfileStore::integrity_check() const {
  std::lock_guard lock(impl_->mu);
  std::string problems;
  {
    FDO_TRY(Statement st, impl_->db.prepare("PRAGMA integrity_check"));
    while (true) {
      FDO_TRY(bool row, st.step());
      if (!row) break;
      std::string line = st.column_text(0);
      if (line != "ok") problems += line + "; ";
    }
  }
  {
    FDO_TRY(Statement st, impl_->db.prepare("PRAGMA foreign_key_check"));
    while (true) {
      FDO_TRY(bool row, st.step());
      if (!row) break;
      problems += "foreign key violation in " + st.column_text(0) + " row " +
                  std::to_string(st.column_int64(1)) + " -> " + st.column_text(2) + "; ";
    }
  }
  if (!problems.empty())
    return make_error(Errc::corrupt, "profile store '" + impl_->path + "': " + problems);
  return ok();
}

// --- profiles ---

std::string DocCache::key_of(const std::string& pk, std::int64_t version) {
  std::string key = pk;
  key += '\0';
  key += std::to_string(version);
  return key;
}

const ProfileDoc* DocCache::find(const std::string& pk, std::int64_t version,
                                 const std::string& body, const std::string& digest) {
  auto it = index_.find(key_of(pk, version));
  if (it == index_.end() || it->second->body != body || it->second->digest != digest)
    return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);
  return &it->second->doc;
}

void DocCache::erase(std::list<Entry>::iterator it) {
  bytes_ -= it->body.size();
  index_.erase(it->key);
  lru_.erase(it);
}

void DocCache::insert(const std::string& pk, std::int64_t version, const std::string& body,
                      const std::string& digest, const ProfileDoc& doc) {
  std::string key = key_of(pk, version);
  if (auto it = index_.find(key); it != index_.end()) erase(it->second);
  if (body.size() > budget_ / 4) return;
  lru_.push_front(Entry{key, body, digest, doc});
  index_[key] = lru_.begin();
  bytes_ += body.size();
  while (bytes_ > budget_)
    erase(std::prev(lru_.end()));
}

Expected<StoredProfile> ProfileStore::Impl::read_profile_row(const Statement& st) {
  StoredProfile p;
  p.pk = st.column_text(0);
  p.version = st.column_int64(1);
  p.digest = st.column_text(2);
  p.body = st.column_text(3);
  p.pinned = st.column_int64(4) != 0;
  p.owner = st.column_int64(5);
  p.author = st.column_int64(6);
  auto source = parse_write_source(st.column_text(7));
  if (!source)
    return make_error(Errc::corrupt,
                      describe_profile(p.pk, p.version) + ": " + source.error().message());
  p.source = *source;
  p.created_at = st.column_int64(8);
  p.reason = st.column_text(9);
  p.host = st.column_text(10);
  p.stage = st.column_int64(11);
  p.program = st.column_text(12);
  if (const ProfileDoc* cached = docs.find(p.pk, p.version, p.body, p.digest)) {
    p.doc = *cached;
    return p;
  }
  auto doc = parse_profile(p.body);
  if (!doc)
    return make_error(Errc::corrupt, describe_profile(p.pk, p.version) +
                                         ": stored body does not parse: " + doc.error().message());
  p.doc = std::move(*doc);
  // The digest keys compiled outputs; serving a body that does not match it
  // would compile one profile under another's cache key.
  if (std::string d = profile_digest(p.doc); d != p.digest)
    return make_error(Errc::corrupt, describe_profile(p.pk, p.version) + ": stored digest " +
                                         p.digest + " does not match the body (" + d + ")");
  docs.insert(p.pk, p.version, p.body, p.digest, p.doc);
  return p;
}

Expected<std::optional<ProfileStore::Impl::State>>
ProfileStore::Impl::state_locked(std::string_view pk) {
  FDO_TRY(auto st,
          sql("SELECT owner, current_version, last_version, pinned FROM profiles WHERE pk = ?1"));
  st->bind(1, pk);
  FDO_TRY(bool row, st->step());
  if (!row) return std::optional<State>();
  State s;
  s.owner = st->column_int64(0);
  s.current = st->column_is_null(1) ? 0 : st->column_int64(1);
  s.last = st->column_int64(2);
  s.pinned = st->column_int64(3) != 0;
  return std::optional<State>(s);
}

Expected<std::optional<StoredProfile>> ProfileStore::Impl::current_locked(std::string_view pk) {
  FDO_TRY(auto st,
          sql(std::string(kProfileColumns) + "WHERE v.pk = ?1 AND v.version = p.current_version"));
  st->bind(1, pk);
  FDO_TRY(bool row, st->step());
  if (!row) return std::optional<StoredProfile>();
  FDO_TRY(StoredProfile p, read_profile_row(*st));
  return std::optional<StoredProfile>(std::move(p));
}

Expected<std::optional<StoredProfile>> ProfileStore::Impl::get_locked(std::string_view pk,
                                                                      std::int64_t version) {
  FDO_TRY(auto st, sql(std::string(kProfileColumns) + "WHERE v.pk = ?1 AND v.version = ?2"));
  st->bind(1, pk).bind(2, version);
  FDO_TRY(bool row, st->step());
  if (!row) return std::optional<StoredProfile>();
  FDO_TRY(StoredProfile p, read_profile_row(*st));
  return std::optional<StoredProfile>(std::move(p));
}

Expected<std::vector<StoredProfile>> ProfileStore::Impl::history_locked(std::string_view pk) {
  FDO_TRY(auto st, sql(std::string(kProfileColumns) + "WHERE v.pk = ?1 ORDER BY v.version"));
  st->bind(1, pk);
  std::vector<StoredProfile> out;
  while (true) {
    FDO_TRY(bool row, st->step());
    if (!row) break;
    FDO_TRY(StoredProfile p, read_profile_row(*st));
    out.push_back(std::move(p));
  }
  return out;
}

Expected<std::optional<StoredProfile>> ProfileStore::current(std::string_view pk) const {
  FDO_TRY_STATUS(check_key("profile key", pk));
  std::lock_guard lock(impl_->mu);
  return impl_->current_locked(pk);
}

Expected<std::optional<StoredProfile>> ProfileStore::get(std::string_view pk,
                                                         std::int64_t version) const {
  FDO_TRY_STATUS(check_key("profile key", pk));
  std::lock_guard lock(impl_->mu);
  return impl_->get_locked(pk, version);
}

Expected<std::vector<StoredProfile>> ProfileStore::history(std::string_view pk) const {
  FDO_TRY_STATUS(check_key("profile key", pk));
  std::lock_guard lock(impl_->mu);
  FDO_TRY(auto out, impl_->history_locked(pk));
  // Retention keeps at least the newest version and reset keeps history, so
  // a known key always has rows.
  if (out.empty()) return make_error(Errc::not_found, "no profile " + std::string(pk));
  return out;
}

Expected<std::int64_t> ProfileStore::Impl::write_locked(const WriteRequest& req, std::int64_t now) {
  FDO_TRY_STATUS(check_key("profile key", req.pk));
  if (req.expected_version < 0)
    return make_error(Errc::invalid_argument,
                      "expected version of profile " + req.pk + " must be >= 0");
  ProfileDoc doc = req.doc;
  doc.provenance.reason = req.info.reason;
  doc.provenance.created_at = detail::rfc3339_ms(now);
  doc.provenance.host = req.info.host;
  doc.provenance.stage = req.info.stage;
  doc.provenance.program = req.info.program;
  json j = to_json(doc);
  // The struct can hold values the document format forbids (opt_level 9);
  // such a profile must not reach the compiler through the store.
  auto valid = profile_from_json(j);
  if (!valid) return std::move(valid).error().context("profile " + req.pk);
  FDO_TRY(std::string body, detail::canonical_text(j, "profile " + req.pk));
  std::string digest = profile_digest(doc);

  std::int64_t new_version = 1;
  FDO_TRY(auto state, state_locked(req.pk));
  if (state) {
    if (state->pinned && req.info.source == WriteSource::feedback)
      return make_error(Errc::pinned, "profile " + req.pk +
                                          " is pinned; feedback may not rewrite it (unpin it, "
                                          "or write it as an operator)");
    if (state->current != req.expected_version)
      return make_error(Errc::conflict, "profile " + req.pk + " is at version " +
                                            std::to_string(state->current) + " (expected " +
                                            std::to_string(req.expected_version) + ")");
    new_version = state->last + 1;
  } else if (req.expected_version != 0) {
    return make_error(Errc::conflict, "profile " + req.pk + " does not exist (expected version " +
                                          std::to_string(req.expected_version) + ")");
  }
  if (!state) {
    FDO_TRY(auto ins, sql("INSERT INTO profiles (pk, owner, current_version, last_version, pinned, "
                          "updated_at) VALUES (?1, ?2, 1, 1, 0, ?3)"));
    ins->bind(1, req.pk).bind(2, req.info.owner).bind(3, now);
    FDO_TRY_STATUS(ins->run());
  } else {
    FDO_TRY(auto upd, sql("UPDATE profiles SET current_version = ?2, last_version = ?2, "
                          "updated_at = ?3 WHERE pk = ?1"));
    upd->bind(1, req.pk).bind(2, new_version).bind(3, now);
    FDO_TRY_STATUS(upd->run());
  }
  {
    FDO_TRY(auto ins,
            sql("INSERT INTO profile_versions (pk, version, digest, body, functions, source, "
                "reason, author, host, stage, program, created_at) "
                "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)"));
    ins->bind(1, req.pk)
        .bind(2, new_version)
        .bind(3, digest)
        .bind(4, body)
        .bind(5, static_cast<std::int64_t>(doc.functions.size()))
        .bind(6, to_string(req.info.source))
        .bind(7, req.info.reason)
        .bind(8, req.info.owner)
        .bind(9, req.info.host)
        .bind(10, req.info.stage)
        .bind(11, req.info.program)
        .bind(12, now);
    FDO_TRY_STATUS(ins->run());
  }
  {
    // Versions are contiguous per key, so "keep the newest N" is a range.
    // Feedback of pruned versions goes with them (ON DELETE CASCADE).
    FDO_TRY(auto del, sql("DELETE FROM profile_versions WHERE pk = ?1 AND version <= ?2"));
    del->bind(1, req.pk).bind(2, new_version - options.retention);
    FDO_TRY_STATUS(del->run());
  }
  // The next read of this version (usually the next stage) skips the parse.
  // Harmless if the transaction rolls back: hits compare the stored bytes.
  docs.insert(req.pk, new_version, body, digest, *valid);
  return new_version;
}

Expected<std::int64_t> ProfileStore::write(std::string_view pk, std::int64_t expected_version,
                                           const ProfileDoc& doc, const WriteInfo& info) {
  WriteRequest req{std::string(pk), expected_version, doc, info};
  std::lock_guard lock(impl_->mu);
  FDO_TRY_STATUS(impl_->writable());
  FDO_TRY(auto tx, Transaction::begin(impl_->db, TxKind::immediate));
  FDO_TRY(std::int64_t version, impl_->write_locked(req, now_ms()));
  FDO_TRY_STATUS(tx.commit());
  return version;
}

Expected<std::vector<std::int64_t>>
ProfileStore::write_batch(std::span<const WriteRequest> requests) {
  std::lock_guard lock(impl_->mu);
  FDO_TRY_STATUS(impl_->writable());
  FDO_TRY(auto tx, Transaction::begin(impl_->db, TxKind::immediate));
  std::int64_t now = now_ms();
  std::vector<std::int64_t> versions;
  versions.reserve(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    auto v = impl_->write_locked(requests[i], now);
    if (!v)
      return std::move(v).error().context("batch write " + std::to_string(i + 1) + " of " +
                                          std::to_string(requests.size()) + " (nothing written)");
    versions.push_back(*v);
  }
  FDO_TRY_STATUS(tx.commit());
  return versions;
}

namespace {
Status update_profile_flag(ProfileStore::Impl& impl, std::string_view pk, const std::string& sql,
                           std::optional<std::int64_t> value) {
  FDO_TRY_STATUS(check_key("profile key", pk));
  std::lock_guard lock(impl.mu);
  FDO_TRY_STATUS(impl.writable());
  FDO_TRY(auto st, impl.sql(sql));
  st->bind(1, pk).bind(2, now_ms());
  if (value) st->bind(3, *value);
  FDO_TRY_STATUS(st->run());
  if (impl.db.changes() == 0) return make_error(Errc::not_found, "no profile " + std::string(pk));
  return ok();
}
} // namespace

Status ProfileStore::pin(std::string_view pk) {
  return update_profile_flag(*impl_, pk,
                             "UPDATE profiles SET pinned = ?3, updated_at = ?2 WHERE pk = ?1", 1);
}

Status ProfileStore::unpin(std::string_view pk) {
  return update_profile_flag(*impl_, pk,
                             "UPDATE profiles SET pinned = ?3, updated_at = ?2 WHERE pk = ?1", 0);
}

Status ProfileStore::reset(std::string_view pk) {
  return update_profile_flag(
      *impl_, pk, "UPDATE profiles SET current_version = NULL, updated_at = ?2 WHERE pk = ?1",
      std::nullopt);
}

Expected<RemoveSummary> ProfileStore::remove(std::string_view pk) {
  FDO_TRY_STATUS(check_key("profile key", pk));
  std::lock_guard lock(impl_->mu);
  FDO_TRY_STATUS(impl_->writable());
  auto& db = impl_->db;
  FDO_TRY(auto tx, Transaction::begin(db, TxKind::immediate));
  RemoveSummary out;
  {
    FDO_TRY(auto st, impl_->sql("SELECT count(*) FROM profile_versions WHERE pk = ?1"));
    st->bind(1, pk);
    FDO_TRY_STATUS(st->step());
    out.versions = st->column_int64(0);
  }
  {
    FDO_TRY(auto st, impl_->sql("SELECT count(*) FROM feedback WHERE pk = ?1"));
    st->bind(1, pk);
    FDO_TRY_STATUS(st->step());
    out.feedback_rows = st->column_int64(0);
  }
  {
    FDO_TRY(auto st, impl_->sql("DELETE FROM virtual_keys WHERE ik IN "
                                "(SELECT ik FROM profile_keys WHERE pk = ?1)"));
    st->bind(1, pk);
    FDO_TRY_STATUS(st->run());
    out.virtual_keys = db.changes();
  }
  {
    FDO_TRY(auto st, impl_->sql("DELETE FROM profile_keys WHERE pk = ?1"));
    st->bind(1, pk);
    FDO_TRY_STATUS(st->run());
    out.profile_keys = db.changes();
  }
  std::int64_t profiles = 0;
  {
    // Cascades to profile_versions, feedback and its detail tables.
    FDO_TRY(auto st, impl_->sql("DELETE FROM profiles WHERE pk = ?1"));
    st->bind(1, pk);
    FDO_TRY_STATUS(st->run());
    profiles = db.changes();
  }
  if (profiles == 0 && out.profile_keys == 0)
    return make_error(Errc::not_found, "no profile " + std::string(pk));
  FDO_TRY_STATUS(tx.commit());
  return out;
}

Expected<std::vector<ProfileSummary>> ProfileStore::list(std::optional<std::int64_t> owner) const {
  std::lock_guard lock(impl_->mu);
  FDO_TRY(auto st, impl_->sql("SELECT p.pk, p.current_version, p.last_version, v.digest, p.pinned, "
                              "p.owner, p.updated_at, v.functions FROM profiles p "
                              "LEFT JOIN profile_versions v "
                              "ON v.pk = p.pk AND v.version = p.current_version "
                              "WHERE ?1 IS NULL OR p.owner = ?1 ORDER BY p.pk"));
  if (owner)
    st->bind(1, *owner);
  else
    st->bind_null(1);
  std::vector<ProfileSummary> out;
  while (true) {
    FDO_TRY(bool row, st->step());
    if (!row) break;
    ProfileSummary s;
    s.pk = st->column_text(0);
    s.version = st->column_is_null(1) ? 0 : st->column_int64(1);
    s.last_version = st->column_int64(2);
    s.digest = st->column_is_null(3) ? std::string(no_profile_digest()) : st->column_text(3);
    s.pinned = st->column_int64(4) != 0;
    s.owner = st->column_int64(5);
    s.updated_at = st->column_int64(6);
    s.functions = st->column_is_null(7) ? 0 : st->column_int64(7);
    out.push_back(std::move(s));
  }
  return out;
}

// --- key mappings ---

namespace {
Expected<std::optional<std::string>> lookup_one(ProfileStore::Impl& impl, const std::string& sql,
                                                std::string_view key) {
  FDO_TRY(auto st, impl.sql(sql));
  st->bind(1, key);
  FDO_TRY(bool row, st->step());
  if (!row) return std::optional<std::string>();
  return std::optional<std::string>(st->column_text(0));
}

Expected<bool> delete_one(ProfileStore::Impl& impl, const std::string& sql, std::string_view key) {
  std::lock_guard lock(impl.mu);
  FDO_TRY_STATUS(impl.writable());
  FDO_TRY(auto st, impl.sql(sql));
  st->bind(1, key);
  FDO_TRY_STATUS(st->run());
  return impl.db.changes() > 0;
}
} // namespace

Expected<std::optional<std::string>> ProfileStore::lookup_profile_key(std::string_view ik) const {
  FDO_TRY_STATUS(check_key("initial key", ik));
  std::lock_guard lock(impl_->mu);
  return lookup_one(*impl_, "SELECT pk FROM profile_keys WHERE ik = ?1", ik);
}

Expected<MappingResult> ProfileStore::put_profile_key(std::string_view ik, std::string_view pk) {
  FDO_TRY_STATUS(check_key("initial key", ik));
  FDO_TRY_STATUS(check_key("profile key", pk));
  std::lock_guard lock(impl_->mu);
  FDO_TRY_STATUS(impl_->writable());
  FDO_TRY(auto tx, Transaction::begin(impl_->db, TxKind::immediate));
  FDO_TRY(auto existing, lookup_one(*impl_, "SELECT pk FROM profile_keys WHERE ik = ?1", ik));
  MappingResult result;
  if (existing && *existing == pk) {
    result.change = MappingChange::unchanged;
    return result; // nothing to write; the transaction rolls back harmlessly
  }
  FDO_TRY(auto st, impl_->sql("INSERT INTO profile_keys (ik, pk, updated_at) VALUES (?1, ?2, ?3) "
                              "ON CONFLICT (ik) DO UPDATE SET pk = excluded.pk, "
                              "updated_at = excluded.updated_at"));
  st->bind(1, ik).bind(2, pk).bind(3, now_ms());
  FDO_TRY_STATUS(st->run());
  FDO_TRY_STATUS(tx.commit());
  if (existing) {
    result.change = MappingChange::replaced;
    result.previous = std::move(existing);
    log::info("profile key mapping " + std::string(ik) + " re-mapped from " + *result.previous +
              " to " + std::string(pk));
  }
  return result;
}

Expected<bool> ProfileStore::remove_profile_key(std::string_view ik) {
  FDO_TRY_STATUS(check_key("initial key", ik));
  return delete_one(*impl_, "DELETE FROM profile_keys WHERE ik = ?1", ik);
}

Expected<std::optional<std::string>> ProfileStore::lookup_virtual_key(std::string_view ck) const {
  FDO_TRY_STATUS(check_key("cache key", ck));
  std::lock_guard lock(impl_->mu);
  return lookup_one(*impl_, "SELECT vk FROM virtual_keys WHERE ck = ?1", ck);
}

Expected<MappingResult> ProfileStore::put_virtual_key(std::string_view ck, std::string_view vk,
                                                      std::string_view ik) {
  FDO_TRY_STATUS(check_key("cache key", ck));
  FDO_TRY_STATUS(check_key("virtual key", vk));
  if (!ik.empty()) FDO_TRY_STATUS(check_key("initial key", ik));
  std::lock_guard lock(impl_->mu);
  FDO_TRY_STATUS(impl_->writable());
  FDO_TRY(auto tx, Transaction::begin(impl_->db, TxKind::immediate));
  std::optional<std::string> existing_vk;
  std::string existing_ik;
  {
    FDO_TRY(auto st, impl_->sql("SELECT vk, ik FROM virtual_keys WHERE ck = ?1"));
    st->bind(1, ck);
    FDO_TRY(bool row, st->step());
    if (row) {
      existing_vk = st->column_text(0);
      existing_ik = st->column_text(1);
    }
  }
  MappingResult result;
  if (existing_vk && *existing_vk == vk && (ik.empty() || existing_ik == ik)) {
    result.change = MappingChange::unchanged;
    return result;
  }
  FDO_TRY(auto st, impl_->sql("INSERT INTO virtual_keys (ck, vk, updated_at, ik) "
                              "VALUES (?1, ?2, ?3, ?4) ON CONFLICT (ck) DO UPDATE SET "
                              "vk = excluded.vk, updated_at = excluded.updated_at, "
                              "ik = COALESCE(excluded.ik, virtual_keys.ik)"));
  st->bind(1, ck).bind(2, vk).bind(3, now_ms());
  if (ik.empty())
    st->bind_null(4);
  else
    st->bind(4, ik);
  FDO_TRY_STATUS(st->run());
  FDO_TRY_STATUS(tx.commit());
  if (existing_vk && *existing_vk == vk) {
    // Only the program it belongs to was learned: same mapping.
    result.change = MappingChange::unchanged;
  } else if (existing_vk) {
    result.change = MappingChange::replaced;
    result.previous = std::move(existing_vk);
  }
  return result;
}

Expected<bool> ProfileStore::remove_virtual_key(std::string_view ck) {
  FDO_TRY_STATUS(check_key("cache key", ck));
  return delete_one(*impl_, "DELETE FROM virtual_keys WHERE ck = ?1", ck);
}

Expected<MappingRemoval> ProfileStore::remove_mappings(std::string_view ik) {
  FDO_TRY_STATUS(check_key("initial key", ik));
  std::lock_guard lock(impl_->mu);
  FDO_TRY_STATUS(impl_->writable());
  FDO_TRY(auto tx, Transaction::begin(impl_->db, TxKind::immediate));
  MappingRemoval out;
  {
    FDO_TRY(auto st, impl_->sql("DELETE FROM virtual_keys WHERE ik = ?1"));
    st->bind(1, ik);
    FDO_TRY_STATUS(st->run());
    out.virtual_keys = impl_->db.changes();
  }
  {
    FDO_TRY(auto st, impl_->sql("DELETE FROM profile_keys WHERE ik = ?1"));
    st->bind(1, ik);
    FDO_TRY_STATUS(st->run());
    out.profile_keys = impl_->db.changes();
  }
  FDO_TRY_STATUS(tx.commit());
  return out;
}

// --- program registry ---

namespace {
constexpr const char* kProgramColumns =
    "SELECT ik, name, size, owner, first_seen, last_used FROM programs ";

ProgramInfo read_program_row(const Statement& st) {
  ProgramInfo p;
  p.ik = st.column_text(0);
  p.name = st.column_text(1);
  p.size = st.column_int64(2);
  p.owner = st.column_int64(3);
  p.first_seen = st.column_int64(4);
  p.last_used = st.column_int64(5);
  return p;
}

Expected<std::optional<ProgramInfo>> program_locked(ProfileStore::Impl& impl, std::string_view ik) {
  FDO_TRY(auto st, impl.sql(std::string(kProgramColumns) + "WHERE ik = ?1"));
  st->bind(1, ik);
  FDO_TRY(bool row, st->step());
  if (!row) return std::optional<ProgramInfo>();
  return std::optional<ProgramInfo>(read_program_row(*st));
}
} // namespace

Expected<ProgramInfo> ProfileStore::register_program(const ProgramInfo& program) {
  FDO_TRY_STATUS(check_key("initial key", program.ik));
  if (program.size < 0)
    return make_error(Errc::invalid_argument, "program " + program.ik +
                                                  ": size must be >= 0 (got " +
                                                  std::to_string(program.size) + ")");
  std::lock_guard lock(impl_->mu);
  FDO_TRY_STATUS(impl_->writable());
  FDO_TRY(auto tx, Transaction::begin(impl_->db, TxKind::immediate));
  {
    // MAX(): a wall clock that steps back never makes last_used go backwards.
    FDO_TRY(auto st, impl_->sql("INSERT INTO programs (ik, name, size, owner, first_seen, "
                                "last_used) VALUES (?1, ?2, ?3, ?4, ?5, ?5) "
                                "ON CONFLICT (ik) DO UPDATE SET name = excluded.name, "
                                "size = excluded.size, "
                                "last_used = MAX(programs.last_used, excluded.last_used)"));
    st->bind(1, program.ik).bind(2, program.name).bind(3, program.size).bind(4, program.owner);
    st->bind(5, now_ms());
    FDO_TRY_STATUS(st->run());
  }
  FDO_TRY(auto stored, program_locked(*impl_, program.ik));
  FDO_TRY_STATUS(tx.commit());
  if (!stored)
    return make_error(Errc::internal, "program " + program.ik + " vanished after registration");
  return std::move(*stored);
}

Status ProfileStore::touch_program(std::string_view ik) {
  FDO_TRY_STATUS(check_key("initial key", ik));
  std::lock_guard lock(impl_->mu);
  FDO_TRY_STATUS(impl_->writable());
  FDO_TRY(auto st, impl_->sql("UPDATE programs SET last_used = MAX(last_used, ?2) WHERE ik = ?1"));
  st->bind(1, ik).bind(2, now_ms());
  FDO_TRY_STATUS(st->run());
  if (impl_->db.changes() == 0) return make_error(Errc::not_found, "no program " + std::string(ik));
  return ok();
}

Expected<std::optional<ProgramInfo>> ProfileStore::program(std::string_view ik) const {
  FDO_TRY_STATUS(check_key("initial key", ik));
  std::lock_guard lock(impl_->mu);
  return program_locked(*impl_, ik);
}

Expected<std::vector<ProgramInfo>> ProfileStore::programs(std::optional<std::int64_t> owner) const {
  std::lock_guard lock(impl_->mu);
  FDO_TRY(auto st,
          impl_->sql(std::string(kProgramColumns) + "WHERE ?1 IS NULL OR owner = ?1 ORDER BY ik"));
  if (owner)
    st->bind(1, *owner);
  else
    st->bind_null(1);
  std::vector<ProgramInfo> out;
  while (true) {
    FDO_TRY(bool row, st->step());
    if (!row) break;
    out.push_back(read_program_row(*st));
  }
  return out;
}

Expected<bool> ProfileStore::remove_program(std::string_view ik) {
  FDO_TRY_STATUS(check_key("initial key", ik));
  return delete_one(*impl_, "DELETE FROM programs WHERE ik = ?1", ik);
}

// --- feedback ---

Expected<AppendResult> ProfileStore::append_feedback(std::span<const FeedbackRow> rows) {
  // Validate and merge in memory first: a bad row fails the batch before the
  // write lock is taken, and each (pk, version) is written once.
  struct Merged {
    std::size_t rows = 0;
    FeedbackTotals totals;
  };
  std::map<std::pair<std::string, std::int64_t>, Merged> merged;
  for (size_t i = 0; i < rows.size(); ++i) {
    const FeedbackRow& r = rows[i];
    std::string where = "feedback row " + std::to_string(i + 1);
    if (auto s = check_key("profile key", r.pk); !s) return std::move(s).error().context(where);
    if (r.version <= 0)
      return make_error(Errc::invalid_argument,
                        where + ": version must be > 0 (got " + std::to_string(r.version) + ")");
    Merged& m = merged[{r.pk, r.version}];
    m.rows++;
    m.totals.stages = sat_add(m.totals.stages, r.stages);
    m.totals.exec_ns = sat_add(m.totals.exec_ns, r.exec_ns);
    for (const auto& [name, value] : r.counters) {
      if (name.empty())
        return make_error(Errc::invalid_argument, where + ": counter name must not be empty");
      m.totals.counters[name] = sat_add(m.totals.counters[name], value);
    }
    for (const auto& [fn, counts] : r.function_counts) {
      if (fn.empty())
        return make_error(Errc::invalid_argument, where + ": function name must not be empty");
      auto [it, inserted] = m.totals.function_counts.try_emplace(fn, counts);
      if (inserted) continue;
      if (it->second.size() != counts.size())
        return make_error(Errc::invalid_argument,
                          where + ": function " + fn + " has " + std::to_string(counts.size()) +
                              " counts but an earlier row of the batch for " +
                              describe_profile(r.pk, r.version) + " has " +
                              std::to_string(it->second.size()));
      for (size_t k = 0; k < counts.size(); ++k)
        it->second[k] = sat_add(it->second[k], counts[k]);
    }
  }

  std::lock_guard lock(impl_->mu);
  FDO_TRY_STATUS(impl_->writable());
  FDO_TRY(auto tx, Transaction::begin(impl_->db, TxKind::immediate));
  std::int64_t now = now_ms();
  AppendResult result;
  for (auto& [key, m] : merged) {
    const auto& [pk, version] = key;
    std::string what = "feedback for " + describe_profile(pk, version);
    {
      FDO_TRY(auto st, impl_->sql("SELECT 1 FROM profile_versions WHERE pk = ?1 AND version = ?2"));
      st->bind(1, pk).bind(2, version);
      FDO_TRY(bool exists, st->step());
      if (!exists) {
        result.skipped.emplace_back(pk, version);
        continue;
      }
    }
    std::uint64_t stages = 0, exec_ns = 0;
    {
      FDO_TRY(auto st,
              impl_->sql("SELECT stages, exec_ns FROM feedback WHERE pk = ?1 AND version = ?2"));
      st->bind(1, pk).bind(2, version);
      FDO_TRY(bool row, st->step());
      if (row) {
        stages = as_u64(st->column_int64(0));
        exec_ns = as_u64(st->column_int64(1));
      }
    }
    {
      FDO_TRY(auto st, impl_->sql("INSERT INTO feedback (pk, version, stages, exec_ns, "
                                  "updated_at) VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT "
                                  "(pk, version) DO UPDATE SET stages = excluded.stages, "
                                  "exec_ns = excluded.exec_ns, updated_at = excluded.updated_at"));
      st->bind(1, pk).bind(2, version);
      st->bind(3, as_i64(sat_add(stages, m.totals.stages)));
      st->bind(4, as_i64(sat_add(exec_ns, m.totals.exec_ns)));
      st->bind(5, now);
      FDO_TRY_STATUS(st->run());
    }
    for (const auto& [name, value] : m.totals.counters) {
      // SQLite's integer addition overflows into REAL, so sums are done here
      // in uint64 and stored bit-for-bit.
      std::uint64_t old = 0;
      {
        FDO_TRY(auto st, impl_->sql("SELECT value FROM feedback_counters WHERE pk = ?1 AND "
                                    "version = ?2 AND name = ?3"));
        st->bind(1, pk).bind(2, version).bind(3, name);
        FDO_TRY(bool row, st->step());
        if (row) old = as_u64(st->column_int64(0));
      }
      FDO_TRY(auto st, impl_->sql("INSERT INTO feedback_counters (pk, version, name, value) "
                                  "VALUES (?1, ?2, ?3, ?4) ON CONFLICT (pk, version, name) "
                                  "DO UPDATE SET value = excluded.value"));
      st->bind(1, pk).bind(2, version).bind(3, name).bind(4, as_i64(sat_add(old, value)));
      FDO_TRY_STATUS(st->run());
    }
    for (const auto& [fn, counts] : m.totals.function_counts) {
      std::vector<std::uint64_t> sum = counts;
      {
        FDO_TRY(auto st, impl_->sql("SELECT counts FROM feedback_function_counts WHERE pk = ?1 "
                                    "AND version = ?2 AND function = ?3"));
        st->bind(1, pk).bind(2, version).bind(3, fn);
        FDO_TRY(bool row, st->step());
        if (row) {
          FDO_TRY(auto old, decode_counts(st->column_blob(0), what + " function " + fn));
          if (old.size() != counts.size())
            return make_error(Errc::invalid_argument,
                              what + ": function " + fn + " has " + std::to_string(counts.size()) +
                                  " counts but " + std::to_string(old.size()) +
                                  " are stored (nothing of the batch applied)");
          for (size_t k = 0; k < sum.size(); ++k)
            sum[k] = sat_add(old[k], sum[k]);
        }
      }
      FDO_TRY(auto st,
              impl_->sql("INSERT INTO feedback_function_counts (pk, version, function, "
                         "counts) VALUES (?1, ?2, ?3, ?4) ON CONFLICT "
                         "(pk, version, function) DO UPDATE SET counts = excluded.counts"));
      auto blob = encode_counts(sum);
      st->bind(1, pk).bind(2, version).bind(3, fn).bind_blob(4, blob);
      FDO_TRY_STATUS(st->run());
    }
    result.applied += m.rows;
  }
  FDO_TRY_STATUS(tx.commit());
  return result;
}

Expected<std::optional<FeedbackTotals>> ProfileStore::feedback(std::string_view pk,
                                                               std::int64_t version) const {
  FDO_TRY_STATUS(check_key("profile key", pk));
  std::lock_guard lock(impl_->mu);
  // One snapshot so the totals and their details come from the same batch.
  FDO_TRY(auto tx, Transaction::begin(impl_->db, TxKind::deferred));
  FeedbackTotals t;
  t.pk = std::string(pk);
  t.version = version;
  std::string what = "feedback for " + describe_profile(pk, version);
  {
    FDO_TRY(auto st, impl_->sql("SELECT stages, exec_ns, updated_at FROM feedback "
                                "WHERE pk = ?1 AND version = ?2"));
    st->bind(1, pk).bind(2, version);
    FDO_TRY(bool row, st->step());
    if (!row) return std::optional<FeedbackTotals>();
    t.stages = as_u64(st->column_int64(0));
    t.exec_ns = as_u64(st->column_int64(1));
    t.updated_at = st->column_int64(2);
  }
  {
    FDO_TRY(auto st, impl_->sql("SELECT name, value FROM feedback_counters "
                                "WHERE pk = ?1 AND version = ?2"));
    st->bind(1, pk).bind(2, version);
    while (true) {
      FDO_TRY(bool row, st->step());
      if (!row) break;
      t.counters[st->column_text(0)] = as_u64(st->column_int64(1));
    }
  }
  {
    FDO_TRY(auto st, impl_->sql("SELECT function, counts FROM feedback_function_counts "
                                "WHERE pk = ?1 AND version = ?2"));
    st->bind(1, pk).bind(2, version);
    while (true) {
      FDO_TRY(bool row, st->step());
      if (!row) break;
      std::string fn = st->column_text(0);
      FDO_TRY(auto counts, decode_counts(st->column_blob(1), what + " function " + fn));
      t.function_counts[fn] = std::move(counts);
    }
  }
  FDO_TRY_STATUS(tx.commit());
  return std::optional<FeedbackTotals>(std::move(t));
}

} // namespace fdo::profile_store
