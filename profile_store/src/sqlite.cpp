#include "fdo/profile_store/sqlite.h"

#include <cstdio>
#include <sqlite3.h>

namespace fdo::profile_store::sqlite {

Errc errc_from_sqlite(int rc) {
  switch (rc & 0xff) {
  case SQLITE_BUSY:
  case SQLITE_LOCKED:
    return Errc::timeout;
  case SQLITE_CORRUPT:
  case SQLITE_NOTADB:
    return Errc::corrupt;
  case SQLITE_READONLY:
  case SQLITE_PERM:
  case SQLITE_AUTH:
    return Errc::permission_denied;
  case SQLITE_FULL:
  case SQLITE_TOOBIG:
  case SQLITE_NOMEM:
    return Errc::resource_exhausted;
  case SQLITE_CANTOPEN:
  case SQLITE_IOERR:
  case SQLITE_PROTOCOL:
    return Errc::io;
  default:
    return Errc::internal;
  }
}

namespace {
Error make_sqlite_error(sqlite3* db, const std::string& path, int rc, std::string_view what) {
  std::string msg = "sqlite database '" + path + "': " + std::string(what) + ": ";
  // sqlite3_errmsg describes the most recent failure on this handle, which
  // is the one being reported; errstr is the fallback without a handle.
  msg += db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  if ((rc & 0xff) == SQLITE_BUSY)
    msg += " (another connection holds the lock and the busy timeout expired)";
  return make_error(errc_from_sqlite(rc), std::move(msg));
}

// Built by append: GCC 12 warns (-Wrestrict, falsely) on "'" + std::string(x).
std::string quoted(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 2);
  out += '\'';
  out.append(text);
  out += '\'';
  return out;
}

std::string db_path(sqlite3* db) {
  const char* name = db != nullptr ? sqlite3_db_filename(db, "main") : nullptr;
  return name != nullptr ? name : "?";
}
} // namespace

// --- Statement ---

Statement::~Statement() {
  if (stmt_ != nullptr) sqlite3_finalize(stmt_);
}

Statement::Statement(Statement&& other) noexcept
    : stmt_(other.stmt_), bind_error_(other.bind_error_) {
  other.stmt_ = nullptr;
}

Statement& Statement::operator=(Statement&& other) noexcept {
  if (this != &other) {
    if (stmt_ != nullptr) sqlite3_finalize(stmt_);
    stmt_ = other.stmt_;
    bind_error_ = other.bind_error_;
    other.stmt_ = nullptr;
  }
  return *this;
}

void Statement::note_bind(int rc) {
  if (rc != SQLITE_OK && bind_error_ == SQLITE_OK) bind_error_ = rc;
}

Statement& Statement::bind(int index, std::int64_t value) {
  note_bind(sqlite3_bind_int64(stmt_, index, value));
  return *this;
}

Statement& Statement::bind(int index, std::string_view text) {
  // SQLITE_TRANSIENT: SQLite copies, so callers may pass temporaries.
  note_bind(
      sqlite3_bind_text64(stmt_, index, text.data(), text.size(), SQLITE_TRANSIENT, SQLITE_UTF8));
  return *this;
}

Statement& Statement::bind_in_place(int index, std::string_view text) {
  note_bind(
      sqlite3_bind_text64(stmt_, index, text.data(), text.size(), SQLITE_STATIC, SQLITE_UTF8));
  return *this;
}

Statement& Statement::bind_blob(int index, std::span<const std::uint8_t> bytes) {
  // A zero-length blob must still be a blob, not NULL: pass a valid pointer.
  static const std::uint8_t kEmpty = 0;
  note_bind(sqlite3_bind_blob64(stmt_, index, bytes.empty() ? &kEmpty : bytes.data(), bytes.size(),
                                SQLITE_TRANSIENT));
  return *this;
}

Statement& Statement::bind_null(int index) {
  note_bind(sqlite3_bind_null(stmt_, index));
  return *this;
}

Expected<bool> Statement::step() {
  sqlite3* db = sqlite3_db_handle(stmt_);
  if (bind_error_ != SQLITE_OK) {
    int rc = bind_error_;
    bind_error_ = SQLITE_OK;
    return make_sqlite_error(db, db_path(db), rc,
                             "bind parameters of " + quoted(sqlite3_sql(stmt_)));
  }
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  Error err = make_sqlite_error(db, db_path(db), rc, quoted(sqlite3_sql(stmt_)));
  // A failed statement must be reset before it can run again.
  sqlite3_reset(stmt_);
  return err;
}

Status Statement::run() {
  while (true) {
    FDO_TRY(bool row, step());
    if (!row) return ok();
  }
}

std::int64_t Statement::column_int64(int col) const {
  return sqlite3_column_int64(stmt_, col);
}

std::string Statement::column_text(int col) const {
  const unsigned char* p = sqlite3_column_text(stmt_, col);
  int n = sqlite3_column_bytes(stmt_, col);
  return p != nullptr ? std::string(reinterpret_cast<const char*>(p), static_cast<size_t>(n))
                      : std::string();
}

std::vector<std::uint8_t> Statement::column_blob(int col) const {
  const auto* p = static_cast<const std::uint8_t*>(sqlite3_column_blob(stmt_, col));
  int n = sqlite3_column_bytes(stmt_, col);
  return p != nullptr ? std::vector<std::uint8_t>(p, p + n) : std::vector<std::uint8_t>();
}

bool Statement::column_is_null(int col) const {
  return sqlite3_column_type(stmt_, col) == SQLITE_NULL;
}

void Statement::reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
  bind_error_ = SQLITE_OK;
}

// --- Connection ---

namespace {
// "file:" URI of a path, with the characters URIs reserve percent-encoded.
std::string file_uri(const std::string& path, std::string_view query) {
  std::string uri = "file:";
  for (char c : path) {
    if (c == '%' || c == '?' || c == '#') {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", static_cast<unsigned char>(c));
      uri += buf;
    } else {
      uri += c;
    }
  }
  uri += '?';
  uri.append(query);
  return uri;
}
} // namespace

Expected<Connection> Connection::open(const std::string& path, Access access) {
  int flags = SQLITE_OPEN_EXRESCODE;
  std::string name = path;
  switch (access) {
  case Access::read_write_create:
    flags |= SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
    break;
  case Access::read_write:
    flags |= SQLITE_OPEN_READWRITE;
    break;
  case Access::read_only:
    flags |= SQLITE_OPEN_READONLY;
    break;
  case Access::inspect:
    flags |= SQLITE_OPEN_READONLY | SQLITE_OPEN_URI;
    name = file_uri(path, "immutable=1");
    break;
  }
  // NOMUTEX: the owner serialises use of a connection; SQLite's own per-call
  // mutex would only add cost.
  flags |= SQLITE_OPEN_NOMUTEX;
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(name.c_str(), &db, flags, nullptr);
  if (rc != SQLITE_OK) {
    Error err = make_sqlite_error(db, path, rc, "open");
    sqlite3_close_v2(db); // sqlite3_open_v2 allocates a handle even on failure
    return err;
  }
  sqlite3_extended_result_codes(db, 1);
  return Connection(db, path);
}

Connection::~Connection() {
  close();
}

Connection::Connection(Connection&& other) noexcept
    : db_(other.db_), path_(std::move(other.path_)), cache_(std::move(other.cache_)) {
  other.db_ = nullptr;
  other.cache_.clear();
}

Connection& Connection::operator=(Connection&& other) noexcept {
  if (this != &other) {
    close();
    db_ = other.db_;
    path_ = std::move(other.path_);
    cache_ = std::move(other.cache_);
    other.db_ = nullptr;
    other.cache_.clear();
  }
  return *this;
}

void Connection::close() {
  // Statements must be finalized before the connection closes.
  cache_.clear();
  if (db_ != nullptr) {
    sqlite3_close_v2(db_);
    db_ = nullptr;
  }
}

void Connection::set_busy_timeout(std::chrono::milliseconds timeout) {
  sqlite3_busy_timeout(db_, static_cast<int>(timeout.count()));
}

Status Connection::set_close_checkpoint(CloseCheckpoint mode) {
  int rc = sqlite3_db_config(db_, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
                             mode == CloseCheckpoint::leave_files ? 1 : 0, nullptr);
  if (rc != SQLITE_OK) return error(rc, "set checkpoint on close");
  return ok();
}

Status Connection::exec(std::string_view sql) {
  std::string text(sql);
  char* errmsg = nullptr;
  int rc = sqlite3_exec(db_, text.c_str(), nullptr, nullptr, &errmsg);
  sqlite3_free(errmsg); // sqlite3_errmsg(db_) carries the same text
  if (rc != SQLITE_OK) {
    std::string what = text.size() > 80 ? text.substr(0, 77) + "..." : text;
    return error(rc, quoted(what));
  }
  return ok();
}

Expected<Statement> Connection::prepare(std::string_view sql) {
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v3(db_, sql.data(), static_cast<int>(sql.size()), 0, &stmt, nullptr);
  if (rc != SQLITE_OK) return error(rc, "prepare " + quoted(sql));
  if (stmt == nullptr) return make_error(Errc::internal, "prepare: empty SQL statement");
  return Statement(stmt);
}

Expected<CachedStatement> Connection::cached(const std::string& sql) {
  auto it = cache_.find(sql);
  if (it == cache_.end()) {
    sqlite3_stmt* stmt = nullptr;
    int rc = sqlite3_prepare_v3(db_, sql.data(), static_cast<int>(sql.size()),
                                SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
    if (rc != SQLITE_OK) return error(rc, "prepare " + quoted(sql));
    if (stmt == nullptr) return make_error(Errc::internal, "prepare: empty SQL statement");
    it = cache_.emplace(sql, std::unique_ptr<Statement>(new Statement(stmt))).first;
  }
  return CachedStatement(it->second.get());
}

Expected<std::int64_t> Connection::query_int(std::string_view sql) {
  FDO_TRY(Statement st, prepare(sql));
  FDO_TRY(bool row, st.step());
  if (!row) return make_error(Errc::internal, quoted(sql) + " returned no row");
  return st.column_int64(0);
}

Expected<std::string> Connection::query_text(std::string_view sql) {
  FDO_TRY(Statement st, prepare(sql));
  FDO_TRY(bool row, st.step());
  if (!row) return make_error(Errc::internal, quoted(sql) + " returned no row");
  return st.column_text(0);
}

std::int64_t Connection::changes() const {
  return sqlite3_changes64(db_);
}

bool Connection::in_transaction() const {
  return sqlite3_get_autocommit(db_) == 0;
}

Error Connection::error(int rc, std::string_view what) const {
  return make_sqlite_error(db_, path_, rc, what);
}

// --- Transaction ---

Expected<Transaction> Transaction::begin(Connection& conn, TxKind kind) {
  FDO_TRY_STATUS(conn.exec(kind == TxKind::immediate ? "BEGIN IMMEDIATE" : "BEGIN DEFERRED"));
  return Transaction(&conn);
}

Transaction::~Transaction() {
  // Some failures (SQLITE_FULL, IOERR during commit) already rolled back;
  // a second ROLLBACK would only produce a spurious error.
  if (conn_ != nullptr && conn_->in_transaction()) (void)conn_->exec("ROLLBACK");
}

Status Transaction::commit() {
  if (conn_ == nullptr) return make_error(Errc::internal, "commit of a finished transaction");
  FDO_TRY_STATUS(conn_->exec("COMMIT"));
  conn_ = nullptr;
  return ok();
}

} // namespace fdo::profile_store::sqlite
