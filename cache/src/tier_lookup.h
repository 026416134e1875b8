// A stage's view of the two tiers: find an output in memory, then on disk;
// find an earlier output of the same program to serve during a tier-up; put a
// new output into both. Disk loads are single-flighted per key, so concurrent
// stages that miss memory read and check one file once. Owns both tiers.
// Thread-safe (the tiers and the load flights lock themselves).
#pragma once

#include "fdo/cache/disk_tier.h"
#include "fdo/cache/memory_tier.h"
#include "fdo/cache/orchestrator.h"
#include "single_flight.h"

#include <cstdint>
#include <memory>
#include <optional>
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
  Outcome source = Outcome::memory_hit; // memory_hit or disk_hit
  std::string key;                      // the candidate it was found under
  std::optional<CorruptFile> corrupt;   // a candidate's file failed validation (and is gone)
};

// Which tiers remember evicting a key (the tiers keep a bounded memory of it).
enum class EvictedFrom { neither, memory, disk, both };

class TierLookup {
public:
  // `disk` may be null: no disk tier.
  TierLookup(std::unique_ptr<MemoryTier> memory, std::unique_ptr<DiskTier> disk);

  // Memory, then disk, for each candidate. Only entries compiled for the
  // wanted CK under the wanted identity count: a stale CK -> VK mapping, or a
  // VK overwritten by a later first stage, is a miss.
  Found find_existing(const Wanted& want);
  // An output of the same program compiled for another CK and under the
  // wanted identity, to serve while the wanted one compiles: the one stored
  // under `last_served` (empty: unknown), else, as after a restart, the most
  // recently used file of this IK on disk.
  EntryRef find_previous(const Wanted& want, const std::string& last_served);
  // Inserts into memory and stores on disk; a disk failure only logs (the
  // output still serves from memory). Returns the memory tier's handle.
  EntryRef store(std::shared_ptr<const Entry> entry);

  EvictedFrom evicted_from(const std::string& key) const;
  // Drops every entry whose key starts with `prefix` from both tiers.
  std::size_t evict_prefix(std::string_view prefix);
  // Stages that waited for another's load of the same file.
  std::uint64_t load_waits() const { return loads_.waits(); }

  MemoryTier& memory() { return *memory_; }
  const MemoryTier& memory() const { return *memory_; }
  DiskTier* disk() { return disk_.get(); }
  const DiskTier* disk() const { return disk_.get(); }

private:
  struct Loaded {
    LoadStatus status = LoadStatus::miss;
    EntryRef entry;
    std::string problem;
    Outcome source = Outcome::disk_hit; // memory_hit when a concurrent load had filled memory
  };
  Loaded load(const std::string& key, const std::string& identity);

  std::unique_ptr<MemoryTier> memory_;
  std::unique_ptr<DiskTier> disk_;
  SingleFlight<Loaded> loads_;
};

} // namespace fdo::cache::detail
