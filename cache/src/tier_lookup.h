// A stage's view of the tiers: find an output in memory, then on disk, then
// in the remote tier when one is configured; find an earlier output of the
// same program to serve during a tier-up (local tiers only); put a new output
// into all of them. Disk loads and remote fetches are single-flighted per key,
// so concurrent stages that miss memory read and check one copy once; no lock
// is held across a remote fetch. Owns the local tiers, shares the remote one.
// Thread-safe (the tiers and the load flights lock themselves).
#pragma once

#include "fdo/cache/disk_tier.h"
#include "fdo/cache/memory_tier.h"
#include "fdo/cache/orchestrator.h"
#include "fdo/cache/remote_tier.h"
#include "single_flight.h"

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace fdo::cache::detail {

// What a stage looks for: an output compiled for `ck` under `identity`,
// stored under one of `candidates` (tried in order). A view: the strings
// belong to the caller.
struct Wanted {
  const std::string& ik;
  const std::string& ck;
  const std::string& identity;
  const std::vector<std::string>& candidates;
};

struct CorruptFile {
  std::string key;
  std::string problem; // the failed check, for the explanation
};

struct Found {
  EntryRef entry;                       // empty on a miss
  Outcome source = Outcome::memory_hit; // memory_hit, disk_hit or remote_hit
  std::string key;                      // the candidate it was found under
  std::optional<CorruptFile> corrupt;   // a candidate's file failed validation (and is gone)
  // A candidate's remote entry was unusable (corrupt, another identity, too
  // large), or the remote tier was unavailable (problem says which).
  std::optional<CorruptFile> remote_corrupt;
  std::string remote_unavailable;
};

// Whether a lookup may ask the remote tier (a compile flight's re-check does
// not: only a local flight can have stored the output meanwhile).
enum class RemoteLookup { ask, skip };

// Which tiers remember evicting a key (the tiers keep a bounded memory of it).
enum class EvictedFrom { neither, memory, disk, both };

class TierLookup {
public:
  // `disk` and `remote` may be null: no such tier.
  TierLookup(std::unique_ptr<MemoryTier> memory, std::unique_ptr<DiskTier> disk,
             std::shared_ptr<RemoteTier> remote = nullptr);

  // Memory, then disk, then remote, for each candidate. A remote hit is
  // inserted into memory and stored on disk. Only entries compiled for the
  // wanted CK under the wanted identity count: a stale CK -> VK mapping, or a
  // VK overwritten by a later first stage, is a miss.
  Found find_existing(const Wanted& want, RemoteLookup remote = RemoteLookup::ask);
  // An output of the same program compiled for another CK and under the
  // wanted identity, to serve while the wanted one compiles: the one stored
  // under `last_served` (empty: unknown), else, as after a restart, the most
  // recently used file of this IK on disk.
  EntryRef find_previous(const Wanted& want, const std::string& last_served);
  // Inserts into memory, stores on disk and queues the remote write; a disk
  // failure only logs (the output still serves from memory). Returns the
  // memory tier's handle. `mark` is eviction_mark() from before the compile
  // began: an evict_prefix since then that covers the entry's key (its
  // program was deleted while it compiled) drops it again from the local
  // tiers and skips the remote write, so a compile that outlives its program
  // leaves no object behind; the handle still serves whoever compiled it.
  // An entry already covered by such an eviction when store() begins is not
  // written to disk at all; one that store() writes while an evict_prefix
  // runs is dropped before that evict_prefix returns (it waits for stores
  // that began before it), so no object of a deleted program is on disk once
  // the delete has returned.
  EntryRef store(std::shared_ptr<const Entry> entry, std::uint64_t mark);
  // Counts evict_prefix calls: a compile notes it before it starts.
  std::uint64_t eviction_mark() const;

  EvictedFrom evicted_from(const std::string& key) const;
  // Drops every entry whose key starts with `prefix` from both tiers, and
  // waits for the stores that began before it (whose entries it may have
  // missed) to drop theirs.
  std::size_t evict_prefix(std::string_view prefix);
  // Entries a store() dropped again because their program went meanwhile.
  std::uint64_t dropped_after_evict() const;
  // Stages that waited for another's load of the same file.
  std::uint64_t load_waits() const { return loads_.waits(); }

  MemoryTier& memory() { return *memory_; }
  const MemoryTier& memory() const { return *memory_; }
  DiskTier* disk() { return disk_.get(); }
  const DiskTier* disk() const { return disk_.get(); }
  const RemoteTier* remote() const { return remote_.get(); }

private:
  struct Loaded {
    LoadStatus status = LoadStatus::miss;
    EntryRef entry;
    std::string problem;
    Outcome source = Outcome::disk_hit; // memory_hit when a concurrent load had filled memory
  };
  Loaded load(const std::string& key, const std::string& identity);
  void find_on_disk(const Wanted& want, Found& out);
  void find_remote(const Wanted& want, Found& out);
  struct RemoteLoaded {
    RemoteFetch fetch;
    EntryRef entry;                       // set on a hit
    Outcome source = Outcome::remote_hit; // memory_hit when a concurrent fetch had filled memory
  };
  RemoteLoaded fetch_remote(const std::string& key, const std::string& identity);

  // Whether an evict_prefix after `mark` covers `key` (true, to be safe, when
  // the bounded memory of prefixes no longer reaches back to `mark`).
  bool evicted_since(std::uint64_t mark, std::string_view key) const;
  bool evicted_since_locked(std::uint64_t mark, std::string_view key) const;

  mutable std::mutex evictions_mu_;
  std::condition_variable store_ended_; // a store in flight ended
  std::uint64_t store_tickets_ = 0;     // stores begun so far
  std::set<std::uint64_t> stores_in_flight_;
  std::uint64_t evictions_ = 0;           // evict_prefix calls so far
  std::deque<std::string> recent_evicts_; // the latest prefixes, oldest first
  std::uint64_t dropped_after_evict_ = 0;

  std::unique_ptr<MemoryTier> memory_;
  std::unique_ptr<DiskTier> disk_;
  std::shared_ptr<RemoteTier> remote_;
  SingleFlight<Loaded> loads_;
  SingleFlight<RemoteLoaded> fetches_;
};

} // namespace fdo::cache::detail
