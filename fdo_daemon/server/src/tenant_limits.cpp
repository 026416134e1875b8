#include "fdo/daemon/tenant_limits.h"

#include <algorithm>
#include <string>
#include <utility>

namespace fdo::daemon {

std::string_view limit_key(TenantResource r) {
  return r == TenantResource::connection ? "max_connections_per_uid" : "max_inflight_per_uid";
}

TenantLimits::Lease::Lease(Lease&& other) noexcept
    : owner_(std::exchange(other.owner_, nullptr)), uid_(other.uid_), resource_(other.resource_) {}

TenantLimits::Lease& TenantLimits::Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    reset();
    owner_ = std::exchange(other.owner_, nullptr);
    uid_ = other.uid_;
    resource_ = other.resource_;
  }
  return *this;
}

void TenantLimits::Lease::reset() {
  if (TenantLimits* owner = std::exchange(owner_, nullptr)) owner->release(uid_, resource_);
}

Expected<TenantLimits::Lease> TenantLimits::acquire(uid_t uid, TenantResource r) {
  unsigned limit = 0;
  unsigned held_now = 0;
  {
    std::lock_guard lk(mu_);
    limit = quota_.limit(r);
    // A refusal means n >= limit >= 1, so no empty entry is left behind.
    unsigned& n = held_[uid].of(r);
    if (limit == 0 || n < limit) {
      ++n;
      return Lease(this, uid, r);
    }
    held_now = n;
  }
  std::string what = r == TenantResource::connection ? "connections open" : "requests in flight";
  return make_error(Errc::resource_exhausted, "uid " + std::to_string(uid) + " already has " +
                                                  std::to_string(held_now) + " " + what + " (" +
                                                  std::string(limit_key(r)) + " = " +
                                                  std::to_string(limit) + ")");
}

void TenantLimits::release(uid_t uid, TenantResource r) {
  std::lock_guard lk(mu_);
  auto it = held_.find(uid);
  if (it == held_.end()) return;
  unsigned& n = it->second.of(r);
  if (n > 0) --n;
  if (it->second.empty()) held_.erase(it);
}

Status TenantLimits::charge_bytes(uid_t uid, std::uint64_t bytes, Admission admission) {
  std::uint64_t limit = 0, held_now = 0;
  {
    std::lock_guard lk(mu_);
    limit = quota_.max_buffered_bytes;
    Held& h = held_[uid];
    if (admission == Admission::always || limit == 0 || h.bytes + bytes <= limit) {
      h.bytes += bytes;
      return ok();
    }
    held_now = h.bytes;
    if (h.empty()) held_.erase(uid);
  }
  return make_error(
      Errc::resource_exhausted,
      "uid " + std::to_string(uid) + "'s connections already hold " + std::to_string(held_now) +
          " bytes of unfinished requests and unsent replies; " + std::to_string(bytes) +
          " more would pass max_buffered_bytes_per_uid (" + std::to_string(limit) + ")");
}

void TenantLimits::release_bytes(uid_t uid, std::uint64_t bytes) {
  std::lock_guard lk(mu_);
  auto it = held_.find(uid);
  if (it == held_.end()) return;
  it->second.bytes -= std::min(bytes, it->second.bytes);
  if (it->second.empty()) held_.erase(it);
}

std::uint64_t TenantLimits::bytes_held(uid_t uid) const {
  std::lock_guard lk(mu_);
  auto it = held_.find(uid);
  return it == held_.end() ? 0 : it->second.bytes;
}

void TenantLimits::set_quota(TenantQuota quota) {
  std::lock_guard lk(mu_);
  quota_ = quota;
}

TenantQuota TenantLimits::quota() const {
  std::lock_guard lk(mu_);
  return quota_;
}

unsigned TenantLimits::held(uid_t uid, TenantResource r) const {
  std::lock_guard lk(mu_);
  auto it = held_.find(uid);
  if (it == held_.end()) return 0;
  Held h = it->second;
  return h.of(r);
}

std::size_t TenantLimits::tenants() const {
  std::lock_guard lk(mu_);
  return held_.size();
}

} // namespace fdo::daemon
