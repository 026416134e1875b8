#include "conn.h"

#include <cstdlib>
#include <cstring>

namespace fdo::profile_store::pg {

Result& Result::operator=(Result&& o) noexcept {
  if (this != &o) {
    if (r_) PQclear(r_);
    r_ = o.r_;
    o.r_ = nullptr;
  }
  return *this;
}

std::int64_t Result::affected() const {
  const char* n = r_ ? PQcmdTuples(r_) : "";
  return *n ? std::strtoll(n, nullptr, 10) : 0;
}

std::int64_t Result::i64(int row, int col) const {
  if (null(row, col)) return 0;
  return std::strtoll(PQgetvalue(r_, row, col), nullptr, 10);
}

Conn& Conn::operator=(Conn&& o) noexcept {
  if (this != &o) {
    if (c_) PQfinish(c_);
    c_ = o.c_;
    endpoint_ = std::move(o.endpoint_);
    o.c_ = nullptr;
  }
  return *this;
}

Expected<Conn> Conn::connect(const std::string& uri, const std::string& endpoint,
                             const Options& options, const char* application_name) {
  // libpq counts connect_timeout in whole seconds (and 1 means 2 on some
  // versions); round up so a short timeout never becomes "wait forever" (0).
  long long secs = (options.connect_timeout.count() + 999) / 1000;
  if (secs < 2) secs = 2;
  const std::string timeout = std::to_string(secs);
  // The URI first: later keywords override what it says about the same thing.
  const char* keys[] = {"dbname", "connect_timeout", "application_name", nullptr};
  const char* values[] = {uri.c_str(), timeout.c_str(), application_name, nullptr};
  PGconn* c = PQconnectdbParams(keys, values, /*expand_dbname=*/1);
  if (c == nullptr)
    return make_error(Errc::resource_exhausted,
                      "profile store " + endpoint + ": out of memory opening a connection");
  Conn conn(c, endpoint);
  if (PQstatus(c) != CONNECTION_OK) {
    std::string why = PQerrorMessage(c);
    while (!why.empty() && (why.back() == '\n' || why.back() == ' '))
      why.pop_back();
    return make_error(Errc::unavailable, "profile store " + endpoint + " unreachable: " + why);
  }
  // Quiet NOTICEs (CREATE ... IF NOT EXISTS) instead of libpq printing them.
  PQsetNoticeProcessor(
      c, [](void*, const char*) {}, nullptr);
  FDO_TRY_STATUS(conn.exec_script(
      "SET statement_timeout = " + std::to_string(options.statement_timeout.count()) +
      "; SET client_min_messages = warning"));
  // A read-only store cannot write even by mistake: the server refuses it.
  if (options.mode == OpenMode::read_only)
    FDO_TRY_STATUS(conn.exec_script("SET default_transaction_read_only = on"));
  return conn;
}

Error Conn::error_of(const PGresult* r, std::string_view sql) const {
  std::string msg = r ? PQresultErrorMessage(r) : PQerrorMessage(c_);
  while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' '))
    msg.pop_back();
  const char* state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : nullptr;
  std::string code = state ? state : "";
  std::string where = "profile store " + endpoint_;
  if (PQstatus(c_) != CONNECTION_OK || code.starts_with("08") || code == "57P01" ||
      code == "57P02" || code == "57P03")
    return make_error(Errc::unavailable, where + ": connection lost: " + msg);
  if (code == "57014") return make_error(Errc::timeout, where + ": statement timed out: " + msg);
  if (code == "40001" || code == "40P01" || code == "23505")
    return make_error(Errc::conflict, where + ": " + msg);
  if (code.starts_with("22")) return make_error(Errc::invalid_argument, where + ": " + msg);
  if (code.starts_with("53")) return make_error(Errc::resource_exhausted, where + ": " + msg);
  std::string first(sql.substr(0, 60));
  return make_error(Errc::io, where + ": " + msg + " (in: " + first + "...)");
}

Expected<Result> Conn::exec(std::string_view sql, const std::vector<Param>& params) {
  std::vector<const char*> values;
  values.reserve(params.size());
  for (const Param& v : params)
    values.push_back(v ? v->c_str() : nullptr);
  std::string text(sql);
  Result r(PQexecParams(c_, text.c_str(), static_cast<int>(values.size()), nullptr, values.data(),
                        nullptr, nullptr, 0));
  ExecStatusType st = r.get() ? PQresultStatus(r.get()) : PGRES_FATAL_ERROR;
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) return error_of(r.get(), sql);
  return r;
}

Status Conn::exec_script(std::string_view sql) {
  std::string text(sql);
  Result r(PQexec(c_, text.c_str()));
  ExecStatusType st = r.get() ? PQresultStatus(r.get()) : PGRES_FATAL_ERROR;
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) return error_of(r.get(), sql);
  return ok();
}

bool Conn::reusable() const {
  return c_ && PQstatus(c_) == CONNECTION_OK && PQtransactionStatus(c_) == PQTRANS_IDLE;
}

Expected<Tx> Tx::begin(Conn& conn) {
  FDO_TRY_STATUS(conn.exec_script("BEGIN"));
  return Tx(&conn);
}

Tx::~Tx() {
  if (conn_ && PQstatus(conn_->handle()) == CONNECTION_OK &&
      PQtransactionStatus(conn_->handle()) != PQTRANS_IDLE)
    (void)conn_->exec_script("ROLLBACK");
}

Status Tx::commit() {
  Conn* c = conn_;
  conn_ = nullptr;
  return c->exec_script("COMMIT");
}

std::string counts_literal(const std::vector<std::uint64_t>& counts) {
  std::string out = "{";
  for (size_t i = 0; i < counts.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(static_cast<std::int64_t>(counts[i]));
  }
  return out + "}";
}

Expected<std::vector<std::uint64_t>> parse_counts(const std::string& text,
                                                  const std::string& what) {
  if (text.size() < 2 || text.front() != '{' || text.back() != '}')
    return make_error(Errc::corrupt, what + ": counts '" + text + "' are not an array");
  std::vector<std::uint64_t> out;
  const char* s = text.c_str() + 1;
  const char* end = text.c_str() + text.size() - 1;
  while (s < end) {
    char* next = nullptr;
    long long v = std::strtoll(s, &next, 10);
    if (next == s) return make_error(Errc::corrupt, what + ": bad counts '" + text + "'");
    out.push_back(static_cast<std::uint64_t>(v));
    s = next;
    if (s < end && *s == ',') ++s;
  }
  return out;
}

} // namespace fdo::profile_store::pg
