#include "fdo/cache/memory_key_store.h"

#include "fdo/cache/keys.h"
#include "fdo/util/hash.h"

namespace fdo::cache {

Expected<std::optional<std::string>> MemoryKeyStore::lookup_profile_key(const std::string& ik) {
  std::lock_guard lock(mu_);
  calls_.lookup_profile_key++;
  if (auto it = ik_to_pk_.find(ik); it != ik_to_pk_.end())
    return std::optional<std::string>(it->second);
  return std::optional<std::string>();
}

Status MemoryKeyStore::put_profile_key(const std::string& ik, const std::string& pk) {
  if (!is_hex_key(ik))
    return make_error(Errc::invalid_argument,
                      "profile key mapping: \"" + ik.substr(0, 100) + "\" is not an initial key");
  std::lock_guard lock(mu_);
  calls_.put_profile_key++;
  ik_to_pk_[ik] = pk;
  return ok();
}

Expected<std::optional<std::string>> MemoryKeyStore::lookup_virtual_key(const std::string& ck) {
  std::lock_guard lock(mu_);
  calls_.lookup_virtual_key++;
  if (auto it = ck_to_vk_.find(ck); it != ck_to_vk_.end())
    return std::optional<std::string>(it->second);
  return std::optional<std::string>();
}

Status MemoryKeyStore::put_virtual_key(const std::string& ck, const std::string& vk) {
  if (!is_cache_key(ck) || !is_virtual_key(vk))
    return make_error(Errc::invalid_argument, "virtual key mapping: \"" + ck.substr(0, 100) +
                                                  "\" -> \"" + vk.substr(0, 100) +
                                                  "\" is not CK -> VK");
  std::lock_guard lock(mu_);
  calls_.put_virtual_key++;
  ck_to_vk_[ck] = vk;
  return ok();
}

Expected<ProfileRef> MemoryKeyStore::current_profile(const std::string& pk) {
  std::lock_guard lock(mu_);
  calls_.current_profile++;
  if (auto it = profiles_.find(pk); it != profiles_.end()) return it->second;
  return no_profile(pk);
}

std::int64_t MemoryKeyStore::set_profile(const std::string& pk, ProfileDoc doc) {
  std::lock_guard lock(mu_);
  ProfileRef& ref = profiles_[pk];
  ref.pk = pk;
  ref.version += 1;
  ref.digest = profile_digest(doc);
  ref.doc = std::make_shared<const ProfileDoc>(std::move(doc));
  return ref.version;
}

MemoryKeyStore::Calls MemoryKeyStore::calls() const {
  std::lock_guard lock(mu_);
  return calls_;
}

std::map<std::string, std::string> MemoryKeyStore::profile_keys() const {
  std::lock_guard lock(mu_);
  return ik_to_pk_;
}

std::map<std::string, std::string> MemoryKeyStore::virtual_keys() const {
  std::lock_guard lock(mu_);
  return ck_to_vk_;
}

} // namespace fdo::cache
