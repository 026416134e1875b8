// libpq, wrapped: one connection (RAII), a query result (RAII), statements
// with text parameters, a transaction that rolls back unless committed, and
// the mapping of PostgreSQL failures onto fdo's error codes:
//   connection refused / lost, server shutting down -> Errc::unavailable
//   at connect: credentials refused (SQLSTATE class 28, 42501, or a password
//   the server asks for and the URI lacks)          -> Errc::permission_denied
//   at connect: no such database (3D000)            -> Errc::not_found
//   at connect: a bad URI or connection option      -> Errc::invalid_argument
//   statement_timeout                               -> Errc::timeout
//   serialization failure, deadlock, unique key     -> Errc::conflict
//   bad data (class 22, e.g. invalid UTF-8)         -> Errc::invalid_argument
//   anything else                                   -> Errc::io
// Messages name the endpoint (the location with its password redacted).
#pragma once

#include "fdo/profile_store/profile_store.h"

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <libpq-fe.h>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fdo::profile_store::pg {

// One statement parameter in text form; nullopt is SQL NULL.
using Param = std::optional<std::string>;
inline Param p(std::string_view s) {
  return std::string(s);
}
inline Param p(std::int64_t v) {
  return std::to_string(v);
}
inline Param p(int v) {
  return std::to_string(v);
}
inline Param p(bool v) {
  return std::string(v ? "true" : "false");
}
// Empty means "not known": NULL.
inline Param p_or_null(std::string_view s) {
  return s.empty() ? Param() : Param(std::string(s));
}
inline Param p_or_null(const std::optional<std::int64_t>& v) {
  return v ? Param(std::to_string(*v)) : Param();
}

// Why a connection attempt failed, from libpq's message at verbose error
// verbosity (which carries the server's SQLSTATE) and
// PQconnectionNeedsPassword. code is Errc::unavailable where waiting may
// help (no server, refused, timed out, starting up, too many clients), else
// a configuration error that retrying never fixes, with `problem` saying
// what to fix. message: libpq's text without the SQLSTATE and location.
struct ConnectFailure {
  Errc code = Errc::unavailable;
  std::string sqlstate; // "" when the server did not answer with one
  std::string problem;
  std::string message;
};
ConnectFailure classify_connect_failure(std::string_view message, bool needs_password);

class Result {
public:
  Result() = default;
  explicit Result(PGresult* r) : r_(r) {}
  Result(Result&& o) noexcept : r_(o.r_) { o.r_ = nullptr; }
  Result& operator=(Result&& o) noexcept;
  Result(const Result&) = delete;
  Result& operator=(const Result&) = delete;
  ~Result() {
    if (r_) PQclear(r_);
  }

  int rows() const { return r_ ? PQntuples(r_) : 0; }
  // Rows a command changed (UPDATE, DELETE, INSERT).
  std::int64_t affected() const;
  bool null(int row, int col) const { return PQgetisnull(r_, row, col) != 0; }
  std::string text(int row, int col) const { return PQgetvalue(r_, row, col); }
  std::int64_t i64(int row, int col) const; // NULL reads 0
  bool boolean(int row, int col) const { return text(row, col) == "t"; }
  PGresult* get() const { return r_; }

private:
  PGresult* r_ = nullptr;
};

class Conn {
public:
  // Opens a connection to `uri` (any libpq URI) with the options' connect
  // and statement timeouts; `endpoint` names it in errors.
  static Expected<Conn> connect(const std::string& uri, const std::string& endpoint,
                                const Options& options, const char* application_name = "fdo");

  Conn(Conn&& o) noexcept : c_(o.c_), endpoint_(std::move(o.endpoint_)) { o.c_ = nullptr; }
  Conn& operator=(Conn&& o) noexcept;
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;
  ~Conn() {
    if (c_) PQfinish(c_);
  }

  // One statement with $1.. parameters (text). Several statements without
  // parameters: exec_script.
  Expected<Result> exec(std::string_view sql, const std::vector<Param>& params = {});
  Status exec_script(std::string_view sql);

  // The connection still works as far as libpq knows, and is not inside a
  // transaction (pools keep only such connections).
  bool reusable() const;
  PGconn* handle() const { return c_; }
  const std::string& endpoint() const { return endpoint_; }

private:
  Conn(PGconn* c, std::string endpoint) : c_(c), endpoint_(std::move(endpoint)) {}
  Error error_of(const PGresult* r, std::string_view sql) const;

  PGconn* c_ = nullptr;
  std::string endpoint_;
};

// BEGIN on construction (begin()); ROLLBACK unless commit() succeeded.
class Tx {
public:
  static Expected<Tx> begin(Conn& conn);
  Tx(Tx&& o) noexcept : conn_(o.conn_) { o.conn_ = nullptr; }
  Tx& operator=(Tx&&) = delete;
  Tx(const Tx&) = delete;
  Tx& operator=(const Tx&) = delete;
  ~Tx();
  Status commit();

private:
  explicit Tx(Conn* conn) : conn_(conn) {}
  Conn* conn_;
};

// The notification channel every profile change is announced on (payload: pk).
inline constexpr const char* kChannel = "fdo_profile_changed";

// bigint[] in text form ("{1,2,3}"), uint64 bit-for-bit in int64.
std::string counts_literal(const std::vector<std::uint64_t>& counts);
Expected<std::vector<std::uint64_t>> parse_counts(const std::string& text, const std::string& what);

} // namespace fdo::profile_store::pg
