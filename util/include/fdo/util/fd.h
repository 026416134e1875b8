// RAII file descriptors and memory mappings, plus whole-file helpers with
// atomic replacement (temp file, fsync, rename, fsync of the directory).
#pragma once

#include "fdo/util/expected.h"

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <sys/types.h>

namespace fdo {

// Owns one file descriptor; closes it on destruction. Move-only.
class Fd {
public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& other) noexcept : fd_(other.release()) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  explicit operator bool() const { return valid(); }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1);

  // open(2) with O_CLOEXEC added.
  static Expected<Fd> open(const std::string& path, int flags, mode_t mode = 0644);

private:
  int fd_ = -1;
};

enum class Protection { read_only, read_write, read_write_exec };

// Owns one mmap(2) region; munmaps it on destruction. Move-only.
class Mapping {
public:
  Mapping() = default;
  ~Mapping() { reset(); }
  Mapping(Mapping&& other) noexcept;
  Mapping& operator=(Mapping&& other) noexcept;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;

  // Maps `length` bytes of `fd` from `offset` (MAP_SHARED for read_write so
  // writes reach the file; MAP_PRIVATE for read_only).
  static Expected<Mapping> map_file(const Fd& fd, std::size_t length, Protection prot,
                                    off_t offset = 0);
  // Anonymous private memory.
  static Expected<Mapping> anonymous(std::size_t length, Protection prot);
  // Takes ownership of a region mapped elsewhere (e.g. a perf ring buffer).
  static Mapping adopt(void* addr, std::size_t length) { return Mapping(addr, length); }

  void* data() const { return addr_; }
  std::size_t size() const { return length_; }
  bool valid() const { return addr_ != nullptr; }
  std::span<std::uint8_t> bytes() const { return {static_cast<std::uint8_t*>(addr_), length_}; }
  void reset();

private:
  Mapping(void* addr, std::size_t length) : addr_(addr), length_(length) {}
  void* addr_ = nullptr;
  std::size_t length_ = 0;
};

// Writes all bytes, retrying on EINTR and short writes.
Status write_all(int fd, std::span<const std::uint8_t> bytes);
inline Status write_all(int fd, std::string_view s) {
  return write_all(fd, {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()});
}
// Reads a whole file into memory; fails with resource_exhausted above max_bytes.
Expected<std::string> read_file(const std::string& path, std::size_t max_bytes = std::size_t(1)
                                                                                 << 32);

enum class Durability { none, fsync };
// Replaces `path` atomically: write a unique temp file beside it, (fsync it), rename
// over `path`, (fsync the directory). A crash leaves the old file or the new
// file, never a partial one; stray temp files start with kAtomicTempPrefix.
inline constexpr std::string_view kAtomicTempPrefix = ".tmp.";
Status write_file_atomic(const std::string& path, std::string_view bytes,
                         Durability durability = Durability::fsync, mode_t mode = 0644);

// Creates `dir` and its missing parents as 0700 (chmod after mkdir: mkdir's
// mode passes through the umask, and one such as 0277 would leave a directory
// this process cannot write to); existing directories keep their mode. A
// directory another process creates meanwhile is fine.
Status create_private_dirs(const std::string& dir);

} // namespace fdo
