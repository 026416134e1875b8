#include "fdo/daemon/memfd_buffers.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace fdo::daemon {

int required_buffer_seals() {
  return F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK;
}

namespace {

std::string seal_names(int seals) {
  std::string out;
  for (auto [bit, name] :
       {std::pair{F_SEAL_WRITE, "F_SEAL_WRITE"}, std::pair{F_SEAL_GROW, "F_SEAL_GROW"},
        std::pair{F_SEAL_SHRINK, "F_SEAL_SHRINK"}}) {
    if ((seals & bit) == 0) continue;
    if (!out.empty()) out += '|';
    out += name;
  }
  return out.empty() ? std::string("none") : out;
}

struct Checked {
  int fd;
  std::size_t size;
};

Expected<Checked> check(std::size_t k, int fd) {
  const std::string what = "descriptor " + std::to_string(k) + " sent with the request";
  int seals = ::fcntl(fd, F_GET_SEALS);
  if (seals < 0)
    return make_error(Errc::invalid_argument,
                      what + " is not a memfd (F_GET_SEALS: " + std::strerror(errno) +
                          "); send buffers as memfd_create(MFD_ALLOW_SEALING) files, sealed");
  const int missing = required_buffer_seals() & ~seals;
  if (missing != 0)
    return make_error(Errc::invalid_argument,
                      what + " lacks the seals " + seal_names(missing) +
                          ": its sender could still change it while fdod reads it; seal it with "
                          "F_ADD_SEALS (F_SEAL_WRITE|F_SEAL_GROW|F_SEAL_SHRINK) before sending");
  struct stat st {};
  if (::fstat(fd, &st) != 0) return Error::from_errno("fstat of " + what, errno);
  if (!S_ISREG(st.st_mode))
    return make_error(Errc::invalid_argument, what + " is not a regular file");
  return Checked{fd, static_cast<std::size_t>(st.st_size)};
}

Status read_all(const Checked& c, std::size_t k, std::string& out) {
  out.resize(c.size);
  std::size_t off = 0;
  while (off < c.size) {
    ssize_t n = ::pread(c.fd, out.data() + off, c.size - off, static_cast<off_t>(off));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      return Error::from_errno("reading descriptor " + std::to_string(k) + " sent with the request",
                               errno);
    if (n == 0) // cannot happen with F_SEAL_SHRINK; never trust it blindly
      return make_error(Errc::io, "descriptor " + std::to_string(k) + " ended at byte " +
                                      std::to_string(off) + " of " + std::to_string(c.size));
    off += static_cast<std::size_t>(n);
  }
  return ok();
}

} // namespace

Expected<std::vector<std::string>> read_memfd_buffers(std::span<const Fd> fds,
                                                      std::size_t max_total_bytes) {
  std::vector<Checked> checked;
  std::size_t total = 0;
  for (std::size_t k = 0; k < fds.size(); ++k) {
    FDO_TRY(Checked c, check(k, fds[k].get()));
    if (c.size > max_total_bytes - total)
      return make_error(Errc::resource_exhausted,
                        "descriptor " + std::to_string(k) + " sent with the request holds " +
                            std::to_string(c.size) + " bytes: the request's buffers exceed " +
                            std::to_string(max_total_bytes) + " bytes (max_output_bytes / 2)");
    total += c.size;
    checked.push_back(c);
  }
  std::vector<std::string> out(checked.size());
  for (std::size_t k = 0; k < checked.size(); ++k)
    FDO_TRY_STATUS(read_all(checked[k], k, out[k]));
  return out;
}

} // namespace fdo::daemon
