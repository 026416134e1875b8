// Implementation details shared by the profile store's source files.
#pragma once

#include "fdo/profile_store/profile_store.h"
#include "fdo/profile_store/sqlite.h"
#include "fdo/util/time.h"
#include "profile_rules.h"
#include "sqlite_backend.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace fdo::profile_store {

namespace detail {

// Keys are hashes in practice (64 hex digits); the bound only stops a
// runaway caller from filling the database with megabyte "keys".
inline constexpr std::size_t kMaxKeyBytes = 1024;

inline std::int64_t now_ms() {
  return fdo::unix_ms_now();
}
// "2026-11-22T10:11:12.345Z"
using fdo::rfc3339_ms;
Status check_key(std::string_view what, std::string_view key);
// The one error for "this caller may not see this profile": identical for an
// unknown key and for another tenant's profile.
Error no_profile(std::string_view pk);
std::string describe_profile(std::string_view pk, std::int64_t version);
// On a borrowed reader or the writer (inside the caller's transaction).
Expected<bool> owns_program_with_pk(sqlite::Connection& db, std::int64_t owner,
                                    std::string_view pk);

} // namespace detail

// Documents of recently read bodies, parsed and digest-checked. Parsing and
// re-hashing a body costs far more than reading it, and versions are written
// once, so a read whose body bytes equal the cached bytes reuses the result.
// The bytes are compared on every hit: a row changed by another process (or
// a version number reused after remove) is parsed and checked afresh.
// Thread-safe: shared by the write connection and every read connection.
class DocCache {
public:
  // Bounded by the bytes of the cached bodies (the parsed documents take a
  // small multiple of that); a body above a quarter of the budget is not cached.
  explicit DocCache(std::size_t budget_bytes) : budget_(budget_bytes) {}
  // The cached document for exactly this (pk, version, body, digest).
  std::optional<ProfileDoc> find(const std::string& pk, std::int64_t version,
                                 const std::string& body, const std::string& digest);
  // A version as read or written, shared (a write's is the one it hands its
  // caller and the read view: kept without a copy).
  void insert(SharedProfile record);

private:
  struct Entry {
    std::string key;
    SharedProfile record;
  };
  static std::string key_of(const std::string& pk, std::int64_t version);
  void erase(std::list<Entry>::iterator it);

  std::mutex mu_;
  std::size_t budget_;
  std::size_t bytes_ = 0;
  std::list<Entry> lru_; // most recently used first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
};

// Read connections of one store, opened on first need up to a limit and
// reused. A caller borrows one for one read call, so reads run in parallel
// with each other and with the write connection; a caller that finds all of
// them lent out waits for one to come back.
class ReadPool {
public:
  ReadPool(std::string path, std::chrono::milliseconds busy_timeout, int capacity);
  ReadPool(const ReadPool&) = delete;
  ReadPool& operator=(const ReadPool&) = delete;

  // A borrowed connection; returned to the pool when the lease ends.
  class Lease {
  public:
    Lease(Lease&& other) noexcept : pool_(other.pool_), conn_(std::move(other.conn_)) {}
    Lease& operator=(Lease&&) = delete;
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease();
    sqlite::Connection& db() const { return *conn_; }

  private:
    friend class ReadPool;
    Lease(ReadPool* pool, std::unique_ptr<sqlite::Connection> conn)
        : pool_(pool), conn_(std::move(conn)) {}
    ReadPool* pool_;
    std::unique_ptr<sqlite::Connection> conn_;
  };

  Expected<Lease> acquire();
  // How many leases were asked for so far: the store's reads of the file.
  std::uint64_t leases() const { return leases_.load(std::memory_order_relaxed); }
  // Adds a connection opened (and validated) elsewhere; counts toward the limit.
  void adopt(sqlite::Connection conn);

private:
  void give_back(std::unique_ptr<sqlite::Connection> conn);
  Expected<std::unique_ptr<sqlite::Connection>> open_one() const;

  const std::string path_;
  const std::chrono::milliseconds busy_timeout_;
  const int capacity_;
  std::mutex mu_;
  std::condition_variable returned_;
  std::vector<std::unique_ptr<sqlite::Connection>> idle_;
  int open_ = 0; // idle + lent + being opened
  std::atomic<std::uint64_t> leases_{0};
};

// Opens a read connection on a store's file: read-only at the SQLite level
// too (query_only), with the store's busy timeout.
Expected<sqlite::Connection> open_reader(const std::string& path,
                                         std::chrono::milliseconds busy_timeout);

struct SqliteBackend::Impl {
  Impl(std::string path_, const Options& options_)
      : path(std::move(path_)), options(options_), retention(options_.retention),
        readers(path, options_.busy_timeout, options_.read_connections) {}

  const std::string path;
  const Options options; // as opened; retention below is the one in force
  std::atomic<int> retention;

  // Writes take turns on one connection (SQLite allows one writer per file
  // anyway). Not open in read-only mode.
  std::mutex write_mu;
  sqlite::Connection writer;

  // Reads never touch the write connection or its mutex, so in WAL mode they
  // proceed while a write waits for the file lock or fsyncs.
  ReadPool readers;

  DocCache docs{8u << 20};

  // The write side, or permission_denied on a read-only store. Hold the
  // returned lock for the whole transaction on `writer`.
  Expected<std::unique_lock<std::mutex>> lock_writer();

  // The profiles row of one key.
  using State = detail::ProfileState;

  // Helpers that run on a given connection: a borrowed reader, or the writer
  // with write_mu held (inside the caller's transaction, if any).
  Expected<std::optional<State>> state(sqlite::Connection& db, std::string_view pk);
  Expected<std::optional<StoredProfile>> current(sqlite::Connection& db, std::string_view pk);
  Expected<std::optional<StoredProfile>> get(sqlite::Connection& db, std::string_view pk,
                                             std::int64_t version);
  // Oldest first; empty for an unknown key.
  Expected<std::vector<StoredProfile>> history(sqlite::Connection& db, std::string_view pk);
  // The row at the statement's cursor (columns as kProfileColumns).
  Expected<StoredProfile> read_profile_row(const sqlite::Statement& st);

  // On the writer, write_mu held, inside the caller's IMMEDIATE transaction.
  // Writes one prepared version (prepare_write, at the same `now`) in the
  // caller's transaction; with `stored`, leaves
  // there the version as a read returns it (valid once the transaction commits).
  Expected<std::int64_t> write_profile(detail::PreparedWrite&& w, std::int64_t now,
                                       SharedProfile* stored = nullptr);
};

} // namespace fdo::profile_store
