#include "message_body.h"

namespace fdo::daemon::detail {

void expect_magic(wire::WireReader& r, std::uint32_t expected) {
  if (std::uint32_t m = r.u32(); !r.failed() && m != expected)
    r.fail("unknown layout (magic " + std::to_string(m) + ", this build speaks " +
           std::to_string(expected) + ")");
}

Expected<std::size_t> body_length(const Message& m, Errc code, std::string_view what) {
  if (!m.body) return make_error(code, std::string(what) + " is not a typed message");
  const std::uint64_t n = m.body->bytes;
  if (n > m.payload.size())
    return make_error(code, std::string(what) + ": a body of " + std::to_string(n) +
                                " bytes in a payload of " + std::to_string(m.payload.size()));
  return static_cast<std::size_t>(n);
}

} // namespace fdo::daemon::detail
