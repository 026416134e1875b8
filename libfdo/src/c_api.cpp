// The C API's connection and error objects (include/fdo/fdo.h).
#include "c_api_internal.h"
#include "fdo/version.h"

#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

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

Expected<nlohmann::json> call(fdo_conn* conn, std::string_view method, const nlohmann::json& params,
                              fdo_error** err, int* rc, std::span<const int> request_fds) {
  std::lock_guard lock(conn->mu);
  auto reply = conn->client.exchange(method, params, request_fds);
  if (!reply) {
    *rc = fail(err, reply.error());
    return std::move(reply).error();
  }
  if (!reply->answer) {
    *rc = fail(err, reply->answer.error(), reply->failure ? &*reply->failure : nullptr);
    return std::move(reply->answer).error();
  }
  *rc = 0;
  return std::move(*reply->answer);
}

char* dup_string(const std::string& s) {
  char* out = static_cast<char*>(std::malloc(s.size() + 1));
  if (out == nullptr) throw std::bad_alloc();
  std::memcpy(out, s.data(), s.size() + 1);
  return out;
}

namespace {

// hello: refuses a daemon of another major protocol version (the daemon
// refuses us first when it knows the method; an older daemon does not).
int handshake(fdo_conn* conn, const std::string& client_name, fdo_error** err) {
  nlohmann::json params = {
      {"client", client_name + " (libfdo " + std::string(kVersion) + ")"},
      {"protocol", {{"major", FDO_PROTOCOL_MAJOR}, {"minor", FDO_PROTOCOL_MINOR}}}};
  std::lock_guard lock(conn->mu);
  auto reply = conn->client.exchange("hello", params);
  if (!reply) return fail(err, std::move(reply).error().context("handshake with fdod"));
  if (!reply->answer) {
    if (reply->failure && reply->failure->code == -32601)
      return fail(
          err,
          Error(Errc::unsupported, "fdod at " + conn->client.socket_path() +
                                       " does not know the handshake (method hello): it predates "
                                       "protocol " +
                                       std::to_string(FDO_PROTOCOL_MAJOR) + "." +
                                       std::to_string(FDO_PROTOCOL_MINOR) + " that this libfdo " +
                                       std::string(kVersion) + " speaks; upgrade fdod"),
          &*reply->failure);
    return fail(err, reply->answer.error(), reply->failure ? &*reply->failure : nullptr);
  }
  const nlohmann::json& r = *reply->answer;
  const nlohmann::json* protocol =
      r.is_object() && r.contains("protocol") ? &r["protocol"] : nullptr;
  if (protocol == nullptr || !protocol->is_object() ||
      !protocol->value("major", nlohmann::json()).is_number_integer())
    return fail(err, Errc::corrupt, "fdod's answer to hello lacks protocol.major");
  int major = (*protocol)["major"].get<int>();
  if (major != FDO_PROTOCOL_MAJOR)
    return fail(err, Errc::unsupported,
                "protocol version mismatch: fdod " + r.value("server_version", std::string("?")) +
                    " speaks protocol " + std::to_string(major) + "." +
                    std::to_string(protocol->value("minor", 0)) + ", this libfdo " +
                    std::string(kVersion) + " speaks " + std::to_string(FDO_PROTOCOL_MAJOR) + "." +
                    std::to_string(FDO_PROTOCOL_MINOR));
  conn->server_version = r.value("server_version", std::string());
  conn->protocol_minor = protocol->value("minor", 0);
  if (r.contains("capabilities") && r["capabilities"].is_array())
    for (const auto& c : r["capabilities"])
      if (c.is_string()) conn->capabilities.push_back(c.get<std::string>());
  return 0;
}

int connect_as(const char* socket_path, const char* client_name, fdo_conn** out, fdo_error** err) {
  if (out == nullptr) return fail(err, Errc::invalid_argument, "fdo_connect: out is NULL");
  *out = nullptr;
  std::string path = socket_path != nullptr && *socket_path != '\0' ? std::string(socket_path)
                                                                    : client::default_socket_path();
  client::ClientOptions options;
  options.client_name = "libfdo " + std::string(kVersion);
  auto client = client::RpcClient::connect(path, options);
  if (!client) return fail(err, client.error());
  auto conn = std::make_unique<fdo_conn>(std::move(*client));
  if (handshake(conn.get(), client_name != nullptr && *client_name != '\0' ? client_name : "libfdo",
                err) != 0)
    return -1;
  *out = conn.release();
  return 0;
}

} // namespace

} // namespace fdo::capi

using namespace fdo::capi;

extern "C" {

fdo_error_code fdo_error_get_code(const fdo_error* e) {
  return e ? e->code : FDO_ERR_INTERNAL;
}

const char* fdo_error_code_name(fdo_error_code code) {
  const std::int64_t raw = fdo::capi::raw_enum(code);
  if (raw < kFirstCode || raw > FDO_ERR_INTERNAL) return "unknown";
  return fdo::to_string(static_cast<fdo::Errc>(raw - kFirstCode)).data();
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
  return guarded(err, [&] { return connect_as(socket_path, nullptr, out, err); });
}

int fdo_connect_as(const char* socket_path, const char* client_name, fdo_conn** out,
                   fdo_error** err) {
  return guarded(err, [&] { return connect_as(socket_path, client_name, out, err); });
}

const char* fdo_conn_server_version(const fdo_conn* conn) {
  return conn ? conn->server_version.c_str() : "";
}

int fdo_conn_protocol_minor(const fdo_conn* conn) {
  return conn ? conn->protocol_minor : 0;
}

int fdo_conn_has_capability(const fdo_conn* conn, const char* name) {
  if (conn == nullptr || name == nullptr) return 0;
  for (const auto& c : conn->capabilities)
    if (c == name) return 1;
  return 0;
}

int fdo_conn_set_timeout_ms(fdo_conn* conn, int64_t ms, fdo_error** err) {
  return guarded(err, [&]() -> int {
    if (conn == nullptr)
      return fail(err, fdo::Errc::invalid_argument, "fdo_conn_set_timeout_ms: conn is NULL");
    constexpr int64_t kYearMs = int64_t(365) * 24 * 3600 * 1000;
    if (ms < 1 || ms > kYearMs)
      return fail(err, fdo::Errc::invalid_argument,
                  "fdo_conn_set_timeout_ms: " + std::to_string(ms) +
                      " ms is outside 1..31536000000 (a year)");
    std::lock_guard lock(conn->mu);
    conn->client.set_timeout(std::chrono::milliseconds(ms));
    return 0;
  });
}

void fdo_string_free(char* s) {
  std::free(s);
}

void fdo_close(fdo_conn* conn) {
  delete conn;
}

} // extern "C"
