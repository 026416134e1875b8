// program.list, program.delete, profile.delete: what a tenant has stored and
// how to remove it. A tenant sees and deletes only its own programs and
// profiles; another tenant's id or key is "not found", exactly like one that
// does not exist. Both deletes leave an audit record (audit.h).
#include "fdo/profile_store/json_view.h"
#include "fdo/util/hash.h"
#include "fdo/util/time.h"
#include "methods.h"

namespace fdo::daemon::methods {

namespace ps = fdo::profile_store;

namespace {

Expected<json> program_list(ServiceState& s, const json&, const CallContext& ctx) {
  FDO_TRY(std::vector<ps::ProgramInfo> all,
          s.profiles->store().programs(static_cast<std::int64_t>(ctx.uid)));
  json out = json::array();
  for (const auto& p : all)
    out.push_back(ps::program_to_json(p));
  return json{{"programs", std::move(out)}};
}

Expected<json> program_delete(ServiceState& s, const json& p, const CallContext& ctx) {
  FDO_TRY(std::string ik, require_param<std::string>(p, "program"));
  if (!is_hex_key(ik))
    return make_error(Errc::invalid_argument, "program must be 64 lower-case hex digits");
  FDO_TRY(std::optional<ps::ProgramInfo> row, s.profiles->store().program(ik));
  // Only the program's owner deletes it (also while profiles are shared).
  if (!row || row->owner != static_cast<std::int64_t>(ctx.uid))
    return make_error(Errc::not_found, "no program " + ik);
  FDO_TRY(bool removed, s.profiles->remove_program(ik));
  return json{{"program", ik}, {"removed", removed}};
}

Expected<json> profile_delete(ServiceState& s, const json& p, const CallContext& ctx) {
  FDO_TRY(std::string pk, require_param<std::string>(p, "profile_key"));
  if (!is_hex_key(pk))
    return make_error(Errc::invalid_argument, "profile_key must be 64 lower-case hex digits");
  std::optional<std::int64_t> acting;
  if (s.sharing() != ProfileSharing::shared) acting = static_cast<std::int64_t>(ctx.uid);
  FDO_TRY(ps::RemoveSummary r, s.profiles->remove_profile(pk, acting));
  return json{{"profile_key", pk},
              {"removed",
               {{"versions", r.versions},
                {"profile_keys", r.profile_keys},
                {"virtual_keys", r.virtual_keys},
                {"feedback_rows", r.feedback_rows}}}};
}

} // namespace

void add_lifecycle_methods(Dispatcher& d, ServiceState& s) {
  bind(d, "program.list", s, store_direct("program.list", program_list));
  bind(d, "program.delete", s,
       store_direct("program.delete", audited("program.delete", program_delete)));
  bind(d, "profile.delete", s,
       store_direct("profile.delete", audited("profile.delete", profile_delete)));
}

} // namespace fdo::daemon::methods
