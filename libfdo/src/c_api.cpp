// The C API's connection and error objects (include/fdo/fdo.h).
#include "c_api_internal.h"

#include <new>

using fdo::client::RpcClient;

namespace {

// fdo_error_code mirrors fdo::Errc, one apart (0 is not an error).
constexpr int kFirstCode = FDO_ERR_INVALID_ARGUMENT;
static_assert(FDO_ERR_INTERNAL - kFirstCode == static_cast<int>(fdo::Errc::internal));
static_assert(FDO_ERR_PINNED - kFirstCode == static_cast<int>(fdo::Errc::pinned));
static_assert(FDO_ERR_UNSUPPORTED - kFirstCode == static_cast<int>(fdo::Errc::unsupported));

} // namespace

namespace fdo::capi {

fdo_error_code to_c(Errc code) {
  return static_cast<fdo_error_code>(static_cast<int>(code) + kFirstCode);
}

int fail(fdo_error** err, const Error& e, const client::RpcFailure* failure) {
  if (err == nullptr) return -1;
  try {
    auto* out = new fdo_error;
    out->code = to_c(e.code());
    out->message = e.message();
    if (failure != nullptr) {
      out->rpc_code = failure->code;
      out->data = failure->data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    }
    *err = out;
  } catch (const std::bad_alloc&) {
    *err = nullptr; // nothing better to report without memory
  }
  return -1;
}

int fail(fdo_error** err, Errc code, std::string message) {
  return fail(err, Error(code, std::move(message)), nullptr);
}

} // namespace fdo::capi

using namespace fdo::capi;

extern "C" {

fdo_error_code fdo_error_get_code(const fdo_error* e) {
  return e ? e->code : FDO_ERR_INTERNAL;
}

const char* fdo_error_code_name(fdo_error_code code) {
  if (code < kFirstCode || code > FDO_ERR_INTERNAL) return "unknown";
  return fdo::to_string(static_cast<fdo::Errc>(code - kFirstCode)).data();
}

const char* fdo_error_message(const fdo_error* e) {
  return e ? e->message.c_str() : "";
}

int64_t fdo_error_rpc_code(const fdo_error* e) {
  return e ? e->rpc_code : 0;
}

const char* fdo_error_data_json(const fdo_error* e) {
  return e ? e->data.c_str() : "null";
}

void fdo_error_free(fdo_error* e) {
  delete e;
}

int fdo_connect(const char* socket_path, fdo_conn** out, fdo_error** err) {
  return guarded(err, [&]() -> int {
    if (out == nullptr) return fail(err, fdo::Errc::invalid_argument, "fdo_connect: out is NULL");
    *out = nullptr;
    std::string path = socket_path != nullptr && *socket_path != '\0'
                           ? std::string(socket_path)
                           : fdo::client::default_socket_path();
    auto client = RpcClient::connect(path);
    if (!client) return fail(err, client.error());
    *out = new fdo_conn(std::move(*client));
    return 0;
  });
}

void fdo_close(fdo_conn* conn) {
  delete conn;
}

} // extern "C"
