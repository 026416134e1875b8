// The disk tier: one checksummed file per entry under
//   <root>/objects/<first 2 hex of key>/<key>.obj
// written atomically (temp file, fsync, rename, directory fsync). A file that
// is truncated, corrupt, garbage, or names another key or compiler is a miss:
// it is removed and counted, never returned. A byte budget is kept by evicting
// the least recently used files (last use = file mtime, touched on every hit,
// so the order survives a restart). One process owns a root at a time.
// docs/cache.md describes the file format byte by byte.
#pragma once

#include "fdo/cache/entry.h"
#include "fdo/util/expected.h"
#include "fdo/util/fd.h"

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace fdo::cache {

inline constexpr char kEntryMagic[8] = {'F', 'D', 'O', 'C', 'A', 'C', 'H', 'E'};
inline constexpr std::uint32_t kEntryFormatVersion = 1;
inline constexpr std::uint32_t kEntryHeaderSize = 80;

// The on-disk form of an entry (exposed for tests and tools).
std::string encode_entry(const Entry& entry);
// Errc::corrupt naming the first problem found (magic, version, lengths,
// checksum, key, info) for anything that is not a whole, intact entry.
Expected<Entry> decode_entry(std::string_view bytes);

struct DiskTierConfig {
  std::string root; // created if missing
  std::uint64_t budget_bytes = std::uint64_t(4) << 30;
  Durability durability = Durability::fsync;
  std::uint64_t max_entry_bytes = std::uint64_t(1) << 30; // larger files are corrupt by definition
};

struct DiskTierStats {
  std::uint64_t budget_bytes = 0;
  std::uint64_t entries = 0;
  std::uint64_t bytes = 0; // file sizes of indexed entries
  std::uint64_t hits = 0;
  std::uint64_t misses = 0;
  std::uint64_t corrupt = 0;     // files that failed validation (removed)
  std::uint64_t read_errors = 0; // files that could not be read (left in place)
  std::uint64_t stores = 0;
  std::uint64_t store_failures = 0;
  std::uint64_t skipped_too_large = 0; // entries larger than the whole budget
  std::uint64_t evictions = 0;
  std::uint64_t stray_files_removed = 0; // temp files left by a crash, removed at open
};

enum class LoadStatus { hit, miss, corrupt };
std::string_view to_string(LoadStatus status);

struct LoadResult {
  LoadStatus status = LoadStatus::miss;
  std::shared_ptr<const Entry> entry; // set on hit
  std::string problem;                // why, on corrupt (and on unreadable misses)
};

class DiskTier {
public:
  // Creates <root>/objects, removes stray temp files and indexes existing
  // entries (headers are checked lazily, at load).
  static Expected<std::unique_ptr<DiskTier>> open(DiskTierConfig config);
  ~DiskTier();
  DiskTier(const DiskTier&) = delete;
  DiskTier& operator=(const DiskTier&) = delete;

  // expected_identity: when non-empty, an entry compiled under another
  // compiler identity is treated as corrupt (IK embeds the identity, so such a
  // file does not belong under this name).
  LoadResult load(const std::string& key, std::string_view expected_identity = {});
  Status store(const Entry& entry);
  // Indexed (the file is believed to exist; load() decides whether it is valid).
  bool contains(const std::string& key) const;
  // Marks key most recently used in the index (no I/O): the caller served it
  // from memory, so its file should not be the next eviction victim.
  void note_use(const std::string& key);
  // Indexed keys of one program (all start with its IK), most recently used first.
  std::vector<std::string> keys_for_ik(std::string_view ik) const;
  std::size_t evict_prefix(std::string_view prefix);
  bool was_evicted(const std::string& key) const;
  std::string path_for(const std::string& key) const;
  const std::string& root() const;
  DiskTierStats stats() const;

private:
  struct Impl;
  explicit DiskTier(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

} // namespace fdo::cache
