// The program ABI as the socket API sees it: typed JSON arguments and buffers
// turned into the 8-byte argument slots of the JIT's entry thunks
// (`void __fdo_thunk_<name>(uint64_t* args, uint64_t* ret)`, see docs/jit.md),
// and results turned back into JSON. Pure functions, no I/O.
#pragma once

#include "fdo/util/expected.h"

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace fdo::daemon {

enum class ScalarType { i1, i8, i16, i32, i64, f32, f64, ptr, void_ };
std::string_view to_string(ScalarType t);
// Accepts LLVM spellings (i32, float, double, ptr, void) and f32/f64.
Expected<ScalarType> parse_scalar_type(std::string_view s);

struct Signature {
  std::string name;
  ScalarType ret = ScalarType::void_;
  std::vector<ScalarType> params;
};

enum class ElemType { i8, u8, i16, u16, i32, u32, i64, u64, f32, f64 };
std::string_view to_string(ElemType t);
Expected<ElemType> parse_elem_type(std::string_view s);
std::size_t elem_size(ElemType t);

struct Buffer {
  ElemType elem = ElemType::u8;
  std::string bytes; // little-endian element data
};

struct PreparedCall {
  std::vector<std::uint64_t> slots; // one per parameter; pointer slots are filled by the worker
  std::vector<int> buffer_of_param; // index into buffers for pointer params, -1 otherwise
  std::vector<Buffer> buffers;
};

struct CallLimits {
  std::size_t max_buffer_bytes = std::size_t(64) << 20; // all buffers together
};

// args: array with one entry per parameter: a number (or true/false) for
// scalars, {"buffer": i} for pointer parameters. buffers: array of
// {"type": "i64", "data": [..]} | {"type": "u8", "base64": ".."} |
// {"type": "f64", "length": n} (zero-filled) |
// {"type": "f32", "memfd": k [, "length": n]}: the bytes of the request's k-th
// descriptor, read beforehand (memfd_buffers.h) into attached[k]; "length",
// when given, must be its element count. Every attached buffer must be used.
Expected<PreparedCall> prepare_call(const Signature& sig, const nlohmann::json& args,
                                    const nlohmann::json& buffers, const CallLimits& limits = {},
                                    std::span<const std::string> attached = {});

// The return slot as JSON: integers as signed numbers of the return width,
// floats as numbers, void as null.
nlohmann::json decode_return(ScalarType ret, std::uint64_t slot);

enum class BufferEncoding { array, base64 };
nlohmann::json buffer_to_json(const Buffer& buffer, BufferEncoding encoding);

} // namespace fdo::daemon
