// The C API's daemon mode (include/fdo/fdo.h): registering programs,
// executing them in fdod, reading profiles, and any method as JSON text.
#include "c_api_internal.h"
#include "fdo/util/base64.h"

#include <array>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

using nlohmann::json;
using namespace fdo::capi;
using fdo::Errc;

namespace {

constexpr std::array<const char*, 10> kElemNames = {"i8",  "u8",  "i16", "u16", "i32",
                                                    "u32", "i64", "u64", "f32", "f64"};
constexpr std::array<std::size_t, 10> kElemSizes = {1, 1, 2, 2, 4, 4, 8, 8, 4, 8};

bool valid_key(const char* key) {
  if (key == nullptr || std::strlen(key) != FDO_KEY_SIZE - 1) return false;
  for (const char* p = key; *p != '\0'; ++p)
    if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f'))) return false;
  return true;
}

void copy_key(const json& result, const char* field, char* out) {
  if (out == nullptr) return;
  std::string v = result.is_object() ? result.value(field, std::string()) : std::string();
  std::size_t n = std::min<std::size_t>(v.size(), FDO_KEY_SIZE - 1);
  std::memcpy(out, v.data(), n);
  out[n] = '\0';
}

// A sealed memfd holding `bytes` (docs/fdod-protocol.md, "Buffers as memfds"):
// fdod takes only memfds that can no longer be written, grown or shrunk.
fdo::Expected<fdo::Fd> sealed_memfd(std::string_view bytes, const std::string& where) {
  fdo::Fd fd(::memfd_create("fdo-buffer", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd) return fdo::Error::from_errno(where + ": memfd_create", errno);
  std::size_t off = 0;
  while (off < bytes.size()) {
    ssize_t n = ::write(fd.get(), bytes.data() + off, bytes.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fdo::Error::from_errno(where + ": writing its memfd", errno);
    off += static_cast<std::size_t>(n);
  }
  if (::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL) != 0)
    return fdo::Error::from_errno(where + ": sealing its memfd", errno);
  return fd;
}

// Which buffers travel as memfds.
enum class MemfdUse { never, large, all };

// The execute params for a call, or an error naming the bad argument.
// Buffers sent as memfds land in `memfds`, in the order their "memfd"
// indexes name them.
fdo::Expected<json> execute_params(const char* program_id, const fdo_call& call, MemfdUse use,
                                   std::vector<fdo::Fd>& memfds) {
  if (!valid_key(program_id))
    return fdo::make_error(Errc::invalid_argument,
                           "fdo_execute: program id must be 64 lowercase hex digits");
  if (call.entry == nullptr || *call.entry == '\0')
    return fdo::make_error(Errc::invalid_argument, "fdo_execute: call->entry is empty");
  if (call.nargs > 0 && call.args == nullptr)
    return fdo::make_error(Errc::invalid_argument, "fdo_execute: call->args is NULL");
  if (call.nbuffers > 0 && call.buffers == nullptr)
    return fdo::make_error(Errc::invalid_argument, "fdo_execute: call->buffers is NULL");
  json args = json::array();
  for (std::size_t i = 0; i < call.nargs; ++i) {
    const fdo_value& v = call.args[i];
    std::string where = "fdo_execute: args[" + std::to_string(i) + "]";
    switch (raw_enum(v.type)) {
    case FDO_I32:
      args.push_back(v.as.i32);
      break;
    case FDO_I64:
      args.push_back(v.as.i64);
      break;
    case FDO_F32:
      args.push_back(static_cast<double>(v.as.f32));
      break;
    case FDO_F64:
      args.push_back(v.as.f64);
      break;
    case FDO_BUFFER:
      if (v.as.buffer >= call.nbuffers)
        return fdo::make_error(Errc::invalid_argument,
                               where + ": buffer " + std::to_string(v.as.buffer) +
                                   " out of range (" + std::to_string(call.nbuffers) + " buffers)");
      args.push_back({{"buffer", v.as.buffer}});
      break;
    default:
      return fdo::make_error(Errc::invalid_argument,
                             where + ": type " + std::to_string(raw_enum(v.type)) +
                                 " is not an argument type (FDO_I32, FDO_I64, FDO_F32, "
                                 "FDO_F64, FDO_BUFFER)");
    }
  }
  json buffers = json::array();
  for (std::size_t i = 0; i < call.nbuffers; ++i) {
    const fdo_buffer& b = call.buffers[i];
    std::string where = "fdo_execute: buffers[" + std::to_string(i) + "]";
    const std::int64_t elem = raw_enum(b.elem);
    if (elem < 0 || static_cast<std::uint64_t>(elem) >= kElemNames.size())
      return fdo::make_error(Errc::invalid_argument, where + ": unknown element type");
    if (b.count > 0 && b.data == nullptr)
      return fdo::make_error(Errc::invalid_argument, where + ": data is NULL");
    std::size_t bytes = b.count * kElemSizes[elem];
    std::string_view data(static_cast<const char*>(b.data), bytes);
    if (use == MemfdUse::all || (use == MemfdUse::large && bytes >= FDO_MEMFD_MIN_BYTES)) {
      FDO_TRY(fdo::Fd fd, sealed_memfd(data, where));
      buffers.push_back(
          {{"type", kElemNames[elem]}, {"memfd", memfds.size()}, {"length", b.count}});
      memfds.push_back(std::move(fd));
      continue;
    }
    buffers.push_back({{"type", kElemNames[elem]}, {"base64", fdo::base64_encode(data)}});
  }
  json params = {{"program", program_id}, {"entry", call.entry}, {"args", std::move(args)}};
  if (!buffers.empty()) params["buffers"] = std::move(buffers);
  if ((call.flags & FDO_CALL_COPY_BACK) != 0) {
    params["return_buffers"] = true;
    params["buffer_encoding"] = "base64";
  }
  return params;
}

// The result's buffers back into the caller's memory.
fdo::Status copy_back(const json& result, const fdo_call& call) {
  const json& out = result.is_object() && result.contains("buffers") ? result["buffers"] : json();
  if (!out.is_array() || out.size() != call.nbuffers)
    return fdo::make_error(Errc::corrupt, "fdod returned " +
                                              std::to_string(out.is_array() ? out.size() : 0) +
                                              " buffers for " + std::to_string(call.nbuffers));
  for (std::size_t i = 0; i < call.nbuffers; ++i) {
    const fdo_buffer& b = call.buffers[i];
    std::size_t bytes = b.count * kElemSizes[raw_enum(b.elem)];
    if (!out[i].is_object() || !out[i].contains("base64") || !out[i]["base64"].is_string())
      return fdo::make_error(Errc::corrupt,
                             "fdod returned buffer " + std::to_string(i) + " without base64 data");
    FDO_TRY(std::string data, fdo::base64_decode(out[i]["base64"].get<std::string>()));
    if (data.size() != bytes)
      return fdo::make_error(Errc::corrupt, "fdod returned " + std::to_string(data.size()) +
                                                " bytes for buffer " + std::to_string(i) + " of " +
                                                std::to_string(bytes));
    if (bytes > 0) std::memcpy(b.data, data.data(), bytes);
  }
  return {};
}

// The result's value as an fdo_value, by the entry's declared return type.
fdo_value decode_value(const json& result) {
  fdo_value v{};
  v.type = FDO_VOID;
  std::string returns = result.value("returns", std::string("void"));
  const json& value = result.contains("value") ? result["value"] : json();
  if (value.is_null()) return v;
  // fdod names return types as LLVM does ("float", "double"); "f32" and
  // "f64" are the ABI's other spelling.
  if (returns == "float" || returns == "f32") {
    v.type = FDO_F32;
    v.as.f32 = value.get<float>();
  } else if (returns == "double" || returns == "f64") {
    v.type = FDO_F64;
    v.as.f64 = value.get<double>();
  } else if (returns == "i64" || returns == "ptr") {
    v.type = FDO_I64;
    v.as.i64 = value.is_number_unsigned() ? static_cast<int64_t>(value.get<uint64_t>())
                                          : value.get<int64_t>();
  } else if (value.is_boolean()) {
    v.type = FDO_I32;
    v.as.i32 = value.get<bool>() ? 1 : 0;
  } else {
    v.type = FDO_I32;
    v.as.i32 = static_cast<int32_t>(value.get<int64_t>());
  }
  return v;
}

// A method whose result the caller gets as JSON text.
int json_out(fdo_conn* conn, std::string_view method, const json& params, char** out,
             fdo_error** err) {
  int rc = -1;
  auto r = call(conn, method, params, err, &rc);
  if (!r) return rc;
  *out = dup_string(r->dump(-1, ' ', false, json::error_handler_t::replace));
  return 0;
}

int null_arg(fdo_error** err, const char* fn, const char* what) {
  return fail(err, Errc::invalid_argument, std::string(fn) + ": " + what + " is NULL");
}

// A GPU launch's params, or an error naming what is wrong.
fdo::Expected<json> gpu_launch_params(const fdo_gpu_launch& l) {
  json out = json::object();
  if (l.repeats > 1000)
    return fdo::make_error(Errc::invalid_argument, "fdo_execute_gpu: repeats must be 0..1000");
  out["repeats"] = l.repeats == 0 ? 1u : l.repeats;
  if (l.shared_bytes > 0) out["shared_bytes"] = l.shared_bytes;
  if (l.tune_items > 0) {
    out["tune"] = {{"items", l.tune_items}};
    return out;
  }
  auto dims = [](const uint32_t d[3], const char* what) -> fdo::Expected<json> {
    if (d[0] == 0)
      return fdo::make_error(Errc::invalid_argument, std::string("fdo_execute_gpu: ") + what +
                                                         "[0] is 0 (or set tune_items)");
    return json::array({d[0], d[1] == 0 ? 1u : d[1], d[2] == 0 ? 1u : d[2]});
  };
  FDO_TRY(out["grid"], dims(l.grid, "grid"));
  FDO_TRY(out["block"], dims(l.block, "block"));
  return out;
}

} // namespace

extern "C" {

int fdo_call_json(fdo_conn* conn, const char* method, const char* params_json, char** result_json,
                  fdo_error** err) {
  return guarded(err, [&]() -> int {
    if (conn == nullptr) return null_arg(err, "fdo_call_json", "conn");
    if (method == nullptr || *method == '\0') return null_arg(err, "fdo_call_json", "method");
    if (result_json == nullptr) return null_arg(err, "fdo_call_json", "result_json");
    json params = json::object();
    if (params_json != nullptr) {
      params = json::parse(params_json, nullptr, false);
      if (params.is_discarded() || !(params.is_object() || params.is_array()))
        return fail(err, Errc::invalid_argument,
                    "fdo_call_json: params_json is not a JSON object or array");
    }
    return json_out(conn, method, params, result_json, err);
  });
}

int fdo_program_register(fdo_conn* conn, const char* name, const void* ir, size_t ir_size,
                         fdo_ir_format format, char program_id[FDO_KEY_SIZE],
                         char profile_key[FDO_KEY_SIZE], fdo_error** err) {
  return guarded(err, [&]() -> int {
    if (conn == nullptr) return null_arg(err, "fdo_program_register", "conn");
    if (program_id == nullptr) return null_arg(err, "fdo_program_register", "program_id");
    if (ir == nullptr || ir_size == 0)
      return fail(err, Errc::invalid_argument, "fdo_program_register: the IR is empty");
    std::string_view bytes(static_cast<const char*>(ir), ir_size);
    json params = json::object();
    const std::int64_t raw_format = raw_enum(format);
    if (raw_format == FDO_IR_TEXT)
      params["ir"] = std::string(bytes);
    else if (raw_format == FDO_IR_BITCODE)
      params["ir_base64"] = fdo::base64_encode(bytes);
    else
      return fail(err, Errc::invalid_argument,
                  "fdo_program_register: format must be FDO_IR_TEXT or FDO_IR_BITCODE");
    if (name != nullptr) params["name"] = name;
    int rc = -1;
    auto r = call(conn, "program.register", params, err, &rc);
    if (!r) return rc;
    copy_key(*r, "program", program_id);
    copy_key(*r, "profile_key", profile_key);
    return 0;
  });
}

int fdo_execute(fdo_conn* conn, const char* program_id, const fdo_call* call_desc, fdo_value* ret,
                char** stage_json, fdo_error** err) {
  return guarded(err, [&]() -> int {
    if (conn == nullptr) return null_arg(err, "fdo_execute", "conn");
    if (call_desc == nullptr) return null_arg(err, "fdo_execute", "call");
    // The capabilities are read-only after the handshake: no lock needed.
    bool offered = false;
    for (const auto& c : conn->capabilities)
      offered = offered || c == "buffers.memfd";
    const MemfdUse use = (call_desc->flags & FDO_CALL_MEMFD) != 0 ? MemfdUse::all
                         : offered                                ? MemfdUse::large
                                                                  : MemfdUse::never;
    std::vector<fdo::Fd> memfds; // closed here once the request is sent
    auto params = execute_params(program_id, *call_desc, use, memfds);
    if (!params) return fail(err, params.error());
    std::vector<int> raw;
    for (const fdo::Fd& fd : memfds)
      raw.push_back(fd.get());
    int rc = -1;
    auto r = call(conn, "execute", *params, err, &rc, raw);
    if (!r) return rc;
    if ((call_desc->flags & FDO_CALL_COPY_BACK) != 0)
      if (auto copied = copy_back(*r, *call_desc); !copied) return fail(err, copied.error());
    if (ret != nullptr) *ret = decode_value(*r);
    if (stage_json != nullptr)
      *stage_json = dup_string(r->dump(-1, ' ', false, json::error_handler_t::replace));
    return 0;
  });
}

int fdo_execute_gpu(fdo_conn* conn, const char* program_id, const fdo_call* call_desc,
                    const fdo_gpu_launch* launch, char** stage_json, fdo_error** err) {
  return guarded(err, [&]() -> int {
    if (conn == nullptr) return null_arg(err, "fdo_execute_gpu", "conn");
    if (call_desc == nullptr) return null_arg(err, "fdo_execute_gpu", "call");
    if (launch == nullptr) return null_arg(err, "fdo_execute_gpu", "launch");
    if ((call_desc->flags & FDO_CALL_MEMFD) != 0)
      return fail(err, Errc::invalid_argument,
                  "fdo_execute_gpu: FDO_CALL_MEMFD: fdod takes no memfd buffers for GPU kernels");
    std::vector<fdo::Fd> memfds; // none: GPU buffers travel inline
    auto params = execute_params(program_id, *call_desc, MemfdUse::never, memfds);
    if (!params) return fail(err, params.error());
    auto launch_params = gpu_launch_params(*launch);
    if (!launch_params) return fail(err, launch_params.error());
    params->update(*launch_params);
    int rc = -1;
    auto r = call(conn, "execute", *params, err, &rc, {});
    if (!r) return rc;
    if ((call_desc->flags & FDO_CALL_COPY_BACK) != 0)
      if (auto copied = copy_back(*r, *call_desc); !copied) return fail(err, copied.error());
    if (stage_json != nullptr)
      *stage_json = dup_string(r->dump(-1, ' ', false, json::error_handler_t::replace));
    return 0;
  });
}

int fdo_profile_get(fdo_conn* conn, const char* profile_key, int64_t version, char** out,
                    fdo_error** err) {
  return guarded(err, [&]() -> int {
    if (conn == nullptr) return null_arg(err, "fdo_profile_get", "conn");
    if (out == nullptr) return null_arg(err, "fdo_profile_get", "json");
    if (!valid_key(profile_key))
      return fail(err, Errc::invalid_argument,
                  "fdo_profile_get: profile key must be 64 lowercase hex digits");
    if (version < 0)
      return fail(err, Errc::invalid_argument, "fdo_profile_get: version must be 0 or more");
    json params = {{"profile_key", profile_key}};
    if (version > 0) params["version"] = version;
    return json_out(conn, "profile.get", params, out, err);
  });
}

int fdo_profile_history(fdo_conn* conn, const char* profile_key, char** out, fdo_error** err) {
  return guarded(err, [&]() -> int {
    if (conn == nullptr) return null_arg(err, "fdo_profile_history", "conn");
    if (out == nullptr) return null_arg(err, "fdo_profile_history", "json");
    if (!valid_key(profile_key))
      return fail(err, Errc::invalid_argument,
                  "fdo_profile_history: profile key must be 64 lowercase hex digits");
    return json_out(conn, "profile.history", {{"profile_key", profile_key}}, out, err);
  });
}

} // extern "C"
