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

Expected<std::vector<ImportedProfile>>
SqliteBackend::import_bundle(const json& bundle, std::int64_t owner, ImportConflict policy,
                             ActingOwner acting_owner, ImportNewKeys new_keys) {
  if (new_keys == ImportNewKeys::own_programs && !acting_owner)
    return make_error(Errc::invalid_argument,
                      "import: creating only the profile keys of an owner's programs needs the "
                      "acting owner");
  FDO_TRY(std::vector<detail::Incoming> incoming, detail::parse_bundle(bundle));
  FDO_TRY(auto lock, impl_->lock_writer());
  sqlite::Connection& db = impl_->writer;
  // All or nothing: a failure (or policy fail) leaves the store as it was.
  FDO_TRY(auto tx, Transaction::begin(db, TxKind::immediate));
  if (acting_owner) {
    // Every key first, so another tenant's profile fails the import before
    // anything (a conflict naming a local digest, say) is reported about
    // the bundle's other keys. A key the caller may not create reads the
    // same as another tenant's: neither says whether the key exists. Checked
    // in this transaction, so no key appears or changes hands in between.
    for (const detail::Incoming& in : incoming) {
      FDO_TRY(auto state, impl_->state(db, in.pk));
      bool allowed = state ? state->owner == *acting_owner : true;
      if (!state && new_keys == ImportNewKeys::own_programs) {
        FDO_TRY(allowed, detail::owns_program_with_pk(db, *acting_owner, in.pk));
      }
      if (!allowed) return detail::no_profile(in.pk).context("import (nothing imported)");
    }
  }
  std::int64_t now = detail::now_ms();
  std::vector<ImportedProfile> out;
  for (const detail::Incoming& in : incoming) {
    ImportedProfile r;
    r.pk = in.pk;
    FDO_TRY(auto state, impl_->state(db, in.pk));
    std::int64_t local = state ? state->current : 0;
    std::string local_digest(no_profile_digest());
    if (local != 0) {
      FDO_TRY(auto cur, impl_->current(db, in.pk));
      if (cur) local_digest = cur->digest;
    }
    r.version = local;
    r.digest = local_digest;
    FDO_TRY(bool write, detail::decide_import(in, policy, r));
    if (write) {
      auto v = impl_->write_profile(detail::import_request(in, owner, acting_owner, local), now);
      if (!v) return std::move(v).error().context("import (nothing imported)");
      r.version = *v;
      r.digest = in.digest;
    }
    if (in.pinned && (write || r.action == ImportAction::unchanged)) {
      FDO_TRY(auto st, db.cached("UPDATE profiles SET pinned = 1 WHERE pk = ?1"));
      st->bind(1, in.pk);
      FDO_TRY_STATUS(st->run());
    }
    out.push_back(std::move(r));
  }
  FDO_TRY_STATUS(tx.commit());
  return out;
}

} // namespace fdo::profile_store
