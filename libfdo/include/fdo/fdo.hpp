// libfdo's C++ interface: a thin, header-only RAII wrapper over the C API in
// fdo/fdo.h. Failures throw fdo::api::Error, which keeps the C error's code,
// message, JSON-RPC code and data. Same threading rule as the C API: a
// Connection may be shared between threads (calls are serialised).
#pragma once

#include "fdo/fdo.h"

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fdo::api {

class Error : public std::runtime_error {
public:
  explicit Error(const fdo_error* e)
      : std::runtime_error(e ? fdo_error_message(e) : "libfdo: unknown error (out of memory?)"),
        code_(e ? fdo_error_get_code(e) : FDO_ERR_INTERNAL),
        rpc_code_(e ? fdo_error_rpc_code(e) : 0), data_json_(e ? fdo_error_data_json(e) : "null") {}

  fdo_error_code code() const noexcept { return code_; }
  const char* code_name() const noexcept { return fdo_error_code_name(code_); }
  // The daemon's JSON-RPC error code; 0 for failures on this side.
  std::int64_t rpc_code() const noexcept { return rpc_code_; }
  // The daemon's error.data as JSON text ("null" when none).
  const std::string& data_json() const noexcept { return data_json_; }

private:
  fdo_error_code code_;
  std::int64_t rpc_code_;
  std::string data_json_;
};

namespace detail {

struct ErrorFree {
  void operator()(fdo_error* e) const noexcept { fdo_error_free(e); }
};
struct StringFree {
  void operator()(char* s) const noexcept { fdo_string_free(s); }
};
struct ConnClose {
  void operator()(fdo_conn* c) const noexcept { fdo_close(c); }
};

// Calls a C API function ending in `fdo_error**`; throws on failure.
template <class F> void check(F&& f) {
  fdo_error* raw = nullptr;
  if (f(&raw) != 0) {
    std::unique_ptr<fdo_error, ErrorFree> e(raw);
    throw Error(e.get());
  }
}

inline std::string take(char* s) {
  std::unique_ptr<char, StringFree> owned(s);
  return s ? std::string(s) : std::string();
}

} // namespace detail

inline fdo_value i32(std::int32_t v) {
  fdo_value out{};
  out.type = FDO_I32;
  out.as.i32 = v;
  return out;
}
inline fdo_value i64(std::int64_t v) {
  fdo_value out{};
  out.type = FDO_I64;
  out.as.i64 = v;
  return out;
}
inline fdo_value f32(float v) {
  fdo_value out{};
  out.type = FDO_F32;
  out.as.f32 = v;
  return out;
}
inline fdo_value f64(double v) {
  fdo_value out{};
  out.type = FDO_F64;
  out.as.f64 = v;
  return out;
}
// A pointer argument: the index of a buffer in the call's buffers.
inline fdo_value buffer(std::size_t index) {
  fdo_value out{};
  out.type = FDO_BUFFER;
  out.as.buffer = index;
  return out;
}

struct Program {
  std::string id;
  std::string profile_key;
};

class Connection {
public:
  // Connects and performs the handshake; "" for the default socket.
  explicit Connection(const std::string& socket_path = "", const std::string& client_name = "") {
    fdo_conn* c = nullptr;
    detail::check([&](fdo_error** e) {
      return fdo_connect_as(socket_path.c_str(), client_name.c_str(), &c, e);
    });
    conn_.reset(c);
  }

  fdo_conn* get() const noexcept { return conn_.get(); }
  std::string server_version() const { return fdo_conn_server_version(conn_.get()); }
  bool has_capability(const std::string& name) const {
    return fdo_conn_has_capability(conn_.get(), name.c_str()) != 0;
  }
  void set_timeout_ms(std::int64_t ms) {
    detail::check([&](fdo_error** e) { return fdo_conn_set_timeout_ms(conn_.get(), ms, e); });
  }

  Program register_program(std::string_view ir, fdo_ir_format format = FDO_IR_TEXT,
                           const std::string& name = "") {
    char id[FDO_KEY_SIZE], pk[FDO_KEY_SIZE];
    detail::check([&](fdo_error** e) {
      return fdo_program_register(conn_.get(), name.empty() ? nullptr : name.c_str(), ir.data(),
                                  ir.size(), format, id, pk, e);
    });
    return Program{id, pk};
  }

  // One stage in the daemon; stage_json (optional) gets the whole result.
  fdo_value execute(const std::string& program_id, const std::string& entry,
                    const std::vector<fdo_value>& args = {},
                    std::vector<fdo_buffer>* buffers = nullptr, unsigned flags = 0,
                    std::string* stage_json = nullptr) {
    fdo_call call{entry.c_str(),
                  args.data(),
                  args.size(),
                  buffers ? buffers->data() : nullptr,
                  buffers ? buffers->size() : 0,
                  flags};
    fdo_value ret{};
    char* stage = nullptr;
    detail::check([&](fdo_error** e) {
      return fdo_execute(conn_.get(), program_id.c_str(), &call, &ret,
                         stage_json ? &stage : nullptr, e);
    });
    if (stage_json) *stage_json = detail::take(stage);
    return ret;
  }

  std::string profile(const std::string& profile_key, std::int64_t version = 0) {
    char* out = nullptr;
    detail::check([&](fdo_error** e) {
      return fdo_profile_get(conn_.get(), profile_key.c_str(), version, &out, e);
    });
    return detail::take(out);
  }

  std::string profile_history(const std::string& profile_key) {
    char* out = nullptr;
    detail::check([&](fdo_error** e) {
      return fdo_profile_history(conn_.get(), profile_key.c_str(), &out, e);
    });
    return detail::take(out);
  }

  std::string call_json(const std::string& method, const std::string& params_json = "{}") {
    char* out = nullptr;
    detail::check([&](fdo_error** e) {
      return fdo_call_json(conn_.get(), method.c_str(), params_json.c_str(), &out, e);
    });
    return detail::take(out);
  }

private:
  std::unique_ptr<fdo_conn, detail::ConnClose> conn_;
};

} // namespace fdo::api
