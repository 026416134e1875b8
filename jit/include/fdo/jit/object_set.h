// The compiled output of one program as one blob: a single ELF relocatable
// object, or, for a program compiled in partitions (docs/jit.md, "Partitioned
// compiles"), several objects in a small container the loader links into one
// program. The cache, the memfd transport and the store carry the blob as
// opaque bytes; only the compile side packs it and only the loader unpacks it.
//
// Container layout (little endian): the 8 bytes "FDOOBJS1", a u32 count (2 or
// more), count u64 sizes, then the objects back to back. Anything else that
// does not start with the magic is taken for a single object.
#pragma once

#include "fdo/util/expected.h"

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace fdo::jit {

inline constexpr std::string_view kObjectSetMagic = "FDOOBJS1";

// One object comes back unchanged (no container); several are packed.
std::string pack_objects(std::span<const std::string> objects);

// The objects of a blob, as views into it: one for a plain object. A
// container whose count or sizes do not add up to its length exactly, or
// that holds an empty object, is Errc::corrupt.
Expected<std::vector<std::string_view>> unpack_objects(std::string_view blob);

} // namespace fdo::jit
