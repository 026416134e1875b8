// What the typed job messages share (exec_messages.h, compile_messages.h): no
// header but the message's TypedBody (its op and how long the typed body is,
// sent in an "FDO3" envelope, ipc.h), a magic leading each body
// (a layout change is a clear error, never a misread), and one encode and one
// decode per message type over its put/get pair.
#pragma once

#include "fdo/daemon/ipc.h"
#include "fdo/util/expected.h"
#include "fdo/util/wire.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace fdo::daemon::detail {

// Fails `r` unless the next u32 is `expected`.
void expect_magic(wire::WireReader& r, std::uint32_t expected);

// The body's length from the message's TypedBody, checked against the
// payload; `code` for an untyped message or an impossible length.
Expected<std::size_t> body_length(const Message& m, Errc code, std::string_view what);

template <class T>
Expected<std::string> encode_with(void (*put)(wire::WireWriter&, const T&), const T& v) {
  wire::WireWriter w;
  put(w, v);
  return std::move(w).take();
}

template <class T>
Expected<T> decode_with(void (*get)(wire::WireReader&, T&), std::string_view bytes,
                        std::string_view what) {
  wire::WireReader r(bytes, what);
  T v;
  get(r, v);
  FDO_TRY_STATUS(r.finish());
  return v;
}

} // namespace fdo::daemon::detail
