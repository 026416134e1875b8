// The back ends the store's conformance tests run against. A test case
// declares STORE_DIR(dir) instead of a TempDir: Catch2 runs it once per back
// end, and dir.file(name) is then a store location: a file in a temp dir
// (SQLite) or a fresh database on this test binary's one PostgreSQL server
// (started on first use, stopped at exit). Where no server can be started,
// the PostgreSQL runs are left out and the reason is printed once.
#pragma once

#include "fdo/profile_store/profile_store.h"
#include "fdo/profile_store/sqlite.h"
#include "support/postgres_server.h"
#include "support/skip.h"
#include "test_util.h"

#include <catch2/catch.hpp>
#include <iostream>
#include <libpq-fe.h>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace fdo::profile_store::test {

// The binary's server, started on first use.
inline fdo::test_support::PostgresServer& postgres_server() {
  static std::unique_ptr<fdo::test_support::PostgresServer> server =
      std::make_unique<fdo::test_support::PostgresServer>();
  return *server;
}

// Runs one SQL statement as the superuser on `dbname` (throws on failure).
inline void postgres_exec(const std::string& dbname, const std::string& sql) {
  PGconn* c = PQconnectdb(postgres_server().conninfo(dbname).c_str());
  std::string error;
  if (PQstatus(c) != CONNECTION_OK) {
    error = PQerrorMessage(c);
  } else {
    PGresult* r = PQexec(c, sql.c_str());
    auto st = PQresultStatus(r);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) error = PQresultErrorMessage(r);
    PQclear(r);
  }
  PQfinish(c);
  if (!error.empty()) throw std::runtime_error(sql + ": " + error);
}

// A new empty database; its URI.
inline std::string fresh_postgres_database() {
  static int counter = 0;
  std::string name = "fdo_t" + std::to_string(::getpid()) + "_" + std::to_string(++counter);
  postgres_exec("postgres", "CREATE DATABASE " + name);
  return "postgresql:///" + name + "?host=" + postgres_server().socket_dir() + "&user=postgres";
}

inline std::string database_of(const std::string& uri) {
  auto slash = uri.find(":///") + 4;
  return uri.substr(slash, uri.find('?') - slash);
}

inline std::vector<StoreKind> store_kinds() {
  static const std::vector<StoreKind> kinds = [] {
    std::vector<StoreKind> k{StoreKind::sqlite};
    if (fdo::test_support::PostgresServer::available()) k.push_back(StoreKind::postgresql);
    return k;
  }();
  // The SQLite part runs; the case reads as skipped, not passed.
  if (kinds.size() == 1)
    fdo::test_support::note_skip("profile store conformance: PostgreSQL runs " +
                                 fdo::test_support::PostgresServer::skip_reason());
  return kinds;
}

// A connection to a store's database that is not the store's own: what
// another process, another host or an operator's SQL session does behind the
// store's back. exec() throws on failure; statements run outside a
// transaction unless begin() opened one, which the destructor rolls back.
// `sql` must be accepted by both engines.
class RawConnection {
public:
  RawConnection(StoreKind kind, const std::string& location) : kind_(kind) {
    if (kind_ == StoreKind::sqlite) {
      auto db = sqlite::Connection::open(location, sqlite::Access::read_write);
      if (!db) throw std::runtime_error(db.error().describe());
      sqlite_.emplace(std::move(*db));
      return;
    }
    pg_.reset(PQconnectdb(postgres_server().conninfo(database_of(location)).c_str()));
    if (PQstatus(pg_.get()) != CONNECTION_OK)
      throw std::runtime_error(std::string("connect: ") + PQerrorMessage(pg_.get()));
  }
  ~RawConnection() {
    if (in_transaction_) (void)try_exec("ROLLBACK");
  }
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  // BEGIN, taking SQLite's write lock at once (PostgreSQL locks rows as the
  // statements change them).
  void begin() {
    exec(kind_ == StoreKind::sqlite ? "BEGIN IMMEDIATE" : "BEGIN");
    in_transaction_ = true;
  }
  // False when the engine refused (never throws: safe in cleanup).
  bool rollback() noexcept {
    in_transaction_ = false;
    try {
      return try_exec("ROLLBACK").empty();
    } catch (...) {
      return false;
    }
  }
  bool in_transaction() const { return in_transaction_; }
  void exec(const std::string& sql) {
    if (std::string error = try_exec(sql); !error.empty())
      throw std::runtime_error(sql + ": " + error);
  }

private:
  // "" on success, else the engine's message.
  std::string try_exec(const std::string& sql) {
    if (kind_ == StoreKind::sqlite) {
      auto st = sqlite_->exec(sql);
      return st ? std::string() : st.error().describe();
    }
    std::unique_ptr<PGresult, decltype(&PQclear)> r(PQexec(pg_.get(), sql.c_str()), &PQclear);
    auto st = PQresultStatus(r.get());
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) return PQresultErrorMessage(r.get());
    return {};
  }

  StoreKind kind_;
  bool in_transaction_ = false;
  std::optional<sqlite::Connection> sqlite_;
  std::unique_ptr<PGconn, decltype(&PQfinish)> pg_{nullptr, &PQfinish};
};

class StoreDir : public TempDir {
public:
  explicit StoreDir(StoreKind kind) : kind_(kind) {}
  StoreKind kind() const { return kind_; }
  // The store location called `name` in this test (the same name: the same store).
  std::string file(const std::string& name) {
    if (kind_ == StoreKind::sqlite) return TempDir::file(name);
    auto it = databases_.find(name);
    if (it == databases_.end()) it = databases_.emplace(name, fresh_postgres_database()).first;
    return it->second;
  }
  // Runs `sql` on the store called `name` from another connection (what
  // time, another tool or an operator leaves behind).
  void exec_sql(const std::string& name, const std::string& sql) {
    RawConnection(kind_, file(name)).exec(sql);
  }

private:
  StoreKind kind_;
  std::map<std::string, std::string> databases_;
};

} // namespace fdo::profile_store::test

#define STORE_DIR(name)                                                                            \
  ::fdo::profile_store::test::StoreDir name(                                                       \
      GENERATE(from_range(::fdo::profile_store::test::store_kinds())));                            \
  INFO("back end: " << ::fdo::profile_store::to_string(name.kind()))
