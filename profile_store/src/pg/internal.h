// State and helpers shared by the PostgreSQL back end's source files.
#pragma once

#include "../internal.h"
#include "backend.h"
#include "conn.h"
#include "listener.h"
#include "pool.h"

#include <atomic>
#include <memory>

namespace fdo::profile_store {

namespace pg {
// The migrations (schema.cpp): creates or upgrades the database to the
// latest version; refuses a newer one. Read-only: checks only.
Status migrate(Conn& conn, OpenMode mode);
int latest_version();
Expected<int> schema_version(Conn& conn);
} // namespace pg

struct PgBackend::Impl {
  Impl(std::string uri_, std::string endpoint_, const Options& options_)
      : uri(std::move(uri_)), endpoint(std::move(endpoint_)), options(options_),
        retention(options_.retention),
        pool(uri, endpoint, options_,
             [mode = options_.mode](pg::Conn& c) { return pg::migrate(c, mode); }) {}

  const std::string uri; // with the password: never logged
  const std::string endpoint;
  const Options options;
  std::atomic<int> retention;
  pg::Pool pool;
  DocCache docs{8u << 20};
  pg::ProfileCache cache;
  std::unique_ptr<pg::Listener> listener; // after cache: stopped before it goes

  // permission_denied on a read-only store.
  Status writable() const;

  // On a leased connection (inside the caller's transaction, if any).
  // for_update: lock the profiles row until the transaction ends.
  Expected<std::optional<detail::ProfileState>> state(pg::Conn& c, std::string_view pk,
                                                      bool for_update);
  Expected<std::optional<StoredProfile>> current(pg::Conn& c, std::string_view pk);
  Expected<std::optional<StoredProfile>> get(pg::Conn& c, std::string_view pk,
                                             std::int64_t version);
  Expected<std::vector<StoredProfile>> history(pg::Conn& c, std::string_view pk);
  Expected<StoredProfile> read_row(const pg::Result& r, int row);

  // Inside the caller's transaction: the versioned write with its checks,
  // retention pruning and the change notification.
  // Writes one prepared version (prepare_write, at the same `now`) in the
  // caller's transaction on `c`.
  Expected<std::int64_t> write_profile(pg::Conn& c, detail::PreparedWrite&& w, std::int64_t now);
  // Writes the prepared versions in one transaction, all or none, then
  // announces their keys.
  Expected<std::vector<std::int64_t>> write_prepared(std::vector<detail::PreparedWrite>&& writes,
                                                     std::int64_t now);
  // A batch's error for write i of n ("batch write 2 of 3 (nothing
  // written)"); a single write's as it is.
  static Error batch_error(std::size_t i, std::size_t n, Error e);
  // After a commit that changed `pk`: this host's cache forgets it at once
  // (the notification does the same on every other host).
  void changed(const std::string& pk) { cache.invalidate(pk); }
};

namespace pg {
Status notify(Conn& c, std::string_view pk);
} // namespace pg

} // namespace fdo::profile_store
