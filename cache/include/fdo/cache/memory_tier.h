// The memory tier, with the semantics of TensorFlow's TPU CompiledSubgraph
// cache: entries are reference counted; when the live bytes exceed the budget
// the least recently used entries are marked for eviction; a marked entry that
// a running stage still holds is not freed until the last handle is released,
// and a lookup of a marked entry un-marks it (it becomes most recently used).
#pragma once

#include "fdo/cache/entry.h"
#include "fdo/util/expected.h"

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace fdo::cache {

struct MemoryTierStats {
  std::uint64_t budget_bytes = 0;
  std::uint64_t entries = 0;      // indexed and not marked
  std::uint64_t bytes = 0;        // bytes of those entries; kept <= budget_bytes
  std::uint64_t held_entries = 0; // marked or replaced but still referenced by a stage
  std::uint64_t held_bytes = 0;
  std::uint64_t hits = 0;
  std::uint64_t misses = 0;
  std::uint64_t inserts = 0;
  std::uint64_t evictions = 0;      // entries marked for eviction (budget or evict_prefix)
  std::uint64_t deferred_frees = 0; // evictions whose free waited for a release
  std::uint64_t unmarked = 0;       // marked entries rescued by a lookup
};

class MemoryTier {
public:
  // budget_bytes 0 turns caching off: an entry stays only while a reference
  // to it is held, and is freed at the last release.
  static Expected<std::unique_ptr<MemoryTier>> create(std::uint64_t budget_bytes);
  ~MemoryTier();
  MemoryTier(const MemoryTier&) = delete;
  MemoryTier& operator=(const MemoryTier&) = delete;

  // A referenced handle, or an empty one on a miss. Bumps the entry to most
  // recently used and un-marks it if it was marked for eviction.
  EntryRef lookup(const std::string& key);
  // Inserts (replacing any entry under the same key; a replaced entry that is
  // still referenced lives on until released) and returns a referenced handle.
  EntryRef insert(std::shared_ptr<const Entry> entry);
  // Marks every entry whose key starts with `prefix` for eviction. Returns how many.
  std::size_t evict_prefix(std::string_view prefix);

  // Introspection (tests, explain): present in the index (marked or not)?
  bool contains(const std::string& key) const;
  bool is_marked(const std::string& key) const;
  // Live handles' references to the indexed entry under key (0 if absent).
  std::uint64_t references(const std::string& key) const;
  // True if key was evicted recently (bounded memory of the last few thousand keys).
  bool was_evicted(const std::string& key) const;
  MemoryTierStats stats() const;

  struct State; // shared with outstanding handles so they may outlive the tier

private:
  explicit MemoryTier(std::shared_ptr<State> state);
  std::shared_ptr<State> state_;
};

} // namespace fdo::cache
