// The order in which waiting jobs are served: tenants take turns (round robin
// over the tenants that have a job waiting), and each tenant's jobs go in
// arrival order. One tenant with a hundred queued jobs delays another's single
// job by at most one job per busy server. Used by the worker pools (waiters for
// a worker) and the socket server (requests waiting for a handler thread).
// Not thread-safe: callers hold their own lock.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>

namespace fdo {

template <class Tenant = std::string> class FairQueue {
public:
  struct Ticket {
    std::uint64_t id = 0;
    Tenant tenant;
  };

  // Enqueues a waiter of `tenant`; returns its ticket id.
  std::uint64_t push(const Tenant& tenant) {
    std::uint64_t id = next_++;
    auto& q = by_tenant_[tenant];
    if (q.empty()) turns_.push_back(tenant);
    q.push_back(id);
    ++size_;
    return id;
  }

  // The waiter whose turn it is: the oldest of the tenant at the head of the rotation.
  std::optional<Ticket> next() const {
    if (turns_.empty()) return std::nullopt;
    const Tenant& t = turns_.front();
    return Ticket{by_tenant_.at(t).front(), t};
  }

  // The oldest waiter of the first tenant in the rotation for which
  // `eligible(tenant)` holds (a tenant at its cap of running jobs is passed
  // over and keeps its place). Serve it with serve().
  template <class Pred> std::optional<Ticket> next_where(Pred eligible) const {
    for (const Tenant& t : turns_)
      if (eligible(t)) return Ticket{by_tenant_.at(t).front(), t};
    return std::nullopt;
  }

  // The waiter `id`, its tenant's oldest, was served: it leaves, and its
  // tenant goes to the back of the rotation.
  void serve(std::uint64_t id, const Tenant& tenant) {
    if (!erase(id, tenant)) return;
    erase_turn(tenant);
    if (by_tenant_.count(tenant)) turns_.push_back(tenant);
  }

  // The waiter `id` was served (or gave up): it leaves, and if it was its
  // tenant's turn, the tenant goes to the back of the rotation.
  void remove(std::uint64_t id, const Tenant& tenant) {
    const bool was_next = !turns_.empty() && turns_.front() == tenant && by_tenant_.count(tenant) &&
                          by_tenant_.at(tenant).front() == id;
    if (!erase(id, tenant)) return;
    if (!by_tenant_.count(tenant)) {
      erase_turn(tenant);
    } else if (was_next) {
      turns_.pop_front();
      turns_.push_back(tenant);
    }
  }

  // The oldest waiter of `tenant` for which `eligible(id)` holds, if any (to
  // serve a waiter out of its tenant's order: a worker pool's foreground job
  // before its tenant's background ones).
  template <class Pred>
  std::optional<std::uint64_t> oldest_where(const Tenant& tenant, Pred eligible) const {
    auto it = by_tenant_.find(tenant);
    if (it == by_tenant_.end()) return std::nullopt;
    for (std::uint64_t id : it->second)
      if (eligible(id)) return id;
    return std::nullopt;
  }

  std::size_t size() const { return size_; }
  std::size_t waiting(const Tenant& tenant) const {
    auto it = by_tenant_.find(tenant);
    return it == by_tenant_.end() ? 0 : it->second.size();
  }
  std::size_t tenants() const { return by_tenant_.size(); }

private:
  // Removes waiter `id`; a tenant left without waiters leaves by_tenant_.
  bool erase(std::uint64_t id, const Tenant& tenant) {
    auto it = by_tenant_.find(tenant);
    if (it == by_tenant_.end()) return false;
    auto& q = it->second;
    for (auto w = q.begin(); w != q.end(); ++w)
      if (*w == id) {
        q.erase(w);
        --size_;
        if (q.empty()) by_tenant_.erase(it);
        return true;
      }
    return false;
  }
  void erase_turn(const Tenant& tenant) {
    for (auto t = turns_.begin(); t != turns_.end(); ++t)
      if (*t == tenant) {
        turns_.erase(t);
        return;
      }
  }

  std::uint64_t next_ = 0;
  std::size_t size_ = 0;
  std::map<Tenant, std::deque<std::uint64_t>> by_tenant_;
  std::deque<Tenant> turns_; // tenants with waiters, whose turn is first at the front
};

} // namespace fdo
