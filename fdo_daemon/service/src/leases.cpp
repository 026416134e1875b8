#include "fdo/daemon/leases.h"

namespace fdo::daemon {

namespace {
Error no_lease(std::uint64_t id) {
  return make_error(Errc::not_found, "no lease " + std::to_string(id) +
                                         " on this connection (leases belong to the connection "
                                         "that took them and end when it closes)");
}
} // namespace

Expected<LeaseRef> LeaseTable::add(ProgramLease lease, const LeaseLimits& limits) {
  std::lock_guard lk(mu_);
  std::size_t& held = per_connection_[lease.connection];
  if (held >= limits.max_per_connection) {
    if (held == 0) per_connection_.erase(lease.connection);
    return make_error(Errc::resource_exhausted,
                      "this connection already holds " + std::to_string(held) +
                          " leases (the most one connection may hold); release one first");
  }
  lease.id = next_id_++;
  auto ref = std::make_shared<const ProgramLease>(std::move(lease));
  leases_.emplace(ref->id, ref);
  ++held;
  ++granted_;
  return ref;
}

Expected<LeaseRef> LeaseTable::find(std::uint64_t id, uid_t uid, std::uint64_t connection) const {
  std::lock_guard lk(mu_);
  auto it = leases_.find(id);
  if (it == leases_.end() || it->second->uid != uid || it->second->connection != connection)
    return no_lease(id);
  return it->second;
}

Expected<LeaseRef> LeaseTable::release(std::uint64_t id, uid_t uid, std::uint64_t connection) {
  std::lock_guard lk(mu_);
  auto it = leases_.find(id);
  if (it == leases_.end() || it->second->uid != uid || it->second->connection != connection)
    return no_lease(id);
  LeaseRef ref = std::move(it->second);
  leases_.erase(it);
  if (auto c = per_connection_.find(connection); c != per_connection_.end() && --c->second == 0)
    per_connection_.erase(c);
  return ref;
}

std::size_t LeaseTable::release_connection(std::uint64_t connection) {
  std::vector<LeaseRef> dropped; // destroyed after the lock is released
  {
    std::lock_guard lk(mu_);
    if (per_connection_.erase(connection) == 0) return 0;
    for (auto it = leases_.begin(); it != leases_.end();) {
      if (it->second->connection == connection) {
        dropped.push_back(std::move(it->second));
        it = leases_.erase(it);
      } else {
        ++it;
      }
    }
  }
  return dropped.size();
}

std::size_t LeaseTable::size() const {
  std::lock_guard lk(mu_);
  return leases_.size();
}

std::size_t LeaseTable::count_for(uid_t uid) const {
  std::lock_guard lk(mu_);
  std::size_t n = 0;
  for (const auto& [id, l] : leases_)
    n += l->uid == uid ? 1 : 0;
  return n;
}

std::uint64_t LeaseTable::granted() const {
  std::lock_guard lk(mu_);
  return granted_;
}

} // namespace fdo::daemon
