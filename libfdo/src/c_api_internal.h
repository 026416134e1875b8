// What the C API's translation units share: the opaque objects' definitions
// and the error plumbing. Not installed.
#pragma once

#include "fdo/client/rpc_client.h"
#include "fdo/fdo.h"

#include <cstdint>
#include <cstring>
#include <exception>
#include <mutex>
#include <new>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

struct fdo_error {
  fdo_error_code code = FDO_ERR_INTERNAL;
  std::string message;
  std::int64_t rpc_code = 0;
  std::string data = "null";
};

// One connection. Calls from several threads are serialised by `mu`: the
// protocol answers one request at a time per connection.
struct fdo_conn {
  explicit fdo_conn(fdo::client::RpcClient c) : client(std::move(c)) {}
  std::mutex mu;
  fdo::client::RpcClient client;
  // From the handshake; read-only afterwards.
  std::string server_version;
  int protocol_minor = 0;
  std::vector<std::string> capabilities;
};

namespace fdo::capi {

// The integer a C caller stored in an enum-typed parameter or field. C allows
// any int there, but in C++ reading an enum object whose value lies outside
// the enumeration's range is undefined (UBSan's -fsanitize=enum reports it),
// so the C API reads the bytes and validates the integer instead.
template <class E> std::int64_t raw_enum(const E& e) {
  static_assert(std::is_enum_v<E>);
  std::underlying_type_t<E> v;
  std::memcpy(&v, &e, sizeof v);
  return static_cast<std::int64_t>(v);
}

fdo_error_code to_c(Errc code);
// Sets *err (when err is not NULL) and returns -1.
int fail(fdo_error** err, const Error& e, const client::RpcFailure* failure = nullptr);
int fail(fdo_error** err, Errc code, std::string message);

// One request on a connection, serialised with the connection's other
// callers. A daemon error becomes *err with its JSON-RPC code and data.
// request_fds go with the request (SCM_RIGHTS); the caller keeps them.
fdo::Expected<nlohmann::json> call(fdo_conn* conn, std::string_view method,
                                   const nlohmann::json& params, fdo_error** err, int* rc,
                                   std::span<const int> request_fds = {});

// Copies a C string the caller frees with fdo_string_free.
char* dup_string(const std::string& s);

// Runs an API function's body so no C++ exception crosses into C: running
// out of memory or a library throwing becomes an error.
template <class F> int guarded(fdo_error** err, F&& body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return fail(err, Errc::resource_exhausted, "out of memory");
  } catch (const std::exception& e) {
    return fail(err, Errc::internal, std::string("libfdo: ") + e.what());
  }
}

} // namespace fdo::capi
