#include "bundle_format.h"

#include "internal.h"

#include <set>

namespace fdo::profile_store::detail {

using nlohmann::json;

namespace {

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

} // namespace

json version_json(const StoredProfile& p) {
  return {{"version", p.version},     {"digest", p.digest},   {"source", to_string(p.source)},
          {"reason", p.reason},       {"author", p.author},   {"host", p.host},
          {"stage", p.stage},         {"program", p.program}, {"created_at", p.created_at},
          {"profile", to_json(p.doc)}};
}

json bundle_envelope(json profiles, ExportHistory history) {
  return json{{"format", ProfileStore::kBundleFormat},
              {"format_version", ProfileStore::kBundleVersion},
              {"exported_at", rfc3339_ms(now_ms())},
              {"history", to_string(history)},
              {"profiles", std::move(profiles)}};
}

json bundle_entry(const std::string& pk, std::int64_t owner, bool pinned, std::int64_t last_version,
                  const std::optional<StoredProfile>& current,
                  const std::vector<StoredProfile>* history) {
  json entry = {{"pk", pk},
                {"owner", owner},
                {"pinned", pinned},
                {"last_version", last_version},
                {"current", nullptr}};
  if (current) entry["current"] = version_json(*current);
  if (history) {
    json h = json::array();
    for (const StoredProfile& p : *history)
      h.push_back(version_json(p));
    entry["history"] = std::move(h);
  }
  return entry;
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

Expected<bool> decide_import(const Incoming& in, ImportConflict policy, ImportedProfile& r) {
  const std::int64_t local = r.version;
  const std::string& local_digest = r.digest;
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
  return write;
}

WriteRequest import_request(const Incoming& in, std::int64_t owner, const ActingOwner& acting_owner,
                            std::int64_t local) {
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
  return req;
}

Status check_import_request(ImportNewKeys new_keys, const ActingOwner& acting_owner) {
  if (new_keys == ImportNewKeys::own_programs && !acting_owner)
    return make_error(Errc::invalid_argument,
                      "import: creating only the profile keys of an owner's programs needs the "
                      "acting owner");
  return ok();
}

Expected<std::vector<ImportedProfile>> import_into(ImportTarget& target,
                                                   const std::vector<Incoming>& incoming,
                                                   std::int64_t owner, ImportConflict policy,
                                                   const ActingOwner& acting_owner,
                                                   ImportNewKeys new_keys, std::int64_t now) {
  if (acting_owner) {
    // Every key first, so another tenant's profile fails the import before
    // anything (a conflict naming a local digest, say) is reported about
    // the bundle's other keys. A key the caller may not create reads the
    // same as another tenant's: neither says whether the key exists. Checked
    // in the caller's transaction, so no key appears or changes hands in
    // between.
    for (const Incoming& in : incoming) {
      FDO_TRY(auto state, target.state(in.pk));
      bool allowed = state ? state->owner == *acting_owner : true;
      if (!state && new_keys == ImportNewKeys::own_programs) {
        FDO_TRY(allowed, target.owns_program_with_pk(*acting_owner, in.pk));
      }
      if (!allowed) return no_profile(in.pk).context("import (nothing imported)");
    }
  }
  std::vector<ImportedProfile> out;
  for (const Incoming& in : incoming) {
    ImportedProfile r;
    r.pk = in.pk;
    FDO_TRY(auto state, target.state(in.pk));
    const std::int64_t local = state ? state->current : 0;
    r.version = local;
    r.digest = std::string(no_profile_digest());
    if (local != 0) {
      FDO_TRY(auto digest, target.current_digest(in.pk));
      if (digest) r.digest = std::move(*digest);
    }
    FDO_TRY(bool write, decide_import(in, policy, r));
    if (write) {
      auto v = target.write(import_request(in, owner, acting_owner, local), now);
      if (!v) return std::move(v).error().context("import (nothing imported)");
      r.version = *v;
      r.digest = in.digest;
    }
    if (in.pinned && (write || r.action == ImportAction::unchanged))
      FDO_TRY_STATUS(target.set_pinned(in.pk));
    out.push_back(std::move(r));
  }
  return out;
}

} // namespace fdo::profile_store::detail
