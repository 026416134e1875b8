#include "fdo/daemon/state_dir.h"

#include "fdo/util/fd.h"
#include "fdo/util/log.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <sys/stat.h>
#include <system_error>
#include <unistd.h>

namespace fdo::daemon {

namespace fs = std::filesystem;

namespace {

constexpr mode_t kPrivateDir = 0700;

std::string octal(mode_t mode) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

// .prog files directly in `dir` (the registry keeps them flat); 0 when the
// directory does not exist.
Expected<std::size_t> count_program_files(const fs::path& dir) {
  std::error_code ec;
  std::size_t n = 0;
  fs::directory_iterator it(dir, ec), end;
  if (ec == std::errc::no_such_file_or_directory) return n;
  for (; !ec && it != end; it.increment(ec))
    if (it->path().extension() == ".prog") ++n;
  if (ec) return make_error(Errc::io, "list " + dir.string() + ": " + ec.message());
  return n;
}

// Whether anything but directories lies below `dir`: stops at the first
// such entry, so a large cache costs no more than a small one.
Expected<bool> holds_files(const fs::path& dir) {
  std::error_code ec;
  fs::recursive_directory_iterator it(dir, ec), end;
  if (ec == std::errc::no_such_file_or_directory) return false;
  for (; !ec && it != end; it.increment(ec)) {
    std::error_code type_ec;
    if (!it->is_directory(type_ec)) return true;
  }
  if (ec) return make_error(Errc::io, "list " + dir.string() + ": " + ec.message());
  return false;
}

} // namespace

Status create_private_dirs(const std::string& path) {
  if (path.empty()) return make_error(Errc::invalid_argument, "empty directory path");
  fs::path built;
  for (const fs::path& part : fs::path(path)) {
    if (part.empty()) continue; // what a trailing separator yields
    built /= part;
    struct stat st {};
    if (::stat(built.c_str(), &st) == 0) {
      if (!S_ISDIR(st.st_mode))
        return make_error(Errc::io, "create directory " + path + ": " + built.string() +
                                        " is not a directory");
      continue;
    }
    if (errno != ENOENT) return Error::from_errno("stat " + built.string(), errno);
    if (::mkdir(built.c_str(), kPrivateDir) != 0) {
      if (errno == EEXIST) continue; // another process created it just now
      return Error::from_errno("create directory " + built.string(), errno);
    }
    // mkdir's mode passes through the umask; a umask such as 0277 would leave
    // a directory this process cannot even write to.
    if (::chmod(built.c_str(), kPrivateDir) != 0)
      return Error::from_errno("chmod " + octal(kPrivateDir) + " " + built.string(), errno);
  }
  return ok();
}

Status prepare_state_dir(const std::string& state_dir, StoreLocation store) {
  if (state_dir.empty()) return make_error(Errc::invalid_argument, "state dir is empty");
  if (auto st = create_private_dirs(state_dir); !st)
    return std::move(st).error().context("state dir " + state_dir);
  struct stat st {};
  if (::stat(state_dir.c_str(), &st) != 0)
    return Error::from_errno("stat state dir " + state_dir, errno);
  if ((st.st_mode & 077) != 0) {
    // Tightening the directory is enough: nobody else can reach the files
    // below it, so an operator's chosen file modes (a profiles.db with group
    // read, say) can stay.
    if (::chmod(state_dir.c_str(), kPrivateDir) != 0)
      return Error::from_errno(
          "make state dir " + state_dir + " private (chmod " + octal(kPrivateDir) + ")", errno);
    log::warning("state dir " + state_dir + " was mode " + octal(st.st_mode) +
                 ", open to group or others; changed it to " + octal(kPrivateDir) +
                 " (it holds every tenant's programs, profiles and compiled code)");
  }
  if (store == StoreLocation::state_dir) return check_state_dir(state_dir);
  return ok();
}

Expected<std::size_t> sweep_interrupted_writes(const std::string& state_dir) {
  const fs::path root(state_dir);
  const fs::path objects = root / "cache" / "objects"; // swept by the disk tier itself
  std::size_t removed = 0;
  std::error_code ec;
  fs::recursive_directory_iterator it(root, fs::directory_options::none, ec), end;
  if (ec == std::errc::no_such_file_or_directory) return removed;
  for (; !ec && it != end; it.increment(ec)) {
    std::error_code type_ec;
    if (it->is_directory(type_ec)) {
      if (it->path() == objects) it.disable_recursion_pending();
      continue;
    }
    if (!it->path().filename().string().starts_with(kAtomicTempPrefix)) continue;
    if (::unlink(it->path().c_str()) == 0)
      ++removed;
    else if (errno != ENOENT)
      log::warning("cannot remove " + it->path().string() +
                   ", left by an interrupted write: " + std::strerror(errno));
  }
  if (ec) return make_error(Errc::io, "list " + state_dir + ": " + ec.message());
  return removed;
}

Status check_state_dir(const std::string& state_dir) {
  const fs::path dir(state_dir);
  const std::string db = (dir / "profiles.db").string();
  std::string db_state;
  struct stat st {};
  if (::stat(db.c_str(), &st) == 0) {
    // Anything else (a directory, a damaged file) is refused by the store
    // itself, with a better message than this check could give.
    if (!S_ISREG(st.st_mode) || st.st_size > 0) return ok();
    db_state = "is empty (0 bytes)";
  } else if (errno == ENOENT) {
    db_state = "is missing";
  } else {
    return Error::from_errno("stat " + db, errno);
  }

  FDO_TRY(std::size_t programs, count_program_files(dir / "programs"));
  FDO_TRY(bool cached, holds_files(dir / "cache"));
  if (programs == 0 && !cached) return ok(); // a fresh state dir

  std::string found;
  if (programs > 0)
    found = "programs/ holds " + std::to_string(programs) + " registered program file" +
            (programs == 1 ? "" : "s") + " (.prog)";
  if (cached) found += std::string(found.empty() ? "" : " and ") + "cache/ holds compiled entries";
  std::string wal;
  if (::stat((db + "-wal").c_str(), &st) == 0)
    wal = " (profiles.db-wal is still there: move it away with them)";
  return make_error(Errc::corrupt,
                    "state dir " + state_dir + ": profiles.db " + db_state + ", but " + found +
                        ". Starting on an empty database would turn every registered program id "
                        "into an unknown one and lose every profile, so fdod refuses. Restore "
                        "profiles.db (with its -wal file, if it had one) from a backup; or, to "
                        "start fresh on purpose, move programs/ and cache/ out of the state dir" +
                        wal + ".");
}

} // namespace fdo::daemon
