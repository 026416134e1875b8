// Export and import of profiles as a JSON bundle (moving profiles between hosts).
// The format is described in docs/profile_store.md.
#include "internal.h"

#include <set>

namespace fdo::profile_store {

using nlohmann::json;
using sqlite::Transaction;
using sqlite::TxKind;

namespace {

json version_json(const StoredProfile& p) {
  return {{"version", p.version},     {"digest", p.digest},   {"source", to_string(p.source)},
          {"reason", p.reason},       {"author", p.author},   {"host", p.host},
          {"stage", p.stage},         {"program", p.program}, {"created_at", p.created_at},
          {"profile", to_json(p.doc)}};
}

Expected<json> export_entry(SqliteBackend::Impl& impl, sqlite::Connection& db,
                            const std::string& pk, ExportHistory history) {
  FDO_TRY_STATUS(detail::check_key("profile key", pk));
  FDO_TRY(auto state, impl.state(db, pk));
  if (!state) return make_error(Errc::not_found, "export: no profile " + pk);
  json entry = {{"pk", pk},
                {"owner", state->owner},
                {"pinned", state->pinned},
                {"last_version", state->last},
                {"current", nullptr}};
  FDO_TRY(auto current, impl.current(db, pk));
  if (current) entry["current"] = version_json(*current);
  if (history == ExportHistory::full) {
    FDO_TRY(auto versions, impl.history(db, pk));
    json h = json::array();
    for (const StoredProfile& p : versions)
      h.push_back(version_json(p));
    entry["history"] = std::move(h);
  }
  return entry;
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
  return json{{"format", ProfileStore::kBundleFormat},
              {"format_version", ProfileStore::kBundleVersion},
              {"exported_at", detail::rfc3339_ms(detail::now_ms())},
              {"history", to_string(history)},
              {"profiles", std::move(profiles)}};
}

// One bundled profile, validated.
struct Incoming {
  std::string pk;
  bool pinned = false;
  std::optional<ProfileDoc> doc; // nullopt: the bundle has no current version
  std::string digest;
  std::int64_t version = 0; // in the source store
  std::string reason, host, program;
  std::int64_t stage = 0;
};

Error bundle_error(Errc code, const std::string& where, const std::string& what) {
  return make_error(code, "profile bundle: " + where + ": " + what);
}

Expected<std::string> string_field(const json& obj, const char* key, const std::string& where,
                                   bool required) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) {
    if (required)
      return bundle_error(Errc::invalid_argument, where, std::string("missing '") + key + "'");
    return std::string();
  }
  if (!it->is_string())
    return bundle_error(Errc::invalid_argument, where,
                        std::string("'") + key + "' must be a string");
  return it->get<std::string>();
}

Expected<std::int64_t> int_field(const json& obj, const char* key, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::int64_t{0};
  if (!it->is_number_integer())
    return bundle_error(Errc::invalid_argument, where,
                        std::string("'") + key + "' must be an integer");
  return it->get<std::int64_t>();
}

Expected<std::vector<Incoming>> parse_bundle(const json& bundle) {
  if (!bundle.is_object())
    return bundle_error(Errc::invalid_argument, "$", "must be a JSON object");
  auto format = bundle.find("format");
  if (format == bundle.end() || !format->is_string() ||
      format->get<std::string>() != ProfileStore::kBundleFormat)
    return bundle_error(Errc::invalid_argument, "format",
                        "must be \"" + std::string(ProfileStore::kBundleFormat) + "\"");
  auto version = bundle.find("format_version");
  if (version == bundle.end() || !version->is_number_integer())
    return bundle_error(Errc::invalid_argument, "format_version", "must be an integer");
  if (version->get<std::int64_t>() < 1 ||
      version->get<std::int64_t>() > ProfileStore::kBundleVersion)
    return bundle_error(Errc::unsupported, "format_version",
                        std::to_string(version->get<std::int64_t>()) +
                            " is not supported by this build (knows 1.." +
                            std::to_string(ProfileStore::kBundleVersion) + ")");
  auto profiles = bundle.find("profiles");
  if (profiles == bundle.end() || !profiles->is_array())
    return bundle_error(Errc::invalid_argument, "profiles", "must be an array");

  std::vector<Incoming> out;
  std::set<std::string> seen;
  for (size_t i = 0; i < profiles->size(); ++i) {
    const json& e = (*profiles)[i];
    std::string where = "profiles[" + std::to_string(i) + "]";
    if (!e.is_object()) return bundle_error(Errc::invalid_argument, where, "must be an object");
    Incoming in;
    FDO_TRY(in.pk, string_field(e, "pk", where, true));
    if (auto s = detail::check_key("pk", in.pk); !s)
      return bundle_error(Errc::invalid_argument, where, s.error().message());
    where += " (" + in.pk + ")";
    if (!seen.insert(in.pk).second)
      return bundle_error(Errc::invalid_argument, where, "profile key appears twice");
    if (auto p = e.find("pinned"); p != e.end() && !p->is_null()) {
      if (!p->is_boolean())
        return bundle_error(Errc::invalid_argument, where, "'pinned' must be a boolean");
      in.pinned = p->get<bool>();
    }
    auto cur = e.find("current");
    if (cur != e.end() && !cur->is_null()) {
      if (!cur->is_object())
        return bundle_error(Errc::invalid_argument, where, "'current' must be an object or null");
      std::string cw = where + ".current";
      auto profile = cur->find("profile");
      if (profile == cur->end())
        return bundle_error(Errc::invalid_argument, cw, "missing 'profile'");
      auto doc = profile_from_json(*profile);
      if (!doc) return bundle_error(doc.error().code(), cw, doc.error().message());
      FDO_TRY(in.digest, string_field(*cur, "digest", cw, true));
      // A digest that does not match the body means the bundle was edited or
      // damaged, or comes from a build whose digest differs: importing it
      // would store a profile whose cache keys lie. The digest it should have
      // is not printed: an error is no place to hand out the value that makes
      // an edited bundle pass.
      if (profile_digest(*doc) != in.digest)
        return bundle_error(Errc::corrupt, cw,
                            "digest " + in.digest + " does not match the profile");
      in.doc = std::move(*doc);
      FDO_TRY(in.version, int_field(*cur, "version", cw));
      FDO_TRY(in.reason, string_field(*cur, "reason", cw, false));
      FDO_TRY(in.host, string_field(*cur, "host", cw, false));
      FDO_TRY(in.program, string_field(*cur, "program", cw, false));
      FDO_TRY(in.stage, int_field(*cur, "stage", cw));
    }
    out.push_back(std::move(in));
  }
  return out;
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
  FDO_TRY(std::vector<Incoming> incoming, parse_bundle(bundle));
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
    for (const Incoming& in : incoming) {
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
  for (const Incoming& in : incoming) {
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
    bool write = false;
    if (!in.doc) {
      r.action = ImportAction::skipped; // nothing current to import
    } else if (local == 0) {
      r.action = ImportAction::created;
      write = true;
    } else if (local_digest == in.digest) {
      r.action = ImportAction::unchanged;
    } else if (policy == ImportConflict::overwrite) {
      r.action = ImportAction::updated;
      write = true;
    } else if (policy == ImportConflict::skip) {
      r.action = ImportAction::skipped;
    } else {
      return make_error(Errc::conflict, "import: profile " + in.pk + " exists here at version " +
                                            std::to_string(local) + " with digest " + local_digest +
                                            ", the bundle has " + in.digest + "; nothing imported");
    }
    if (write) {
      WriteRequest req;
      req.pk = in.pk;
      req.expected_version = local;
      req.doc = *in.doc;
      req.info.source = WriteSource::import;
      req.info.reason = "import of version " + std::to_string(in.version) +
                        (in.reason.empty() ? std::string() : " (" + in.reason + ")");
      req.info.owner = owner;
      req.info.host = in.host;
      req.info.stage = in.stage;
      req.info.program = in.program;
      req.info.acting_owner = acting_owner;
      auto v = impl_->write_profile(req, now);
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
