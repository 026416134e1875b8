// `fdoctl profile import FILE.profdata --program PROGRAM`: seeds a program's
// profile from the indexed profile of an offline clang PGO build of the same
// source, so its first stage compiles optimized. LLVM reads the profile and
// compiles the program here, in fdoctl, on the user's own files (never in
// the daemon, which does not parse untrusted input); fdod receives an
// ordinary profile bundle (profile.import).
#include "context.h"
#include "fdo/jit/profdata.h"
#include "fdo/profile_store/profile_store.h"
#include "fdo/util/base64.h"
#include "fdo/util/fd.h"

#include <filesystem>

namespace fdo::ctl {

using nlohmann::json;

Status cmd_profile_import_profdata(Context& ctx, const std::string& profdata_file,
                                   const std::string& program_file) {
  auto profdata = read_file(profdata_file);
  if (!profdata)
    return make_error(Errc::invalid_argument,
                      "cannot read " + profdata_file + ": " + profdata.error().message());
  auto program = read_file(program_file);
  if (!program)
    return make_error(Errc::invalid_argument,
                      "cannot read " + program_file + ": " + program.error().message());
  auto seeded = jit::seed_profile(*profdata, *program);
  if (!seeded) return std::move(seeded).error().context(profdata_file);
  if (seeded->matched == 0)
    return make_error(Errc::invalid_argument,
                      "no function of " + program_file + " matches a record of " + profdata_file +
                          " (" + std::to_string(seeded->dropped.size()) +
                          " functions without a record of their name and CFG hash; " +
                          std::to_string(seeded->records) + " records in the file)");

  ProfileDoc& doc = seeded->profile;
  const std::string reason = "import: " + std::filesystem::path(profdata_file).filename().string() +
                             ", " + std::to_string(seeded->matched) + " functions seeded, " +
                             std::to_string(seeded->dropped.size()) + " dropped";
  FDO_TRY(auto backend, ctx.backend(Need::daemon));
  // Registering the program gives its profile key as fdod scopes it (per
  // tenant); a tenant may only create the profile keys of its own programs.
  FDO_TRY(json reg, call(*backend, "program.register",
                         {{"ir_base64", base64_encode(*program)},
                          {"name", std::filesystem::path(program_file).filename().string()}}));
  const std::string pk = reg.value("profile_key", "");
  if (pk.empty()) return make_error(Errc::corrupt, "program.register returned no profile_key");
  json bundle = {{"format", std::string(profile_store::ProfileStore::kBundleFormat)},
                 {"format_version", profile_store::ProfileStore::kBundleVersion},
                 {"history", "current"},
                 {"profiles", json::array({{{"pk", pk},
                                            {"current",
                                             {{"version", 1},
                                              {"digest", profile_digest(doc)},
                                              {"reason", reason},
                                              {"profile", to_json(doc)}}}}})}};
  FDO_TRY(json r, call(*backend, "profile.import", {{"bundle", bundle}}));
  std::int64_t version = 0;
  for (const json& i : r.value("imported", json::array()))
    if (i.value("profile_key", "") == pk) version = i.value("version", 0);
  if (ctx.json_output()) {
    ctx.emit({{"profile_key", pk},
              {"version", version},
              {"records", seeded->records},
              {"matched", seeded->matched},
              {"dropped", seeded->dropped}});
    return ok();
  }
  std::ostream& out = ctx.io().out;
  out << "profile " << pk << " v" << version << ": " << seeded->matched
      << " function(s) seeded from " << profdata_file << " (" << seeded->records << " records), "
      << seeded->dropped.size() << " dropped";
  for (std::size_t i = 0; i < seeded->dropped.size() && i < 8; ++i)
    out << (i == 0 ? ": " : ", ") << seeded->dropped[i];
  if (seeded->dropped.size() > 8) out << ", ...";
  out << "\nthe next stage of " << program_file << " compiles optimized with it\n";
  return ok();
}

} // namespace fdo::ctl
