#include "fdo/profile_store/backup.h"

#include "fdo/profile_store/profile_store.h"
#include "internal.h"
#include "schema.h"

#include <cerrno>
#include <cstdio>
#include <fcntl.h>
#include <memory>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

namespace fdo::profile_store {
namespace {

struct DbCloser {
  void operator()(sqlite3* db) const { sqlite3_close_v2(db); }
};
using Db = std::unique_ptr<sqlite3, DbCloser>;

Error sqlite_error(const std::string& what, sqlite3* db, int rc) {
  return make_error(Errc::io,
                    what + ": " + (db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc)));
}

Expected<Db> open_db(const std::string& path, int flags) {
  sqlite3* raw = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &raw, flags, nullptr);
  Db db(raw);
  if (rc != SQLITE_OK) return sqlite_error("open " + path, db.get(), rc);
  sqlite3_busy_timeout(db.get(), 5000);
  return db;
}

// Every page of `from` into `to`, retrying while the source is busy.
Expected<BackupSummary> copy(sqlite3* from, sqlite3* to, const std::string& what) {
  sqlite3_backup* b = sqlite3_backup_init(to, "main", from, "main");
  if (b == nullptr) return sqlite_error(what, to, SQLITE_ERROR);
  int rc;
  while ((rc = sqlite3_backup_step(b, 256)) == SQLITE_OK || rc == SQLITE_BUSY ||
         rc == SQLITE_LOCKED)
    if (rc != SQLITE_OK) sqlite3_sleep(20);
  BackupSummary s;
  s.pages = sqlite3_backup_pagecount(b);
  int fin = sqlite3_backup_finish(b);
  if (rc != SQLITE_DONE) return sqlite_error(what, to, rc);
  if (fin != SQLITE_OK) return sqlite_error(what, to, fin);
  return s;
}

Status check_copy(sqlite3* db, const std::string& path) {
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(db, "PRAGMA quick_check", -1, &st, nullptr) != SQLITE_OK)
    return sqlite_error(path + " is not a database", db, SQLITE_ERROR);
  std::string verdict;
  if (sqlite3_step(st) == SQLITE_ROW)
    verdict = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
  sqlite3_finalize(st);
  if (verdict != "ok")
    return make_error(Errc::corrupt, path + " fails PRAGMA quick_check: " +
                                         (verdict.empty() ? sqlite3_errmsg(db) : verdict));
  // fdo's store has a profiles table; anything else is not one of our backups.
  if (sqlite3_prepare_v2(db, "SELECT 1 FROM sqlite_master WHERE type='table' AND name='profiles'",
                         -1, &st, nullptr) != SQLITE_OK)
    return sqlite_error(path, db, SQLITE_ERROR);
  bool ours = sqlite3_step(st) == SQLITE_ROW;
  sqlite3_finalize(st);
  if (!ours) return make_error(Errc::invalid_argument, path + " is not an fdo profile store");
  return ok();
}

} // namespace

Expected<BackupSummary> backup_database(const std::string& db_path, const std::string& to_path) {
  struct stat st {};
  if (::stat(db_path.c_str(), &st) != 0)
    return Error::from_errno("no profile store at " + db_path, errno);
  if (::stat(to_path.c_str(), &st) == 0)
    return make_error(Errc::already_exists, to_path + " exists; not overwriting it");
  FDO_TRY(Db from, open_db(db_path, SQLITE_OPEN_READONLY));
  const std::string tmp = to_path + ".tmp";
  ::unlink(tmp.c_str());
  {
    // Created private before SQLite writes a byte: it holds every tenant's data.
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) return Error::from_errno("create " + tmp, errno);
    ::close(fd);
  }
  auto done = [&]() -> Expected<BackupSummary> {
    FDO_TRY(Db to, open_db(tmp, SQLITE_OPEN_READWRITE));
    FDO_TRY(BackupSummary s, copy(from.get(), to.get(), "back up " + db_path + " to " + tmp));
    // A self-contained file: no -wal beside it.
    sqlite3_exec(to.get(), "PRAGMA journal_mode=DELETE", nullptr, nullptr, nullptr);
    FDO_TRY_STATUS(check_copy(to.get(), tmp));
    return s;
  }();
  if (!done) {
    ::unlink(tmp.c_str());
    return done;
  }
  int fd = ::open(tmp.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
  if (::rename(tmp.c_str(), to_path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return Error::from_errno("rename " + tmp + " to " + to_path, err);
  }
  if (::stat(to_path.c_str(), &st) == 0) done->bytes = st.st_size;
  return done;
}

Expected<BackupSummary> restore_database(const std::string& from_path, const std::string& db_path) {
  FDO_TRY(Db from, open_db(from_path, SQLITE_OPEN_READONLY));
  FDO_TRY_STATUS(check_copy(from.get(), from_path));
  FDO_TRY(Db to, open_db(db_path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE));
  ::chmod(db_path.c_str(), 0600);
  FDO_TRY(BackupSummary s, copy(from.get(), to.get(), "restore " + from_path + " onto " + db_path));
  // The store runs in WAL mode; the copy carried the backup's journal mode.
  sqlite3_exec(to.get(), "PRAGMA journal_mode=WAL", nullptr, nullptr, nullptr);
  struct stat st {};
  if (::stat(db_path.c_str(), &st) == 0) s.bytes = st.st_size;
  return s;
}

Expected<BackupSummary> SqliteBackend::restore_from(const std::string& from_path) {
  FDO_TRY(Db from, open_db(from_path, SQLITE_OPEN_READONLY));
  FDO_TRY_STATUS(check_copy(from.get(), from_path));
  // The running code's statements expect this build's schema; an older copy
  // is upgraded by opening it, which a stopped daemon's restore does.
  sqlite3_stmt* st = nullptr;
  std::int64_t version = -1;
  if (sqlite3_prepare_v2(from.get(), "PRAGMA user_version", -1, &st, nullptr) == SQLITE_OK &&
      sqlite3_step(st) == SQLITE_ROW)
    version = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  if (version != schema::latest_version())
    return make_error(Errc::invalid_argument,
                      from_path + " has schema version " + std::to_string(version) +
                          ", this store " + std::to_string(schema::latest_version()) +
                          "; restore it with fdod stopped (it is upgraded when fdod starts)");
  FDO_TRY(auto lock, impl_->lock_writer());
  FDO_TRY(BackupSummary s, copy(from.get(), impl_->writer.handle(),
                                "restore " + from_path + " onto " + impl_->path));
  sqlite3_exec(impl_->writer.handle(), "PRAGMA journal_mode=WAL", nullptr, nullptr, nullptr);
  struct stat info {};
  if (::stat(impl_->path.c_str(), &info) == 0) s.bytes = info.st_size;
  return s;
}

} // namespace fdo::profile_store
