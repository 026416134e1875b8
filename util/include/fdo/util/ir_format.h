// Telling LLVM bitcode from IR text by its first bytes, without LLVM (fdod
// and fdoctl report a program's format without parsing it).
#pragma once

#include <string_view>

namespace fdo {

// Bitcode starts with 'BC' 0xC0DE, or with the wrapper magic 0x0B17C0DE.
inline bool is_llvm_bitcode(std::string_view bytes) {
  return bytes.starts_with(std::string_view("BC\xC0\xDE", 4)) ||
         bytes.starts_with(std::string_view("\xDE\xC0\x17\x0B", 4));
}

} // namespace fdo
