// Thin RAII wrappers over SQLite's C API: a connection, prepared statements
// (with a per-connection cache of reusable ones) and a transaction that rolls
// back unless committed. Every SQLite failure becomes an fdo::Error that names
// the database file, what was being done and SQLite's own message.
//
// Not thread-safe: one Connection is used by one thread at a time (the
// ProfileStore guards its write connection with a mutex and lends each read
// connection to one caller at a time). sqlite3.h is not included here so
// users of the store do not need SQLite's headers.
#pragma once

#include "fdo/util/expected.h"

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

struct sqlite3;
struct sqlite3_stmt;

namespace fdo::profile_store::sqlite {

enum class Access {
  read_write_create,
  read_write,
  read_only,
  // Read-only with SQLite's immutable flag: no locks, no -wal/-shm files,
  // nothing created or written. Only safe when no other connection writes.
  inspect
};

// Maps an SQLite result code to the project's error code: busy/locked ->
// timeout, corrupt/notadb -> corrupt, readonly/perm/auth -> permission_denied,
// full/toobig/nomem -> resource_exhausted, cantopen/ioerr -> io, else internal.
Errc errc_from_sqlite(int rc);

class Statement {
public:
  Statement() = default;
  ~Statement();
  Statement(Statement&& other) noexcept;
  Statement& operator=(Statement&& other) noexcept;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  // Binding never fails loudly: the first bad bind is remembered and reported
  // by the next step(), so call sites stay linear. Indexes start at 1.
  Statement& bind(int index, std::int64_t value);
  Statement& bind(int index, std::string_view text);
  // Text SQLite reads where it lies, without a copy: the bytes must stay
  // alive and unchanged until the statement is reset (a CachedStatement's
  // end) or the index bound again. For large values (a profile's body).
  Statement& bind_in_place(int index, std::string_view text);
  Statement& bind_blob(int index, std::span<const std::uint8_t> bytes);
  Statement& bind_null(int index);

  // true: a row is available; false: the statement finished.
  Expected<bool> step();
  // Runs to completion; a statement that yields rows is fine (rows are skipped).
  Status run();

  std::int64_t column_int64(int col) const;
  std::string column_text(int col) const;
  std::vector<std::uint8_t> column_blob(int col) const;
  bool column_is_null(int col) const;

  // Ready for re-execution with fresh bindings.
  void reset();

private:
  friend class Connection;
  explicit Statement(sqlite3_stmt* stmt) : stmt_(stmt) {}
  void note_bind(int rc);

  sqlite3_stmt* stmt_ = nullptr;
  int bind_error_ = 0; // SQLITE_OK
};

// A statement borrowed from the connection's cache; reset (and its bindings
// cleared) when the borrow ends so the next user starts clean.
class CachedStatement {
public:
  explicit CachedStatement(Statement* stmt) : stmt_(stmt) {}
  ~CachedStatement() {
    if (stmt_ != nullptr) stmt_->reset();
  }
  CachedStatement(CachedStatement&& other) noexcept : stmt_(other.stmt_) { other.stmt_ = nullptr; }
  CachedStatement& operator=(CachedStatement&&) = delete;
  CachedStatement(const CachedStatement&) = delete;
  CachedStatement& operator=(const CachedStatement&) = delete;

  Statement* operator->() const { return stmt_; }
  Statement& operator*() const { return *stmt_; }

private:
  Statement* stmt_;
};

// What closing the last connection to a WAL database does: checkpoint the
// WAL into the database file (SQLite's default), or leave both files as they
// are (for a connection that is only looking at a file it may refuse).
enum class CloseCheckpoint { checkpoint, leave_files };

class Connection {
public:
  // Opens (and with read_write_create, creates) the database file. Nothing is
  // read from the file yet: SQLite reads the header lazily on first use.
  static Expected<Connection> open(const std::string& path, Access access);

  Connection() = default;
  ~Connection();
  Connection(Connection&& other) noexcept;
  Connection& operator=(Connection&& other) noexcept;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  sqlite3* handle() const { return db_; }
  const std::string& path() const { return path_; }

  void set_busy_timeout(std::chrono::milliseconds timeout);
  Status set_close_checkpoint(CloseCheckpoint mode);
  // Runs one or more statements that return no rows of interest.
  Status exec(std::string_view sql);
  Expected<Statement> prepare(std::string_view sql);
  // Prepared once per connection (keyed by the SQL text) and reused.
  Expected<CachedStatement> cached(const std::string& sql);

  // First column of the first row as an integer / text (error when no row).
  Expected<std::int64_t> query_int(std::string_view sql);
  Expected<std::string> query_text(std::string_view sql);

  // Rows changed by the last INSERT/UPDATE/DELETE.
  std::int64_t changes() const;
  // true while an explicit transaction is open.
  bool in_transaction() const;

  // An Error for result code `rc` while doing `what` on this database.
  Error error(int rc, std::string_view what) const;

private:
  Connection(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  void close();

  sqlite3* db_ = nullptr;
  std::string path_;
  // unique_ptr keeps statement addresses stable while the map rehashes.
  std::unordered_map<std::string, std::unique_ptr<Statement>> cache_;
};

enum class TxKind {
  deferred, // for reads: a consistent snapshot, takes no write lock
  immediate // for writes: takes the write lock up front so two writers never
            // deadlock upgrading read locks (which SQLite cannot retry)
};

// BEGIN on creation; ROLLBACK on destruction unless commit() succeeded.
class Transaction {
public:
  static Expected<Transaction> begin(Connection& conn, TxKind kind);
  ~Transaction();
  Transaction(Transaction&& other) noexcept : conn_(other.conn_) { other.conn_ = nullptr; }
  Transaction& operator=(Transaction&&) = delete;
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;

  Status commit();

private:
  explicit Transaction(Connection* conn) : conn_(conn) {}
  Connection* conn_; // null once committed or rolled back
};

} // namespace fdo::profile_store::sqlite
