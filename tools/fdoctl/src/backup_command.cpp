// fdoctl backup FILE / fdoctl restore FILE: a copy of the profile store under
// --state-dir made with SQLite's online backup API (every profile with its
// full history and owner, the feedback, the key mappings, the program
// registry), and putting one back (docs/fdoctl.md, "backup", "restore").
#include "context.h"
#include "fdo/ctl/client.h"
#include "fdo/profile_store/backup.h"

#include <filesystem>

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
  // A running daemon restores through its own store: it holds the database
  // open and caches what it read from it (store.restore).
  ClientOptions quick;
  quick.timeout = std::chrono::seconds(5);
  // The probe's connection is closed before the request goes on its own.
  const bool running = RpcClient::connect(ctx.globals().socket, quick).has_value();
  if (running) {
    std::error_code ec;
    std::string absolute = std::filesystem::absolute(file, ec).lexically_normal().string();
    if (ec)
      return make_error(Errc::invalid_argument, "cannot resolve " + file + ": " + ec.message());
    FDO_TRY(auto backend, ctx.backend(Need::daemon));
    FDO_TRY(nlohmann::json r, call(*backend, "store.restore", {{"file", absolute}}));
    profile_store::BackupSummary s;
    s.pages = r.value("pages", std::int64_t(0));
    s.bytes = r.value("bytes", std::int64_t(0));
    report(ctx, "restored the running fdod's store from", absolute, s);
    return ok();
  }
  FDO_TRY(std::string db, store_path(ctx, "restore"));
  FDO_TRY(profile_store::BackupSummary s, profile_store::restore_database(file, db));
  report(ctx, "restored " + db + " from", file, s);
  return ok();
}

} // namespace fdo::ctl
