#include "fdo/util/scm_rights.h"

#include <cerrno>
#include <cstring>
#include <sys/socket.h>

namespace fdo {

ssize_t send_with_fds(int sock, std::string_view bytes, std::span<const int> fds, int flags) {
  iovec iov{const_cast<char*>(bytes.data()), bytes.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  std::vector<char> control(fds.empty() ? 0 : CMSG_SPACE(fds.size() * sizeof(int)), 0);
  if (!fds.empty()) {
    msg.msg_control = control.data();
    msg.msg_controllen = control.size();
    cmsghdr* cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(fds.size() * sizeof(int));
    std::memcpy(CMSG_DATA(cm), fds.data(), fds.size() * sizeof(int));
  }
  return ::sendmsg(sock, &msg, flags);
}

ssize_t receive_with_fds(int sock, std::span<char> buf, std::size_t max_fds, int flags,
                         std::vector<Fd>& fds, bool& truncated) {
  std::vector<char> control(CMSG_SPACE(max_fds * sizeof(int)), 0);
  iovec iov{buf.data(), buf.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control.data();
  msg.msg_controllen = control.size();
  truncated = false;
  ssize_t got = ::recvmsg(sock, &msg, flags | MSG_CMSG_CLOEXEC);
  if (got < 0) return got;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const std::size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (std::size_t i = 0; i < n; ++i) {
      int raw;
      std::memcpy(&raw, CMSG_DATA(c) + i * sizeof(int), sizeof raw);
      fds.emplace_back(raw);
    }
  }
  truncated = (msg.msg_flags & MSG_CTRUNC) != 0;
  return got;
}

} // namespace fdo
