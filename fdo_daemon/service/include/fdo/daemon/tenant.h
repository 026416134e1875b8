// Tenancy. The peer's uid (SO_PEERCRED) is the tenant. Unless profiles are
// shared across tenants, a program is keyed under its tenant's scope: the same
// IR from two uids gets two initial keys (program ids) and two profile keys,
// and every method answers "not found" for another tenant's objects.
//
// The scope travels as a field (cache::Program::scope, and here); it never
// touches the program's bytes. docs/keys.md gives its bytes in each key.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace fdo::daemon {

enum class ProfileSharing {
  per_tenant, // default: each uid has its own programs and profiles
  shared,     // share_profiles_across_tenants = true
};

ProfileSharing profile_sharing(bool share_profiles_across_tenants);

class TenantScope {
public:
  // "uid:N" per tenant; the empty (unscoped) scope when profiles are shared.
  static TenantScope of(std::int64_t uid, ProfileSharing sharing);
  // A scope read back from storage (a .prog file).
  static TenantScope from_string(std::string scope) { return TenantScope(std::move(scope)); }
  TenantScope() = default;

  const std::string& str() const { return scope_; }
  bool unscoped() const { return scope_.empty(); }

  // The profile key a program of this scope uses, from the key the compiler
  // derived from its canonical IR (identity for the unscoped scope).
  std::string profile_key(std::string_view canonical_pk) const;

  bool operator==(const TenantScope&) const = default;

private:
  explicit TenantScope(std::string scope) : scope_(std::move(scope)) {}
  std::string scope_;
};

// May `uid` use an object owned by `owner`? Under per_tenant, only its owner.
inline bool may_access(std::int64_t owner, std::int64_t uid, ProfileSharing sharing) {
  return sharing == ProfileSharing::shared || owner == uid;
}

} // namespace fdo::daemon
