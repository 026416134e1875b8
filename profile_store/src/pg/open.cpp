// Opening a PostgreSQL store (first connection, migrations, the listener)
// and the store-wide calls.
#include "fdo/profile_store/location.h"
#include "fdo/util/log.h"
#include "internal.h"

#include <limits>

namespace fdo::profile_store {

PgBackend::PgBackend(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PgBackend::~PgBackend() = default;

namespace {

Status check_pg_options(const Options& o) {
  if (o.retention < 1)
    return make_error(Errc::invalid_argument, "retention must keep at least 1 version (got " +
                                                  std::to_string(o.retention) + ")");
  if (o.read_connections < 1)
    return make_error(Errc::invalid_argument, "read_connections must be at least 1 (got " +
                                                  std::to_string(o.read_connections) + ")");
  if (o.connect_timeout.count() < 0 || o.statement_timeout.count() < 0 ||
      o.statement_timeout.count() > std::numeric_limits<int>::max())
    return make_error(Errc::invalid_argument, "PostgreSQL timeouts out of range");
  return ok();
}

} // namespace

Expected<std::unique_ptr<Backend>> PgBackend::open(const std::string& uri, const Options& options) {
  FDO_TRY_STATUS(check_pg_options(options));
  auto impl = std::make_unique<Impl>(uri, redact_location(uri), options);
  // The first connection proves the server reachable and the schema usable
  // (the pool migrates on it). Deferred: a server that does not answer yet
  // is the first call's problem, and each call's until it answers.
  if (auto lease = impl->pool.acquire(); !lease) {
    if (lease.error().code() != Errc::unavailable ||
        options.when_unreachable != WhenUnreachable::defer)
      return std::move(lease).error();
    log::warning(lease.error().describe() +
                 "; opened anyway: calls fail as unavailable until it answers, and the "
                 "schema is checked on the first connection that works");
  }
  impl->pool.mark_in_use();
  Impl* raw = impl.get();
  impl->listener = std::make_unique<pg::Listener>(
      [raw] { return raw->pool.connect_one("fdo-listener"); }, impl->cache);
  return std::unique_ptr<Backend>(std::make_unique<PgBackend>(std::move(impl)));
}

Status PgBackend::Impl::writable() const {
  if (options.mode == OpenMode::read_only)
    return make_error(Errc::permission_denied, "profile store " + endpoint + " is open read-only");
  return ok();
}

StoreKind PgBackend::kind() const {
  return StoreKind::postgresql;
}

std::string PgBackend::location() const {
  return impl_->endpoint;
}

const std::string& PgBackend::path() const {
  return impl_->endpoint;
}

std::optional<bool> PgBackend::change_listener_up() const {
  return impl_->cache.live();
}

Options PgBackend::options() const {
  Options o = impl_->options;
  o.retention = impl_->retention.load(std::memory_order_relaxed);
  return o;
}

Status PgBackend::set_retention(int versions) {
  if (versions < 1)
    return make_error(Errc::invalid_argument, "retention must keep at least 1 version (got " +
                                                  std::to_string(versions) + ")");
  impl_->retention.store(versions, std::memory_order_relaxed);
  return ok();
}

Expected<int> PgBackend::schema_version() const {
  FDO_TRY(auto lease, impl_->pool.acquire());
  return pg::schema_version(lease.conn());
}

Status PgBackend::integrity_check() const {
  return make_error(Errc::unsupported,
                    "profile store " + impl_->endpoint +
                        ": integrity_check is SQLite's; PostgreSQL keeps its own integrity "
                        "(constraints, checksums: see the server's amcheck and pg_checksums)");
}

Expected<BackupSummary> PgBackend::restore_from(const std::string&) {
  return make_error(Errc::unsupported,
                    "profile store " + impl_->endpoint +
                        ": restore_from copies SQLite files; back up and restore a PostgreSQL "
                        "store with pg_dump and pg_restore");
}

namespace pg {

Status notify(Conn& c, std::string_view pk) {
  FDO_TRY_STATUS(c.exec("SELECT pg_notify($1, $2)", {p(std::string_view(kChannel)), p(pk)}));
  return ok();
}

} // namespace pg

} // namespace fdo::profile_store
