// profile.list, profile.get, profile.history, profile.pin, profile.unpin,
// profile.reset, profile.export, profile.import. A profile another tenant owns
// is "not found", exactly like a key that does not exist.
#include "fdo/jit/profdata.h"
#include "fdo/profile_store/json_view.h"
#include "fdo/util/base64.h"
#include "fdo/util/hash.h"
#include "fdo/util/time.h"
#include "methods.h"

#include <map>

namespace fdo::daemon::methods {

namespace ps = fdo::profile_store;

namespace {

Error no_profile(const std::string& pk) {
  return make_error(Errc::not_found, "no profile " + pk);
}

// The acting tenant for the store's ownership checks: none when profiles are shared.
std::optional<std::int64_t> acting_owner(ServiceState& s, const CallContext& ctx) {
  if (s.sharing() == ProfileSharing::shared) return std::nullopt;
  return static_cast<std::int64_t>(ctx.uid);
}

Expected<std::string> profile_key_param(const json& p, std::string_view name = "profile_key") {
  FDO_TRY(std::string pk, require_param<std::string>(p, name));
  if (!is_hex_key(pk))
    return make_error(Errc::invalid_argument,
                      std::string(name) + " must be 64 lower-case hex digits");
  return pk;
}

// The caller may read `pk`: it exists and (unless shared) the caller owns it.
Status check_owner(ServiceState& s, const std::string& pk, const CallContext& ctx) {
  FDO_TRY(std::optional<std::int64_t> owner, s.profiles->store().owner(pk));
  if (!owner) return no_profile(pk);
  if (auto uid = acting_owner(s, ctx); uid && *owner != *uid) return no_profile(pk);
  return ok();
}

Expected<json> profile_list(ServiceState& s, const json&, const CallContext& ctx) {
  FDO_TRY(std::vector<ps::ProfileSummary> list, s.profiles->store().list(acting_owner(s, ctx)));
  // The names of the caller's programs with each profile key.
  FDO_TRY(std::vector<ps::ProgramInfo> programs,
          s.profiles->store().programs(static_cast<std::int64_t>(ctx.uid)));
  std::map<std::string, std::vector<std::string>> names;
  for (const auto& prog : programs)
    if (!prog.pk.empty()) names[prog.pk].push_back(prog.name);
  json out = json::array();
  for (const auto& p : list) {
    json j = ps::summary_to_json(p);
    j["programs"] = names[p.pk];
    out.push_back(std::move(j));
  }
  return json{{"profiles", std::move(out)}};
}

Expected<json> profile_get(ServiceState& s, const json& p, const CallContext& ctx) {
  FDO_TRY(std::string pk, profile_key_param(p));
  FDO_TRY(std::int64_t version, optional_param<std::int64_t>(p, "version", 0));
  FDO_TRY_STATUS(check_owner(s, pk, ctx));
  FDO_TRY(std::optional<ps::StoredProfile> sp,
          version > 0 ? s.profiles->store().get(pk, version) : s.profiles->store().current(pk));
  if (!sp)
    return make_error(Errc::not_found,
                      version > 0 ? "profile " + pk + " has no version " + std::to_string(version)
                                  : "profile " + pk + " has no current version (reset)");
  return json{{"profile_key", pk},          {"version", sp->version},
              {"digest", sp->digest},       {"pinned", sp->pinned},
              {"reason", sp->reason},       {"created_at", rfc3339_ms(sp->created_at)},
              {"profile", to_json(sp->doc)}};
}

// The profile's pin state and current version, as pin/unpin/reset reply.
Expected<json> pin_state(ServiceState& s, const std::string& pk) {
  FDO_TRY(std::optional<ps::ProfileSummary> sum, s.profiles->store().summary(pk));
  if (!sum) return no_profile(pk);
  return json{{"profile_key", pk}, {"pinned", sum->pinned}, {"version", sum->version}};
}

Expected<json> profile_history(ServiceState& s, const json& p, const CallContext& ctx) {
  FDO_TRY(std::string pk, profile_key_param(p));
  FDO_TRY_STATUS(check_owner(s, pk, ctx));
  FDO_TRY(std::vector<ps::StoredProfile> hist, s.profiles->store().history(pk));
  FDO_TRY(std::optional<ps::ProfileSummary> sum, s.profiles->store().summary(pk));
  if (!sum) return no_profile(pk);
  json versions = json::array();
  for (const auto& v : hist)
    versions.push_back(ps::version_to_json(v));
  return json{{"profile_key", pk},
              {"pinned", sum->pinned},
              {"current_version", sum->version},
              {"versions", std::move(versions)}};
}

Expected<json> profile_pin(ServiceState& s, const json& p, const CallContext& ctx) {
  FDO_TRY(std::string pk, profile_key_param(p));
  FDO_TRY_STATUS(s.profiles->pin(pk, acting_owner(s, ctx)));
  return pin_state(s, pk);
}

Expected<json> profile_unpin(ServiceState& s, const json& p, const CallContext& ctx) {
  FDO_TRY(std::string pk, profile_key_param(p));
  FDO_TRY_STATUS(s.profiles->unpin(pk, acting_owner(s, ctx)));
  return pin_state(s, pk);
}

Expected<json> profile_reset(ServiceState& s, const json& p, const CallContext& ctx) {
  FDO_TRY(std::string pk, profile_key_param(p));
  FDO_TRY_STATUS(s.profiles->reset(pk, acting_owner(s, ctx)));
  return pin_state(s, pk);
}

Expected<json> profile_export(ServiceState& s, const json& p, const CallContext& ctx) {
  FDO_TRY(std::string format, optional_param<std::string>(p, "format", "json"));
  if (format != "json" && format != "profdata")
    return make_error(Errc::invalid_argument, "format must be \"json\" or \"profdata\"");
  std::vector<std::string> pks;
  if (p.contains("profile_keys")) {
    if (!p["profile_keys"].is_array())
      return make_error(Errc::invalid_argument, "profile_keys must be an array of keys");
    for (const json& k : p["profile_keys"]) {
      if (!k.is_string() || !is_hex_key(k.get<std::string>()))
        return make_error(Errc::invalid_argument,
                          "profile_keys must hold keys of 64 lower-case hex digits");
      FDO_TRY_STATUS(check_owner(s, k.get<std::string>(), ctx));
      pks.push_back(k.get<std::string>());
    }
  } else {
    FDO_TRY(std::vector<ps::ProfileSummary> list, s.profiles->store().list(acting_owner(s, ctx)));
    for (const auto& sum : list)
      pks.push_back(sum.pk);
  }
  if (format == "json") {
    FDO_TRY(json bundle, s.profiles->store().export_bundle(pks));
    return json{{"format", "json"}, {"bundle", std::move(bundle)}};
  }
  if (pks.size() != 1)
    return make_error(Errc::invalid_argument,
                      "profdata export takes exactly one profile key in profile_keys");
  FDO_TRY(std::optional<ps::StoredProfile> cur, s.profiles->store().current(pks[0]));
  if (!cur) return make_error(Errc::not_found, "profile " + pks[0] + " has no current version");
  FDO_TRY(std::string bytes, jit::indexed_profile(cur->doc));
  return json{
      {"format", "profdata"}, {"profile_key", pks[0]}, {"profdata_base64", base64_encode(bytes)}};
}

Expected<json> profile_import(ServiceState& s, const json& p, const CallContext& ctx) {
  FDO_TRY(json bundle, require_param<json>(p, "bundle"));
  if (!bundle.is_object() || !bundle.contains("profiles") || !bundle["profiles"].is_array())
    return make_error(Errc::invalid_argument, "bundle must be an object made by profile.export");
  // The store checks every key inside the import's transaction: an existing
  // key must be the caller's, and, per tenant, a new key must be the profile
  // key of a program the caller registered. Profile keys are predictable, so
  // otherwise a tenant could create another tenant's future key first.
  std::optional<std::int64_t> acting = acting_owner(s, ctx);
  FDO_TRY(
      std::vector<ps::ImportedProfile> imported,
      s.profiles->import_bundle(bundle, ctx.uid, acting,
                                acting ? ps::ImportNewKeys::own_programs : ps::ImportNewKeys::any));
  json out = json::array();
  for (const auto& i : imported)
    out.push_back({{"profile_key", i.pk}, {"version", i.version}});
  return json{{"imported", std::move(out)}};
}

} // namespace

void add_profile_methods(Dispatcher& d, ServiceState& s) {
  bind(d, "profile.list", s, store_direct("profile.list", profile_list));
  bind(d, "profile.get", s, store_direct("profile.get", profile_get));
  bind(d, "profile.history", s, store_direct("profile.history", profile_history));
  bind(d, "profile.pin", s, store_direct("profile.pin", audited("profile.pin", profile_pin)));
  bind(d, "profile.unpin", s,
       store_direct("profile.unpin", audited("profile.unpin", profile_unpin)));
  bind(d, "profile.reset", s,
       store_direct("profile.reset", audited("profile.reset", profile_reset)));
  bind(d, "profile.export", s, store_direct("profile.export", profile_export));
  bind(d, "profile.import", s,
       store_direct("profile.import", audited("profile.import", profile_import)));
}

} // namespace fdo::daemon::methods
