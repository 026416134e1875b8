// fdoctl backup FILE / fdoctl restore FILE: a copy of the profile store under
// --state-dir made with SQLite's online backup API (every profile with its
// full history and owner, the feedback, the key mappings, the program
// registry), and putting one back (docs/fdoctl.md, "backup", "restore").
#include "context.h"
#include "fdo/ctl/client.h"
#include "fdo/profile_store/backup.h"

namespace fdo::ctl {

namespace {

Expected<std::string> store_path(const Context& ctx, const char* command) {
  if (ctx.globals().state_dir.empty())
    return make_error(Errc::invalid_argument,
                      std::string(command) +
                          " needs --state-dir DIR (fdod's state directory, /var/lib/fdod under "
                          "systemd) and must run as fdod's user or root");
  return ctx.globals().state_dir + "/profiles.db";
}

void report(Context& ctx, const std::string& what, const std::string& file,
            const profile_store::BackupSummary& s) {
  if (ctx.json_output()) {
    ctx.emit({{"file", file}, {"pages", s.pages}, {"bytes", s.bytes}});
    return;
  }
  ctx.io().out << what << " " << file << " (" << s.bytes << " bytes, " << s.pages << " pages)\n";
}

} // namespace

Status cmd_backup(Context& ctx, const std::string& file) {
  FDO_TRY(std::string db, store_path(ctx, "backup"));
  FDO_TRY(profile_store::BackupSummary s, profile_store::backup_database(db, file));
  report(ctx, "backed up " + db + " to", file, s);
  return ok();
}

Status cmd_restore(Context& ctx, const std::string& file) {
  FDO_TRY(std::string db, store_path(ctx, "restore"));
  // Never under a running daemon: it holds the database open and caches what
  // it read from it.
  ClientOptions quick;
  quick.timeout = std::chrono::seconds(5);
  if (auto running = RpcClient::connect(ctx.globals().socket, quick); running)
    return make_error(Errc::invalid_argument,
                      "fdod answers on " + ctx.globals().socket +
                          "; stop it first (systemctl stop fdod.socket fdod.service), restore, "
                          "then start it again");
  FDO_TRY(profile_store::BackupSummary s, profile_store::restore_database(file, db));
  report(ctx, "restored " + db + " from", file, s);
  return ok();
}

} // namespace fdo::ctl
