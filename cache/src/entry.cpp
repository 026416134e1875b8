#include "fdo/cache/entry.h"

#include "fdo/cache/interfaces.h"

namespace fdo::cache {

nlohmann::json to_json(const EntryInfo& info) {
  return {{"ck", info.ck},
          {"compiler_identity", info.compiler_identity},
          {"pk", info.pk},
          {"profile_version", info.profile_version},
          {"profile_digest", info.profile_digest},
          {"mode", std::string(to_string(info.mode))},
          {"program_hash", info.program_hash},
          {"created_unix_ms", info.created_unix_ms}};
}

std::uint64_t Entry::size_bytes() const {
  // Strings beside the payload are small but counted so that a budget of N
  // bytes is honest even for tiny objects.
  return key.size() + object.size() + metadata.size() + info.ck.size() +
         info.compiler_identity.size() + info.pk.size() + info.profile_digest.size() +
         info.program_hash.size() + sizeof(Entry);
}

ProfileRef no_profile(std::string pk) {
  ProfileRef ref;
  ref.pk = std::move(pk);
  ref.version = 0;
  ref.digest = std::string(no_profile_digest());
  return ref;
}

} // namespace fdo::cache
