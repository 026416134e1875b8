// File permission helpers for tests that check private modes whatever the
// umask: the permission bits of a path, and a umask set for one scope.
#pragma once

#include <filesystem>
#include <sys/stat.h>
#include <sys/types.h>

namespace fdo::test_support {

// Permission bits (07777) of `path`; 07777 when it cannot be stat'ed, which
// no check for a private mode accepts.
inline mode_t mode_of(const std::filesystem::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return 07777;
  return st.st_mode & 07777;
}

// Sets the process umask for one scope and restores it.
class ScopedUmask {
public:
  explicit ScopedUmask(mode_t mask) : old_(::umask(mask)) {}
  ~ScopedUmask() { ::umask(old_); }
  ScopedUmask(const ScopedUmask&) = delete;
  ScopedUmask& operator=(const ScopedUmask&) = delete;

private:
  mode_t old_;
};

} // namespace fdo::test_support
