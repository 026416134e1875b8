#include "fdo/util/fd.h"

#include <atomic>
#include <cerrno>
#include <fcntl.h>
#include <filesystem>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace fdo {

void Fd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_); // close(2) errors after EINTR are not retryable on Linux.
  fd_ = fd;
}

Expected<Fd> Fd::open(const std::string& path, int flags, mode_t mode) {
  int fd;
  do {
    fd = ::open(path.c_str(), flags | O_CLOEXEC, mode);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return Error::from_errno("open " + path, errno);
  return Fd(fd);
}

Mapping::Mapping(Mapping&& other) noexcept : addr_(other.addr_), length_(other.length_) {
  other.addr_ = nullptr;
  other.length_ = 0;
}

Mapping& Mapping::operator=(Mapping&& other) noexcept {
  if (this != &other) {
    reset();
    addr_ = other.addr_;
    length_ = other.length_;
    other.addr_ = nullptr;
    other.length_ = 0;
  }
  return *this;
}

void Mapping::reset() {
  if (addr_ != nullptr) ::munmap(addr_, length_);
  addr_ = nullptr;
  length_ = 0;
}

static int to_prot(Protection p) {
  switch (p) {
  case Protection::read_only:
    return PROT_READ;
  case Protection::read_write:
    return PROT_READ | PROT_WRITE;
  case Protection::read_write_exec:
    return PROT_READ | PROT_WRITE | PROT_EXEC;
  }
  return PROT_READ;
}

Expected<Mapping> Mapping::map_file(const Fd& fd, std::size_t length, Protection prot,
                                    off_t offset) {
  if (length == 0) return make_error(Errc::invalid_argument, "cannot map 0 bytes");
  int flags = prot == Protection::read_only ? MAP_PRIVATE : MAP_SHARED;
  void* p = ::mmap(nullptr, length, to_prot(prot), flags, fd.get(), offset);
  if (p == MAP_FAILED) return Error::from_errno("mmap", errno);
  return Mapping(p, length);
}

Expected<Mapping> Mapping::anonymous(std::size_t length, Protection prot) {
  if (length == 0) return make_error(Errc::invalid_argument, "cannot map 0 bytes");
  void* p = ::mmap(nullptr, length, to_prot(prot), MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return Error::from_errno("mmap anonymous", errno);
  return Mapping(p, length);
}

Status write_all(int fd, std::span<const std::uint8_t> bytes) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Error::from_errno("write", errno);
    }
    done += static_cast<std::size_t>(n);
  }
  return ok();
}

Expected<std::string> read_file(const std::string& path, std::size_t max_bytes) {
  FDO_TRY(Fd fd, Fd::open(path, O_RDONLY));
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Error::from_errno("read " + path, errno);
    }
    if (n == 0) break;
    if (out.size() + static_cast<std::size_t>(n) > max_bytes)
      return make_error(Errc::resource_exhausted,
                        path + " is larger than " + std::to_string(max_bytes) + " bytes");
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

Status write_file_atomic(const std::string& path, std::string_view bytes, Durability durability,
                         mode_t mode) {
  static std::atomic<unsigned> counter{0};
  std::filesystem::path target(path);
  std::filesystem::path dir = target.parent_path().empty() ? "." : target.parent_path();
  std::string tmp = (dir / (std::string(kAtomicTempPrefix) + target.filename().string() + "." +
                            std::to_string(::getpid()) + "." + std::to_string(counter++)))
                        .string();
  {
    FDO_TRY(Fd fd, Fd::open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_TRUNC, mode));
    if (auto st = write_all(fd.get(), bytes); !st) {
      ::unlink(tmp.c_str());
      return std::move(st).error().context("write " + tmp);
    }
    if (durability == Durability::fsync && ::fsync(fd.get()) != 0) {
      int err = errno;
      ::unlink(tmp.c_str());
      return Error::from_errno("fsync " + tmp, err);
    }
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return Error::from_errno("rename " + tmp + " -> " + path, err);
  }
  if (durability == Durability::fsync) {
    FDO_TRY(Fd dfd, Fd::open(dir.string(), O_RDONLY | O_DIRECTORY));
    if (::fsync(dfd.get()) != 0) return Error::from_errno("fsync directory " + dir.string(), errno);
  }
  return ok();
}

Status create_private_dirs(const std::string& dir) {
  constexpr mode_t kPrivateDirMode = 0700;
  struct stat st {};
  if (::stat(dir.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return ok();
    return make_error(Errc::io, dir + " is not a directory");
  }
  if (errno != ENOENT) return Error::from_errno("stat " + dir, errno);
  const std::filesystem::path path(dir);
  if (path.has_parent_path() && path.parent_path() != path)
    FDO_TRY_STATUS(create_private_dirs(path.parent_path().string()));
  if (::mkdir(dir.c_str(), kPrivateDirMode) != 0) {
    if (errno == EEXIST) return ok(); // another writer created it just now
    return Error::from_errno("create directory " + dir, errno);
  }
  if (::chmod(dir.c_str(), kPrivateDirMode) != 0)
    return Error::from_errno("chmod directory " + dir, errno);
  return ok();
}

} // namespace fdo
