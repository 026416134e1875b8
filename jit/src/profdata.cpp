#include "fdo/jit/profdata.h"

#include "llvm_support.h"
#include "pgo.h"

namespace fdo::jit {

Expected<std::string> indexed_profile(const fdo::ProfileDoc& profile) {
  detail::ensure_llvm_initialized();
  auto indexed = detail::write_indexed_profile(profile);
  if (!indexed)
    return detail::to_fdo_error(indexed.takeError(), Errc::invalid_argument, "profdata");
  if (!*indexed)
    return make_error(Errc::invalid_argument, "the profile holds no counts to export as profdata");
  return (*indexed)->getBuffer().str();
}

} // namespace fdo::jit
