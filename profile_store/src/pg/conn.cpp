#include "conn.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <poll.h>

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

namespace {

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' '))
    s.pop_back();
  return s;
}

// Waits until libpq's socket is ready for what PQconnectPoll asked, or the
// deadline passes (false).
bool wait_socket(PGconn* c, PostgresPollingStatusType want,
                 std::chrono::steady_clock::time_point deadline) {
  pollfd pfd{};
  pfd.fd = PQsocket(c);
  pfd.events = want == PGRES_POLLING_READING ? POLLIN : POLLOUT;
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    int n = ::poll(&pfd, 1, static_cast<int>(std::min<std::int64_t>(left.count(), 1000)));
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return true; // PQconnectPoll reports the socket's error
  }
}

} // namespace

ConnectFailure classify_connect_failure(std::string_view message, bool needs_password) {
  ConnectFailure f;
  // At verbose error verbosity a server's refusal reads
  // "...failed: FATAL:  28P01: password authentication failed for user ...",
  // followed by a LOCATION line: take the SQLSTATE, drop the location.
  std::string text(message);
  if (auto loc = text.find("\nLOCATION:"); loc != std::string::npos) text.resize(loc);
  text = trimmed(std::move(text));
  for (std::size_t at = text.find(":  "); at != std::string::npos; at = text.find(":  ", at + 1)) {
    std::size_t code = at + 3;
    if (code + 7 > text.size() || text.compare(code + 5, 2, ": ") != 0) continue;
    bool sqlstate = true;
    for (std::size_t i = code; i < code + 5; ++i)
      sqlstate =
          sqlstate && ((text[i] >= '0' && text[i] <= '9') || (text[i] >= 'A' && text[i] <= 'Z'));
    if (!sqlstate) continue;
    f.sqlstate = text.substr(code, 5);
    text.erase(code, 7);
    break;
  }
  f.message = text;
  const std::string& s = f.sqlstate;
  if (s.starts_with("28") || s == "42501") {
    // invalid_authorization_specification (no such role, no pg_hba.conf
    // entry, role may not log in), invalid_password, insufficient_privilege
    // (no CONNECT on the database).
    f.code = Errc::permission_denied;
    f.problem = "the server refused the credentials (check the user and password in the URI, the "
                "role and pg_hba.conf)";
  } else if (s == "3D000") {
    f.code = Errc::not_found;
    f.problem = "the database does not exist (create it, or fix the database name in the URI)";
  } else if (s.starts_with("22") || s.starts_with("42") || s == "0A000") {
    // A bad option or parameter in the URI (options=-c ...).
    f.code = Errc::invalid_argument;
    f.problem = "the server refused a connection option in the URI";
  } else if (s.empty() && needs_password) {
    f.code = Errc::permission_denied;
    f.problem = "the server asks for a password and the URI has none";
  }
  // Anything else (refused, no socket, timeout, starting up, shutting down,
  // too many connections) may pass: Errc::unavailable.
  return f;
}

Expected<Conn> Conn::connect(const std::string& uri, const std::string& endpoint,
                             const Options& options, const char* application_name) {
  // A URI libpq cannot parse is a configuration error, not an outage.
  // libpq's reason quotes the offending part, which may be the password:
  // left out.
  char* parse_error = nullptr;
  PQconninfoOption* parsed = PQconninfoParse(uri.c_str(), &parse_error);
  PQfreemem(parse_error);
  if (parsed == nullptr)
    return make_error(Errc::invalid_argument, "profile store " + endpoint +
                                                  ": not a valid connection URI (libpq cannot "
                                                  "parse it; see the libpq connection URI format)");
  PQconninfoFree(parsed);
  // libpq counts connect_timeout in whole seconds (and 1 means 2 on some
  // versions); round up so a short timeout never becomes "wait forever" (0).
  long long secs = (options.connect_timeout.count() + 999) / 1000;
  if (secs < 2) secs = 2;
  const std::string timeout = std::to_string(secs);
  // The URI first: later keywords override what it says about the same thing.
  const char* keys[] = {"dbname", "connect_timeout", "application_name", nullptr};
  const char* values[] = {uri.c_str(), timeout.c_str(), application_name, nullptr};
  // Connect without blocking so the error verbosity can be raised first:
  // then a server's refusal carries its SQLSTATE (blocking PQconnectdbParams
  // gives only the localised text).
  PGconn* c = PQconnectStartParams(keys, values, /*expand_dbname=*/1);
  if (c == nullptr)
    return make_error(Errc::resource_exhausted,
                      "profile store " + endpoint + ": out of memory opening a connection");
  Conn conn(c, endpoint);
  PQsetErrorVerbosity(c, PQERRORS_VERBOSE);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(secs);
  PostgresPollingStatusType st = PGRES_POLLING_WRITING;
  while (PQstatus(c) != CONNECTION_BAD && st != PGRES_POLLING_OK && st != PGRES_POLLING_FAILED) {
    if (!wait_socket(c, st, deadline))
      return make_error(Errc::unavailable, "profile store " + endpoint +
                                               " unreachable: no answer within " + timeout + " s");
    st = PQconnectPoll(c);
  }
  if (PQstatus(c) != CONNECTION_OK) {
    ConnectFailure f = classify_connect_failure(PQerrorMessage(c), PQconnectionNeedsPassword(c));
    if (f.code == Errc::unavailable)
      return make_error(Errc::unavailable,
                        "profile store " + endpoint + " unreachable: " + f.message);
    return make_error(f.code, "profile store " + endpoint + ": " + f.problem + ": " + f.message +
                                  (f.sqlstate.empty() ? "" : " (SQLSTATE " + f.sqlstate + ")"));
  }
  PQsetErrorVerbosity(c, PQERRORS_DEFAULT);
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
