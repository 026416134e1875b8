#include "fdo/cache/memory_tier.h"

#include "bounded.h"

#include <list>
#include <mutex>
#include <unordered_map>

namespace fdo::cache {

namespace {

struct Node {
  std::shared_ptr<const Entry> entry;
  std::uint64_t size = 0;
  std::uint64_t refs = 0; // outstanding pins (one per lookup/insert; handle copies share one)
  bool marked = false;    // marked for eviction, kept alive by refs
  bool detached = false;  // no longer in the index (replaced or removed) but still referenced
  std::list<Node*>::iterator lru_pos; // valid while !marked && !detached
};

constexpr std::size_t kRecentlyEvictedKeys = 4096;

} // namespace

struct MemoryTier::State {
  explicit State(std::uint64_t budget) : evicted(kRecentlyEvictedKeys) {
    stats.budget_bytes = budget;
  }

  std::mutex mu;
  std::unordered_map<std::string, std::shared_ptr<Node>> index;
  std::list<Node*> lru; // front = most recently used; unmarked indexed nodes only
  MemoryTierStats stats;
  detail::RecentKeys evicted;

  // --- all below with mu held ---

  void hold(Node& n) {
    n.marked = true;
    stats.held_entries++;
    stats.held_bytes += n.size;
  }
  void unhold(Node& n) {
    stats.held_entries--;
    stats.held_bytes -= n.size;
  }

  // Marks the node for eviction: it leaves the LRU and the live byte count; it
  // is freed now if unreferenced, otherwise when its last handle goes away.
  // `key` is a copy: erasing the node destroys the string it would refer to.
  void mark(std::string key, Node& n) {
    lru.erase(n.lru_pos);
    stats.entries--;
    stats.bytes -= n.size;
    stats.evictions++;
    evicted.add(key);
    if (n.refs == 0) {
      index.erase(key); // destroys n
      return;
    }
    hold(n);
    stats.deferred_frees++;
  }

  void enforce_budget() {
    while (stats.bytes > stats.budget_bytes && !lru.empty()) {
      Node* victim = lru.back();
      mark(victim->entry->key, *victim);
    }
  }

  void release(const std::shared_ptr<Node>& n) {
    std::lock_guard lock(mu);
    if (--n->refs != 0 || !n->marked) return;
    unhold(*n);
    if (!n->detached) {
      auto it = index.find(n->entry->key);
      if (it != index.end() && it->second == n) index.erase(it);
    }
  }
};

namespace {

// The control block of every EntryRef: dropping the last copy of a handle
// releases one reference on the node.
struct Pin {
  Pin(std::shared_ptr<MemoryTier::State> s, std::shared_ptr<Node> n)
      : state(std::move(s)), node(std::move(n)) {}
  ~Pin() { state->release(node); }
  std::shared_ptr<MemoryTier::State> state;
  std::shared_ptr<Node> node;
};

// With state->mu held.
EntryRef pin(const std::shared_ptr<MemoryTier::State>& state, const std::shared_ptr<Node>& node) {
  node->refs++;
  auto p = std::make_shared<Pin>(state, node);
  const Entry* raw = node->entry.get();
  return EntryRef(std::shared_ptr<const Entry>(std::move(p), raw));
}

} // namespace

Expected<std::unique_ptr<MemoryTier>> MemoryTier::create(std::uint64_t budget_bytes) {
  return std::unique_ptr<MemoryTier>(new MemoryTier(std::make_shared<State>(budget_bytes)));
}

MemoryTier::MemoryTier(std::shared_ptr<State> state) : state_(std::move(state)) {}
MemoryTier::~MemoryTier() = default;

EntryRef MemoryTier::lookup(const std::string& key) {
  State& s = *state_;
  std::lock_guard lock(s.mu);
  auto it = s.index.find(key);
  if (it == s.index.end()) {
    s.stats.misses++;
    return {};
  }
  s.stats.hits++;
  std::shared_ptr<Node> node = it->second;
  if (node->marked) {
    // A running stage still held it; a new lookup brings it back to life.
    node->marked = false;
    s.unhold(*node);
    s.lru.push_front(node.get());
    node->lru_pos = s.lru.begin();
    s.stats.entries++;
    s.stats.bytes += node->size;
    s.stats.unmarked++;
  } else {
    s.lru.splice(s.lru.begin(), s.lru, node->lru_pos);
  }
  EntryRef ref = pin(state_, node);
  s.enforce_budget();
  return ref;
}

EntryRef MemoryTier::insert(std::shared_ptr<const Entry> entry) {
  State& s = *state_;
  auto node = std::make_shared<Node>();
  node->size = entry->size_bytes();
  node->entry = std::move(entry);
  const std::string& key = node->entry->key;

  std::lock_guard lock(s.mu);
  if (auto it = s.index.find(key); it != s.index.end()) {
    Node& old = *it->second;
    if (!old.marked) {
      s.lru.erase(old.lru_pos);
      s.stats.entries--;
      s.stats.bytes -= old.size;
      if (old.refs != 0) s.hold(old);
    }
    if (old.refs != 0)
      old.detached = true; // its holders keep it; the index forgets it
    else if (old.marked)
      s.unhold(old);
    s.index.erase(it);
  }
  s.lru.push_front(node.get());
  node->lru_pos = s.lru.begin();
  s.stats.entries++;
  s.stats.bytes += node->size;
  s.stats.inserts++;
  s.index.emplace(key, node);
  EntryRef ref = pin(state_, node);
  s.enforce_budget();
  return ref;
}

std::size_t MemoryTier::evict_prefix(std::string_view prefix) {
  State& s = *state_;
  std::lock_guard lock(s.mu);
  std::vector<std::pair<std::string, Node*>> victims;
  for (auto& [key, node] : s.index)
    if (!node->marked && key.compare(0, prefix.size(), prefix) == 0)
      victims.emplace_back(key, node.get());
  for (auto& [key, node] : victims)
    s.mark(key, *node);
  return victims.size();
}

bool MemoryTier::contains(const std::string& key) const {
  std::lock_guard lock(state_->mu);
  return state_->index.count(key) != 0;
}

bool MemoryTier::is_marked(const std::string& key) const {
  std::lock_guard lock(state_->mu);
  auto it = state_->index.find(key);
  return it != state_->index.end() && it->second->marked;
}

std::uint64_t MemoryTier::references(const std::string& key) const {
  std::lock_guard lock(state_->mu);
  auto it = state_->index.find(key);
  return it == state_->index.end() ? 0 : it->second->refs;
}

bool MemoryTier::was_evicted(const std::string& key) const {
  std::lock_guard lock(state_->mu);
  return state_->evicted.contains(key);
}

MemoryTierStats MemoryTier::stats() const {
  std::lock_guard lock(state_->mu);
  return state_->stats;
}

} // namespace fdo::cache
