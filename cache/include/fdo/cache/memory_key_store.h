// An in-memory KeyStore: the key maps and versioned profiles in maps. Used by
// tests and benchmarks, and by a daemon run without a profile database.
// Counts every call so tests can check what the orchestrator asked for.
#pragma once

#include "fdo/cache/interfaces.h"

#include <map>
#include <mutex>

namespace fdo::cache {

class MemoryKeyStore : public KeyStore {
public:
  Expected<std::optional<std::string>> lookup_profile_key(const std::string& ik) override;
  Status put_profile_key(const std::string& ik, const std::string& pk) override;
  Expected<std::optional<std::string>> lookup_virtual_key(const std::string& ck) override;
  Status put_virtual_key(const std::string& ck, const std::string& vk) override;
  Expected<ProfileRef> current_profile(const std::string& pk) override;

  // Writes a new version of PK's profile (version = previous + 1); returns it.
  std::int64_t set_profile(const std::string& pk, ProfileDoc doc);

  struct Calls {
    std::uint64_t lookup_profile_key = 0, put_profile_key = 0;
    std::uint64_t lookup_virtual_key = 0, put_virtual_key = 0;
    std::uint64_t current_profile = 0;
  };
  Calls calls() const;
  std::map<std::string, std::string> profile_keys() const;
  std::map<std::string, std::string> virtual_keys() const;

private:
  mutable std::mutex mu_;
  std::map<std::string, std::string> ik_to_pk_;
  std::map<std::string, std::string> ck_to_vk_;
  std::map<std::string, ProfileRef> profiles_;
  Calls calls_;
};

} // namespace fdo::cache
