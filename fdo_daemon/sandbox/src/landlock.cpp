#include "landlock.h"

#include "fdo/util/fd.h"

#include <cerrno>
#include <cstdint>
#include <fcntl.h>
#include <linux/landlock.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace fdo::daemon::landlock {

namespace {

// Filesystem access rights by the ABI that introduced them (the kernel
// refuses rights newer than its ABI).
constexpr std::uint64_t kFsRightsAbi1 = (1ULL << 13) - 1; // EXECUTE .. MAKE_SYM
constexpr std::uint64_t kFsRefer = 1ULL << 13;            // ABI 2
constexpr std::uint64_t kFsTruncate = 1ULL << 14;         // ABI 3

constexpr std::uint64_t kReadFile = LANDLOCK_ACCESS_FS_READ_FILE;
constexpr std::uint64_t kReadDir = LANDLOCK_ACCESS_FS_READ_DIR;
// Rights that make sense on a file rather than a directory (the kernel
// refuses directory rights on a file rule).
constexpr std::uint64_t kFileRights = LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_WRITE_FILE |
                                      LANDLOCK_ACCESS_FS_READ_FILE | kFsTruncate;

std::uint64_t handled_rights(int abi) {
  std::uint64_t r = kFsRightsAbi1;
  if (abi >= 2) r |= kFsRefer;
  if (abi >= 3) r |= kFsTruncate;
  return r;
}

// The ruleset attribute as ABI 1 defines it: the kernel accepts the
// smallest size it knows, and nothing here needs the later fields.
struct RulesetAttr {
  std::uint64_t handled_access_fs;
};

struct PathBeneathAttr {
  std::uint64_t allowed_access;
  std::int32_t parent_fd;
} __attribute__((packed));

long create_ruleset(const RulesetAttr* attr, std::size_t size, std::uint32_t flags) {
  return ::syscall(SYS_landlock_create_ruleset, attr, size, flags);
}

Status add_rule(int ruleset, const std::string& path, std::uint64_t rights, std::uint64_t handled) {
  int fd = ::open(path.c_str(), O_PATH | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return ok();
    return Error::from_errno("landlock: open " + path, errno);
  }
  Fd held(fd);
  struct stat st {};
  if (::fstat(fd, &st) != 0) return Error::from_errno("landlock: stat " + path, errno);
  if (!S_ISDIR(st.st_mode)) rights &= kFileRights;
  PathBeneathAttr attr{rights & handled, fd};
  if (::syscall(SYS_landlock_add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, &attr, 0) != 0)
    return Error::from_errno("landlock: allow " + path, errno);
  return ok();
}

} // namespace

int abi_version() {
  long v = create_ruleset(nullptr, 0, LANDLOCK_CREATE_RULESET_VERSION);
  return v > 0 ? static_cast<int>(v) : 0;
}

Status restrict_self(const std::vector<std::string>& readable,
                     const std::vector<std::string>& writable) {
  int abi = abi_version();
  if (abi == 0) return make_error(Errc::unsupported, "landlock: not available in this kernel");
  const std::uint64_t handled = handled_rights(abi);
  RulesetAttr attr{handled};
  long rs = create_ruleset(&attr, sizeof attr, 0);
  if (rs < 0) return Error::from_errno("landlock: create ruleset", errno);
  Fd ruleset(static_cast<int>(rs));
  for (const std::string& p : readable)
    FDO_TRY_STATUS(add_rule(ruleset.get(), p, kReadFile | kReadDir, handled));
  for (const std::string& p : writable)
    FDO_TRY_STATUS(add_rule(ruleset.get(), p, handled, handled));
  if (::syscall(SYS_landlock_restrict_self, ruleset.get(), 0) != 0)
    return Error::from_errno("landlock: restrict self", errno);
  return ok();
}

} // namespace fdo::daemon::landlock
