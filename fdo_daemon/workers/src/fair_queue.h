// The order in which waiting jobs get workers: tenants take turns (round
// robin over the tenants that have a job waiting), and each tenant's jobs go
// in arrival order. One tenant with a hundred queued jobs delays another's
// single job by at most one job per busy worker. Not thread-safe: the pool
// calls it under its lock.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>

namespace fdo::daemon::detail {

class FairQueue {
public:
  struct Ticket {
    std::uint64_t id = 0;
    std::string tenant;
  };

  // Enqueues a waiter of `tenant`; returns its ticket id.
  std::uint64_t push(const std::string& tenant) {
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
    const std::string& t = turns_.front();
    return Ticket{by_tenant_.at(t).front(), t};
  }

  // The waiter `id` was served (or gave up): it leaves, and if it was its
  // tenant's turn, the tenant goes to the back of the rotation.
  void remove(std::uint64_t id, const std::string& tenant) {
    auto it = by_tenant_.find(tenant);
    if (it == by_tenant_.end()) return;
    auto& q = it->second;
    for (auto w = q.begin(); w != q.end(); ++w)
      if (*w == id) {
        bool was_next = w == q.begin() && !turns_.empty() && turns_.front() == tenant;
        q.erase(w);
        --size_;
        if (q.empty()) {
          by_tenant_.erase(it);
          erase_turn(tenant);
        } else if (was_next) {
          turns_.pop_front();
          turns_.push_back(tenant);
        }
        return;
      }
  }

  std::size_t size() const { return size_; }
  std::size_t waiting(const std::string& tenant) const {
    auto it = by_tenant_.find(tenant);
    return it == by_tenant_.end() ? 0 : it->second.size();
  }
  std::size_t tenants() const { return by_tenant_.size(); }

private:
  void erase_turn(const std::string& tenant) {
    for (auto t = turns_.begin(); t != turns_.end(); ++t)
      if (*t == tenant) {
        turns_.erase(t);
        return;
      }
  }

  std::uint64_t next_ = 0;
  std::size_t size_ = 0;
  std::map<std::string, std::deque<std::uint64_t>> by_tenant_;
  std::deque<std::string> turns_; // tenants with waiters, whose turn is first at the front
};

} // namespace fdo::daemon::detail
