#include "fdo/util/expected.h"

#include "fdo/util/enum_names.h"

#include <cerrno>
#include <cstring>

namespace fdo {

namespace {
constexpr EnumNames<Errc, 18> kErrcNames{{{
    {Errc::invalid_argument, "invalid_argument"},
    {Errc::not_found, "not_found"},
    {Errc::already_exists, "already_exists"},
    {Errc::conflict, "conflict"},
    {Errc::io, "io"},
    {Errc::corrupt, "corrupt"},
    {Errc::parse, "parse"},
    {Errc::verify, "verify"},
    {Errc::compile, "compile"},
    {Errc::link, "link"},
    {Errc::timeout, "timeout"},
    {Errc::crashed, "crashed"},
    {Errc::resource_exhausted, "resource_exhausted"},
    {Errc::permission_denied, "permission_denied"},
    {Errc::unsupported, "unsupported"},
    {Errc::unavailable, "unavailable"},
    {Errc::pinned, "pinned"},
    {Errc::internal, "internal"},
}}};
} // namespace

std::string_view to_string(Errc code) {
  return kErrcNames.name(code);
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
