#include "fdo/cache/keys.h"
#include "fdo/daemon/tenant.h"
#include "fdo/util/hash.h"

#include <catch2/catch.hpp>

using namespace fdo;
using namespace fdo::daemon;

TEST_CASE("tenant scope: per-tenant scopes differ by uid - shared is unscoped",
          "[service][tenant]") {
  TenantScope a = TenantScope::of(1000, ProfileSharing::per_tenant);
  TenantScope b = TenantScope::of(1001, ProfileSharing::per_tenant);
  TenantScope shared = TenantScope::of(1000, ProfileSharing::shared);
  CHECK(a.str() == "uid:1000");
  CHECK_FALSE(a == b);
  CHECK(shared.unscoped());
  CHECK(shared == TenantScope::of(1001, ProfileSharing::shared));

  std::string pk(64, 'a');
  CHECK(shared.profile_key(pk) == pk);
  CHECK(a.profile_key(pk) != pk);
  CHECK(a.profile_key(pk) != b.profile_key(pk));
  CHECK(is_hex_key(a.profile_key(pk)));
  // Stable across releases: a scoped key in an existing store must stay valid.
  CHECK(a.profile_key(pk) == TenantScope::from_string("uid:1000").profile_key(pk));
}

TEST_CASE("tenant scope: access follows ownership unless shared", "[service][tenant]") {
  CHECK(may_access(5, 5, ProfileSharing::per_tenant));
  CHECK_FALSE(may_access(5, 6, ProfileSharing::per_tenant));
  CHECK(may_access(5, 6, ProfileSharing::shared));
}
