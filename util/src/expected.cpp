#include "fdo/util/expected.h"

#include <cerrno>
#include <cstring>

namespace fdo {

std::string_view to_string(Errc code) {
  switch (code) {
  case Errc::invalid_argument:
    return "invalid_argument";
  case Errc::not_found:
    return "not_found";
  case Errc::already_exists:
    return "already_exists";
  case Errc::conflict:
    return "conflict";
  case Errc::io:
    return "io";
  case Errc::corrupt:
    return "corrupt";
  case Errc::parse:
    return "parse";
  case Errc::verify:
    return "verify";
  case Errc::compile:
    return "compile";
  case Errc::link:
    return "link";
  case Errc::timeout:
    return "timeout";
  case Errc::crashed:
    return "crashed";
  case Errc::resource_exhausted:
    return "resource_exhausted";
  case Errc::permission_denied:
    return "permission_denied";
  case Errc::unsupported:
    return "unsupported";
  case Errc::unavailable:
    return "unavailable";
  case Errc::pinned:
    return "pinned";
  case Errc::internal:
    return "internal";
  }
  return "unknown";
}

std::string Error::describe() const {
  std::string out(to_string(code_));
  out += ": ";
  out += message_;
  return out;
}

Error Error::context(std::string_view what) && {
  message_ = std::string(what) + ": " + message_;
  return std::move(*this);
}

Error Error::context(std::string_view what) const& {
  return Error(code_, std::string(what) + ": " + message_);
}

Error Error::from_errno(std::string_view operation, int err) {
  std::string msg(operation);
  msg += ": ";
  msg += std::strerror(err);
  Errc code = Errc::io;
  if (err == ENOENT)
    code = Errc::not_found;
  else if (err == EACCES || err == EPERM)
    code = Errc::permission_denied;
  else if (err == EEXIST)
    code = Errc::already_exists;
  else if (err == ENOMEM || err == ENOSPC || err == EMFILE || err == ENFILE)
    code = Errc::resource_exhausted;
  else if (err == ETIMEDOUT)
    code = Errc::timeout;
  return Error(code, std::move(msg));
}

} // namespace fdo
