// `fdoctl run` arguments: --arg texts typed by the entry's parameter types
// (as program.register reports them: i1..i64, float, double, ptr) and
// --buffer specs, turned into execute's "args" and "buffers" params.
//
// Pointer parameters take "@N", the N-th --buffer (0-based). Buffer specs:
//   TYPE:v1,v2,...     elements (TYPE: i8 u8 i16 u16 i32 u32 i64 u64 f32 f64)
//   TYPE:zeros=N       N zero elements
//   u8:text=STRING     the UTF-8 bytes of STRING (sent base64)
//   TYPE:file=PATH     the raw little-endian bytes of a file (sent base64)
#pragma once

#include "fdo/util/expected.h"

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace fdo::ctl {

// One --buffer spec -> an entry of execute's "buffers" ({"type", "data"} |
// {"type", "length"} | {"type", "base64"}). Errors name the spec and what is
// wrong (invalid_argument; io for an unreadable file).
Expected<nlohmann::json> parse_buffer_spec(std::string_view spec);

// One --arg for a parameter of type `param_type`. Integers: decimal or 0x hex,
// within the signed or unsigned range of the width (like fdod); i1 also takes
// true/false. Floats: anything strtod reads whole (inf, nan included).
// `buffer_count` bounds the @N of pointer parameters.
Expected<nlohmann::json> parse_arg(std::string_view text, std::string_view param_type,
                                   std::size_t index, std::size_t buffer_count);

struct CallParams {
  nlohmann::json args = nlohmann::json::array();
  nlohmann::json buffers = nlohmann::json::array();
};

// All --arg and --buffer values for an entry with `param_types`. The number of
// --arg values must equal the number of parameters; every --buffer must be
// used by some @N (an unused buffer is almost always a mistake).
Expected<CallParams> build_call(std::string_view entry, const std::vector<std::string>& param_types,
                                const std::vector<std::string>& arg_texts,
                                const std::vector<std::string>& buffer_specs);

} // namespace fdo::ctl
