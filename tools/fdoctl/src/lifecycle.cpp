// fdoctl programs, program delete, profile delete: what the caller has
// stored in fdod, and removing it (program.list, program.delete,
// profile.delete; a tenant sees and deletes only its own).
#include "context.h"
#include "fdo/ctl/table.h"

namespace fdo::ctl {

using nlohmann::json;

namespace {

std::string text(const json& j, const char* key) {
  return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : std::string();
}

// A full program id from an id or a unique prefix of one of the caller's.
Expected<std::string> resolve_own_program(Backend& backend, const std::string& given,
                                          const json& list) {
  std::vector<std::string> matches;
  for (const json& p : list["programs"])
    if (text(p, "program").starts_with(given)) matches.push_back(text(p, "program"));
  if (matches.empty())
    return make_error(Errc::not_found, "no program of yours starts with '" + given +
                                           "' (fdoctl programs lists them)");
  if (matches.size() > 1)
    return make_error(Errc::invalid_argument,
                      "'" + given + "' is ambiguous: " + std::to_string(matches.size()) +
                          " programs match; give more digits");
  (void)backend;
  return matches.front();
}

} // namespace

Status cmd_programs(Context& ctx) {
  FDO_TRY(auto backend, ctx.backend(Need::daemon));
  FDO_TRY(json list, call(*backend, "program.list"));
  if (ctx.json_output()) {
    ctx.emit(list);
    return ok();
  }
  const json& programs = list["programs"];
  if (programs.empty()) {
    ctx.io().out << "no programs registered (fdoctl run FILE --entry NAME registers one)\n";
    return ok();
  }
  Table t({{"program"}, {"name"}, {"size", Align::right}, {"profile key"}, {"last used"}});
  for (const json& p : programs)
    t.add_row({short_key(text(p, "program")), text(p, "name"),
               std::to_string(p.value("size", std::int64_t(0))), short_key(text(p, "profile_key")),
               text(p, "last_used")});
  ctx.io().out << t.render() << programs.size() << " program(s)\n";
  return ok();
}

Status cmd_program_delete(Context& ctx, const std::string& given) {
  FDO_TRY(auto backend, ctx.backend(Need::daemon));
  FDO_TRY(json list, call(*backend, "program.list"));
  FDO_TRY(std::string ik, resolve_own_program(*backend, given, list));
  FDO_TRY(json r, call(*backend, "program.delete", {{"program", ik}}));
  if (ctx.json_output()) {
    ctx.emit(r);
    return ok();
  }
  ctx.io().out << "deleted program " << ik
               << " (its profile stays; `fdoctl profile delete KEY` removes that)\n";
  return ok();
}

Status cmd_profile_delete(Context& ctx, const std::string& given) {
  FDO_TRY(auto backend, ctx.backend(Need::daemon));
  FDO_TRY(std::string pk, resolve_profile_key(*backend, given));
  FDO_TRY(json r, call(*backend, "profile.delete", {{"profile_key", pk}}));
  if (ctx.json_output()) {
    ctx.emit(r);
    return ok();
  }
  const json& rm = r["removed"];
  ctx.io().out << "deleted profile " << pk << ": " << rm.value("versions", 0) << " version(s), "
               << rm.value("profile_keys", 0) << " program mapping(s), "
               << rm.value("feedback_rows", 0) << " feedback row(s)\n";
  return ok();
}

} // namespace fdo::ctl
