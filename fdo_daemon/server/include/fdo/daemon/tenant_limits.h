// Per-tenant admission for the socket server: how many connections and how
// many work requests in flight each peer uid may hold at once, and how many
// bytes its connections may hold (unfinished request lines, replies not yet
// sent), so one tenant cannot take every fd, every handler thread or the
// daemon's memory from the others.
//
// Thread-safe: the server admits on its io thread while handler threads give
// their slot back the moment a handler returns. The lock covers a map lookup
// and is never held across anything else.
#pragma once

#include "fdo/util/expected.h"

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string_view>
#include <sys/types.h>
#include <unordered_map>

namespace fdo::daemon {

enum class TenantResource {
  connection,      // an open connection (max_connections_per_uid)
  inflight_request // a work request queued for or running on a handler thread
                   // (max_inflight_per_uid)
};
// The configuration key that bounds `r`: "max_connections_per_uid", "max_inflight_per_uid".
std::string_view limit_key(TenantResource r);

// 0 = no limit.
struct TenantQuota {
  unsigned max_connections = 64;
  unsigned max_inflight = 16;
  std::uint64_t max_buffered_bytes = 0; // max_buffered_bytes_per_uid

  unsigned limit(TenantResource r) const {
    return r == TenantResource::connection ? max_connections : max_inflight;
  }
};

class TenantLimits {
public:
  // One unit of a resource held by a uid; destroying (or reset()) gives it
  // back. Move-only. Must not outlive the TenantLimits that issued it.
  class Lease {
  public:
    Lease() = default;
    Lease(Lease&& other) noexcept;
    Lease& operator=(Lease&& other) noexcept;
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() { reset(); }

    void reset();
    bool held() const { return owner_ != nullptr; }
    uid_t uid() const { return uid_; }
    TenantResource resource() const { return resource_; }

  private:
    friend class TenantLimits;
    Lease(TenantLimits* owner, uid_t uid, TenantResource r)
        : owner_(owner), uid_(uid), resource_(r) {}

    TenantLimits* owner_ = nullptr;
    uid_t uid_ = 0;
    TenantResource resource_ = TenantResource::connection;
  };

  explicit TenantLimits(TenantQuota quota) : quota_(quota) {}
  TenantLimits(const TenantLimits&) = delete;
  TenantLimits& operator=(const TenantLimits&) = delete;

  // A unit of `r` for `uid`, or Errc::resource_exhausted (the message names
  // the uid, the limit's key and its value) when the uid already holds its
  // quota. No uid is exempt. Units are counted under a zero (no) limit too,
  // so that a limit set later sees what is already held.
  Expected<Lease> acquire(uid_t uid, TenantResource r);

  // Later acquisitions see the new quota; units already held are kept (a
  // lowered limit is reached again as they are given back).
  void set_quota(TenantQuota quota);
  TenantQuota quota() const;

  // Bytes held by `uid`'s connections. charge_bytes() with Admission::check
  // refuses (charging nothing) when the uid would pass max_buffered_bytes:
  // Errc::resource_exhausted naming the uid, the key and the figures;
  // Admission::always charges regardless (a reply, which must be kept).
  enum class Admission { check, always };
  Status charge_bytes(uid_t uid, std::uint64_t bytes, Admission admission);
  void release_bytes(uid_t uid, std::uint64_t bytes);
  std::uint64_t bytes_held(uid_t uid) const;

  // Units of `r` that `uid` holds now.
  unsigned held(uid_t uid, TenantResource r) const;
  // Uids holding anything (an entry is dropped when its last unit is given back).
  std::size_t tenants() const;

private:
  struct Held {
    unsigned connections = 0;
    unsigned inflight = 0;
    std::uint64_t bytes = 0;
    bool empty() const { return connections == 0 && inflight == 0 && bytes == 0; }
    unsigned& of(TenantResource r) {
      return r == TenantResource::connection ? connections : inflight;
    }
  };
  void release(uid_t uid, TenantResource r);

  mutable std::mutex mu_;
  TenantQuota quota_;
  std::unordered_map<uid_t, Held> held_;
};

} // namespace fdo::daemon
