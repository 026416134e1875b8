// Opening a store: validation of the file before anything is written, file
// modes, journal and durability settings, migrations; and the store-wide
// calls (options, retention, schema version, integrity check).
#include "fdo/util/fd.h"
#include "fdo/util/log.h"
#include "internal.h"
#include "schema.h"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fcntl.h>
#include <limits>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

namespace fdo::profile_store {

using sqlite::Statement;

namespace {

// Rejects files that are certainly not SQLite databases before SQLite touches
// them: SQLite would refuse them too, but only after opening (and, in
// read-write mode, possibly creating -wal/-shm files beside them).
Status check_file(const std::string& path, OpenMode mode) {
  struct stat sb {};
  if (::stat(path.c_str(), &sb) != 0) {
    if (errno == ENOENT && mode == OpenMode::read_write) return ok(); // created by open
    if (errno == ENOENT)
      return make_error(Errc::not_found, "profile store '" + path + "' does not exist");
    return Error::from_errno("stat profile store '" + path + "'", errno);
  }
  if (!S_ISREG(sb.st_mode))
    return make_error(Errc::invalid_argument, "profile store '" + path + "' is not a regular file");
  if (sb.st_size == 0) return ok(); // SQLite treats an empty file as an empty database
  FDO_TRY(Fd fd, Fd::open(path, O_RDONLY));
  char header[16] = {};
  ssize_t n = ::pread(fd.get(), header, sizeof header, 0);
  if (n < 0) return Error::from_errno("read profile store '" + path + "'", errno);
  static constexpr char kMagic[16] = "SQLite format 3"; // includes the trailing NUL
  if (n < 16 || std::memcmp(header, kMagic, sizeof kMagic) != 0)
    return make_error(Errc::corrupt, "profile store '" + path +
                                         "' is not an SQLite database (bad file header); "
                                         "refusing to open or modify it");
  return ok();
}

Status check_schema(const std::string& path, const schema::Info& info, OpenMode mode) {
  const int latest = schema::latest_version();
  if (info.user_version < 0 || info.user_version > latest)
    return make_error(Errc::unsupported,
                      "profile store '" + path + "' has schema version " +
                          std::to_string(info.user_version) + ", newer than this build knows (" +
                          std::to_string(latest) + "); refusing to open it (upgrade fdo)");
  bool foreign = info.user_version == 0 ? (info.objects > 0 || info.application_id != 0)
                                        : info.application_id != schema::kApplicationId;
  if (foreign)
    return make_error(
        Errc::invalid_argument,
        "'" + path + "' is an SQLite database of another application (application_id " +
            std::to_string(info.application_id) + ", " + std::to_string(info.objects) +
            " schema objects), not an fdo profile store; refusing to modify it");
  if (mode == OpenMode::read_only && info.user_version == 0)
    return make_error(Errc::not_found, "'" + path + "' is an empty database, not a profile store");
  if (mode == OpenMode::read_only && info.user_version < latest)
    return make_error(Errc::unsupported,
                      "profile store '" + path + "' has schema version " +
                          std::to_string(info.user_version) + " and needs an upgrade to " +
                          std::to_string(latest) +
                          " before read-only use; open it read-write once (start fdod)");
  return ok();
}

// PRAGMA quick_check walks every b-tree page (structure, free list, record
// formats, NOT NULL) in time linear in the file; integrity_check also
// matches every index against its table, which costs much more at startup.
// A damaged page found now is a clear refusal instead of a corrupt error in
// the middle of some later request.
Status quick_check(sqlite::Connection& db, const std::string& path) {
  auto damaged = [&](const std::string& what) {
    return make_error(Errc::corrupt, "profile store '" + path +
                                         "' is damaged (PRAGMA quick_check: " + what +
                                         "); refusing to open or modify it (restore it "
                                         "from a backup or move it aside)");
  };
  FDO_TRY(Statement st, db.prepare("PRAGMA quick_check(5)"));
  std::string problems;
  while (true) {
    Expected<bool> row = st.step();
    if (!row) {
      if (row.error().code() == Errc::corrupt) return damaged(row.error().message());
      return std::move(row).error().context("quick_check of profile store '" + path + "'");
    }
    if (!*row) break;
    std::string line = st.column_text(0);
    if (line == "ok") continue;
    if (!problems.empty()) problems += "; ";
    problems += line;
  }
  if (!problems.empty()) return damaged(problems);
  return ok();
}

enum class QuickCheck { done, pending };

struct FileStamp {
  bool exists = false;
  off_t size = 0;
  struct timespec mtime {};
  bool wal = false;
  bool operator==(const FileStamp& o) const {
    return exists == o.exists && size == o.size && mtime.tv_sec == o.mtime.tv_sec &&
           mtime.tv_nsec == o.mtime.tv_nsec && wal == o.wal;
  }
};

FileStamp stamp(const std::string& path) {
  FileStamp s;
  struct stat sb {};
  if (::stat(path.c_str(), &sb) != 0) return s;
  s.exists = true;
  s.size = sb.st_size;
  s.mtime = sb.st_mtim;
  struct stat wal {};
  s.wal = ::stat((path + "-wal").c_str(), &wal) == 0;
  return s;
}

// Opening a WAL database normally creates -wal and -shm files beside it,
// even when the open then fails. When nobody has the file open (no -wal file
// exists), the file is therefore first checked (schema, quick_check) through
// an immutable connection, which creates and locks nothing, so a refused file
// is left exactly as it was, directory included. When a -wal file exists the
// side files are already there and the normal connection checks the same
// things (QuickCheck::pending).
Expected<QuickCheck> inspect_quietly(const std::string& path, OpenMode mode) {
  FileStamp before = stamp(path);
  if (!before.exists || before.size == 0 || before.wal) return QuickCheck::pending;
  FDO_TRY(auto db, sqlite::Connection::open(path, sqlite::Access::inspect));
  FDO_TRY(schema::Info info, schema::read_info(db));
  FDO_TRY_STATUS(check_schema(path, info, mode));
  if (Status s = quick_check(db, path); !s) {
    // An immutable connection takes no locks: a process that opened the file
    // meanwhile and checkpointed into it can make healthy pages look torn.
    // Then look again through a locking connection.
    if (!(stamp(path) == before)) return QuickCheck::pending;
    return std::move(s).error();
  }
  return QuickCheck::done;
}

// SQLite creates a missing database file with 0644 less the umask, and its
// -wal and -shm files with the database file's mode. Profiles, program names
// and feedback are tenants' data, readable by fdod (and root) only: create
// the file here, 0600 exactly, before SQLite opens it.
Status create_private_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    // Already there (maybe created by another process a moment ago): its
    // mode is whatever its creator or the operator chose.
    if (errno == EEXIST) return ok();
    return Error::from_errno("create profile store '" + path + "'", errno);
  }
  Fd owned(fd);
  // A umask can only have narrowed 0600, e.g. to 0400, which SQLite could not write.
  if (::fchmod(owned.get(), 0600) != 0)
    return Error::from_errno("chmod 0600 profile store '" + path + "'", errno);
  return ok();
}

// Switching a new database to WAL needs an exclusive lock, and SQLite does not
// call the busy handler for it: a second process opening the same new file at
// that moment gets SQLITE_BUSY at once. Retry (with backoff) for as long as the
// busy timeout allows.
Expected<std::string> enable_wal(sqlite::Connection& db, std::chrono::milliseconds busy_timeout) {
  const auto deadline = std::chrono::steady_clock::now() + busy_timeout;
  std::chrono::milliseconds pause{1};
  for (;;) {
    Expected<std::string> mode = db.query_text("PRAGMA journal_mode = WAL");
    if (mode || mode.error().code() != Errc::timeout ||
        std::chrono::steady_clock::now() + pause > deadline)
      return mode;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

Status check_options(const Options& options) {
  if (options.retention < 1)
    return make_error(Errc::invalid_argument, "retention must keep at least 1 version (got " +
                                                  std::to_string(options.retention) + ")");
  if (options.busy_timeout.count() < 0 ||
      options.busy_timeout.count() > std::numeric_limits<int>::max())
    return make_error(Errc::invalid_argument, "busy_timeout out of range");
  if (options.read_connections < 1)
    return make_error(Errc::invalid_argument, "read_connections must be at least 1 (got " +
                                                  std::to_string(options.read_connections) + ")");
  return ok();
}

// Settings and migrations of the write connection.
Status prepare_writer(sqlite::Connection& db, const std::string& path, const Options& options,
                      const schema::Info& info) {
  // WAL: readers (other threads' read connections, fdoctl) never block the
  // writer and vice versa; a commit is one append to the WAL.
  FDO_TRY(std::string journal, enable_wal(db, options.busy_timeout));
  if (journal != "wal")
    return make_error(Errc::unsupported, "profile store '" + path +
                                             "': cannot use WAL journal mode (got '" + journal +
                                             "'); is it on a network file system?");
  FDO_TRY_STATUS(db.exec(options.synchronous == Synchronous::full ? "PRAGMA synchronous = FULL"
                                                                  : "PRAGMA synchronous = NORMAL"));
  FDO_TRY_STATUS(db.exec("PRAGMA foreign_keys = ON"));
  if (info.user_version < schema::latest_version()) {
    if (info.user_version > 0)
      log::info("profile store " + path + ": upgrading schema from version " +
                std::to_string(info.user_version) + " to " +
                std::to_string(schema::latest_version()));
    FDO_TRY_STATUS(schema::migrate(db, schema::latest_version()));
  }
  return ok();
}

} // namespace

SqliteBackend::SqliteBackend(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SqliteBackend::~SqliteBackend() = default;

Expected<std::unique_ptr<Backend>> SqliteBackend::open(const std::string& path,
                                                       const Options& options) {
  FDO_TRY_STATUS(check_options(options));
  FDO_TRY_STATUS(check_file(path, options.mode));
  FDO_TRY(QuickCheck checked, inspect_quietly(path, options.mode));
  const bool read_only = options.mode == OpenMode::read_only;
  if (!read_only) FDO_TRY_STATUS(create_private_file(path));
  FDO_TRY(auto db, read_only ? open_reader(path, options.busy_timeout)
                             : sqlite::Connection::open(path, sqlite::Access::read_write));
  db.set_busy_timeout(options.busy_timeout);
  // Until the file has passed the checks, closing must not checkpoint a WAL
  // left behind into a database that is about to be refused.
  if (checked == QuickCheck::pending && !read_only)
    FDO_TRY_STATUS(db.set_close_checkpoint(sqlite::CloseCheckpoint::leave_files));
  // The first read parses the header and schema: NOTADB/CORRUPT surface here,
  // before anything is written.
  FDO_TRY(schema::Info info, schema::read_info(db));
  FDO_TRY_STATUS(check_schema(path, info, options.mode));
  if (checked == QuickCheck::pending) FDO_TRY_STATUS(quick_check(db, path));
  auto impl = std::make_unique<Impl>(path, options);
  if (read_only) {
    impl->readers.adopt(std::move(db));
  } else {
    FDO_TRY_STATUS(db.set_close_checkpoint(sqlite::CloseCheckpoint::checkpoint));
    FDO_TRY_STATUS(prepare_writer(db, path, options, info));
    impl->writer = std::move(db);
  }
  return std::unique_ptr<Backend>(std::make_unique<SqliteBackend>(std::move(impl)));
}

Expected<std::unique_lock<std::mutex>> SqliteBackend::Impl::lock_writer() {
  if (options.mode == OpenMode::read_only)
    return make_error(Errc::permission_denied, "profile store '" + path + "' is open read-only");
  return std::unique_lock(write_mu);
}

StoreKind SqliteBackend::kind() const {
  return StoreKind::sqlite;
}

std::string SqliteBackend::location() const {
  return impl_->path;
}

const std::string& SqliteBackend::path() const {
  return impl_->path;
}

Options SqliteBackend::options() const {
  Options o = impl_->options;
  o.retention = impl_->retention.load(std::memory_order_relaxed);
  return o;
}

Status SqliteBackend::set_retention(int versions) {
  if (versions < 1)
    return make_error(Errc::invalid_argument, "retention must keep at least 1 version (got " +
                                                  std::to_string(versions) + ")");
  // Each write reads it once, so a write uses the old or the new value whole.
  impl_->retention.store(versions, std::memory_order_relaxed);
  return ok();
}

Expected<int> SqliteBackend::schema_version() const {
  FDO_TRY(auto lease, impl_->readers.acquire());
  FDO_TRY(std::int64_t v, lease.db().query_int("PRAGMA user_version"));
  return static_cast<int>(v);
}

Status SqliteBackend::integrity_check() const {
  FDO_TRY(auto lease, impl_->readers.acquire());
  sqlite::Connection& db = lease.db();
  // Both checks look at one snapshot.
  FDO_TRY(auto tx, sqlite::Transaction::begin(db, sqlite::TxKind::deferred));
  std::string problems;
  {
    FDO_TRY(Statement st, db.prepare("PRAGMA integrity_check"));
    while (true) {
      FDO_TRY(bool row, st.step());
      if (!row) break;
      std::string line = st.column_text(0);
      if (line != "ok") problems += line + "; ";
    }
  }
  {
    FDO_TRY(Statement st, db.prepare("PRAGMA foreign_key_check"));
    while (true) {
      FDO_TRY(bool row, st.step());
      if (!row) break;
      problems += "foreign key violation in " + st.column_text(0) + " row " +
                  std::to_string(st.column_int64(1)) + " -> " + st.column_text(2) + "; ";
    }
  }
  FDO_TRY_STATUS(tx.commit());
  if (!problems.empty())
    return make_error(Errc::corrupt, "profile store '" + impl_->path + "': " + problems);
  return ok();
}

} // namespace fdo::profile_store
