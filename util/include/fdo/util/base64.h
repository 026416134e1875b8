// Base64 (RFC 4648) over LLVM's implementation, in the project's error model.
#pragma once

#include "fdo/util/expected.h"

#include <string>
#include <string_view>

namespace fdo {

std::string base64_encode(std::string_view bytes);
Expected<std::string> base64_decode(std::string_view text);

} // namespace fdo
