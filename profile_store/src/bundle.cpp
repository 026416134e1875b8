// Export and import of profiles as a JSON bundle (moving profiles between hosts).
// The format is described in docs/profile_store.md.
#include "bundle_format.h"
#include "internal.h"

#include <set>

namespace fdo::profile_store {

using nlohmann::json;
using sqlite::Transaction;
using sqlite::TxKind;

namespace {

Expected<json> export_entry(SqliteBackend::Impl& impl, sqlite::Connection& db,
                            const std::string& pk, ExportHistory history) {
  FDO_TRY_STATUS(detail::check_key("profile key", pk));
  FDO_TRY(auto state, impl.state(db, pk));
  if (!state) return make_error(Errc::not_found, "export: no profile " + pk);
  FDO_TRY(auto current, impl.current(db, pk));
  std::optional<std::vector<StoredProfile>> versions;
  if (history == ExportHistory::full) {
    FDO_TRY(versions, impl.history(db, pk));
  }
  return detail::bundle_entry(pk, state->owner, state->pinned, state->last, current,
                              versions ? &*versions : nullptr);
}

// Inside the caller's read transaction, so the bundle is one snapshot: a
// concurrent writer cannot make it mix states.
Expected<json> export_snapshot(SqliteBackend::Impl& impl, sqlite::Connection& db,
                               const std::vector<std::string>& pks, ExportHistory history) {
  json profiles = json::array();
  std::set<std::string> seen;
  for (const std::string& pk : pks) {
    if (!seen.insert(pk).second) continue;
    FDO_TRY(json entry, export_entry(impl, db, pk, history));
    profiles.push_back(std::move(entry));
  }
  return detail::bundle_envelope(std::move(profiles), history);
}

} // namespace

Expected<json> SqliteBackend::export_bundle(std::span<const std::string> pks,
                                            ExportHistory history) const {
  FDO_TRY(auto lease, impl_->readers.acquire());
  FDO_TRY(auto tx, Transaction::begin(lease.db(), TxKind::deferred));
  FDO_TRY(json bundle, export_snapshot(*impl_, lease.db(),
                                       std::vector<std::string>(pks.begin(), pks.end()), history));
  FDO_TRY_STATUS(tx.commit());
  return bundle;
}

Expected<json> SqliteBackend::export_all(ExportHistory history) const {
  FDO_TRY(auto lease, impl_->readers.acquire());
  sqlite::Connection& db = lease.db();
  // The listing and the export share one snapshot, so every listed key is there.
  FDO_TRY(auto tx, Transaction::begin(db, TxKind::deferred));
  std::vector<std::string> pks;
  {
    FDO_TRY(auto st, db.cached("SELECT pk FROM profiles ORDER BY pk"));
    while (true) {
      FDO_TRY(bool row, st->step());
      if (!row) break;
      pks.push_back(st->column_text(0));
    }
  }
  FDO_TRY(json bundle, export_snapshot(*impl_, db, pks, history));
  FDO_TRY_STATUS(tx.commit());
  return bundle;
}

namespace {

// Import on the writer connection, inside the import's transaction.
class SqliteImportTarget final : public detail::ImportTarget {
public:
  SqliteImportTarget(SqliteBackend::Impl& impl, sqlite::Connection& db) : impl_(impl), db_(db) {}
  Expected<std::optional<detail::ProfileState>> state(const std::string& pk) override {
    return impl_.state(db_, pk);
  }
  Expected<std::optional<std::string>> current_digest(const std::string& pk) override {
    FDO_TRY(auto cur, impl_.current(db_, pk));
    if (!cur) return std::optional<std::string>();
    return std::optional<std::string>(std::move(cur->digest));
  }
  Expected<bool> owns_program_with_pk(std::int64_t owner, const std::string& pk) override {
    return detail::owns_program_with_pk(db_, owner, pk);
  }
  Expected<std::int64_t> write(const WriteRequest& req, std::int64_t now) override {
    FDO_TRY(detail::PreparedWrite w, detail::prepare_write(req, now));
    return impl_.write_profile(std::move(w), now);
  }
  Status set_pinned(const std::string& pk) override {
    FDO_TRY(auto st, db_.cached("UPDATE profiles SET pinned = 1 WHERE pk = ?1"));
    st->bind(1, pk);
    return st->run();
  }

private:
  SqliteBackend::Impl& impl_;
  sqlite::Connection& db_;
};

} // namespace

Expected<std::vector<ImportedProfile>>
SqliteBackend::import_bundle(const json& bundle, std::int64_t owner, ImportConflict policy,
                             ActingOwner acting_owner, ImportNewKeys new_keys) {
  FDO_TRY_STATUS(detail::check_import_request(new_keys, acting_owner));
  FDO_TRY(std::vector<detail::Incoming> incoming, detail::parse_bundle(bundle));
  FDO_TRY(auto lock, impl_->lock_writer());
  sqlite::Connection& db = impl_->writer;
  // All or nothing: a failure (or policy fail) leaves the store as it was.
  FDO_TRY(auto tx, Transaction::begin(db, TxKind::immediate));
  SqliteImportTarget target(*impl_, db);
  FDO_TRY(auto out, detail::import_into(target, incoming, owner, policy, acting_owner, new_keys,
                                        detail::now_ms()));
  FDO_TRY_STATUS(tx.commit());
  return out;
}

} // namespace fdo::profile_store
