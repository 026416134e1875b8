#include "fdo/util/base64.h"

#include <llvm/Support/Base64.h>
#include <llvm/Support/Error.h>
#include <vector>

namespace fdo {

std::string base64_encode(std::string_view bytes) {
  return llvm::encodeBase64(bytes);
}

Expected<std::string> base64_decode(std::string_view text) {
  std::vector<char> out;
  if (llvm::Error err = llvm::decodeBase64(llvm::StringRef(text.data(), text.size()), out))
    return make_error(Errc::invalid_argument, "invalid base64: " + llvm::toString(std::move(err)));
  return std::string(out.begin(), out.end());
}

} // namespace fdo
