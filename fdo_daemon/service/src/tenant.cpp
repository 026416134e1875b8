#include "fdo/daemon/tenant.h"

#include "fdo/util/hash.h"

namespace fdo::daemon {

ProfileSharing profile_sharing(bool share_profiles_across_tenants) {
  return share_profiles_across_tenants ? ProfileSharing::shared : ProfileSharing::per_tenant;
}

TenantScope TenantScope::of(std::int64_t uid, ProfileSharing sharing) {
  if (sharing == ProfileSharing::shared) return TenantScope();
  return TenantScope("uid:" + std::to_string(uid));
}

std::string TenantScope::profile_key(std::string_view canonical_pk) const {
  if (scope_.empty()) return std::string(canonical_pk);
  // Unchanged since the first release: scoped profile keys in existing stores stay valid.
  Hasher h;
  h.update_field("fdo.pk.scope.v1").update_field(scope_).update_field(canonical_pk);
  return h.hex();
}

} // namespace fdo::daemon
