// Small bounded containers for the cache's bookkeeping (per-program state,
// recently evicted keys, identity history). Not thread-safe: callers lock.
#pragma once

#include <cstddef>
#include <deque>
#include <list>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>

namespace fdo::cache::detail {

// A map that forgets its least recently used key beyond `capacity` entries, so
// a daemon that sees millions of distinct programs keeps bounded memory.
template <class V> class BoundedLru {
public:
  explicit BoundedLru(std::size_t capacity) : capacity_(capacity == 0 ? 1 : capacity) {}

  // Returns the value (bumped to most recent) or nullptr.
  V* find(const std::string& key) {
    auto it = map_.find(key);
    if (it == map_.end()) return nullptr;
    order_.splice(order_.begin(), order_, it->second.second);
    return &it->second.first;
  }
  // Returns the value for key, default-constructing (and evicting the oldest) if absent.
  V& get_or_create(const std::string& key) {
    if (V* v = find(key)) return *v;
    order_.push_front(key);
    auto [it, inserted] = map_.emplace(key, std::make_pair(V{}, order_.begin()));
    (void)inserted;
    while (map_.size() > capacity_) {
      map_.erase(order_.back());
      order_.pop_back();
    }
    return it->second.first;
  }
  std::size_t size() const { return map_.size(); }

private:
  std::size_t capacity_;
  std::list<std::string> order_; // front = most recent
  std::unordered_map<std::string, std::pair<V, std::list<std::string>::iterator>> map_;
};

// Remembers the last `capacity` keys added (FIFO), e.g. keys recently evicted,
// so a later miss can be explained as "evicted" rather than "never cached".
class RecentKeys {
public:
  explicit RecentKeys(std::size_t capacity) : capacity_(capacity == 0 ? 1 : capacity) {}
  void add(const std::string& key) {
    if (!set_.insert(key).second) return;
    fifo_.push_back(key);
    while (fifo_.size() > capacity_) {
      set_.erase(fifo_.front());
      fifo_.pop_front();
    }
  }
  bool contains(const std::string& key) const { return set_.count(key) != 0; }

private:
  std::size_t capacity_;
  std::deque<std::string> fifo_;
  std::unordered_set<std::string> set_;
};

} // namespace fdo::cache::detail
