// The durable local spool of store writes fdod acknowledged while the profile
// store was unavailable (docs/fleet.md, "When the profile store is down"): one
// SQLite file in the state dir (synchronous=FULL, so an entry is on disk
// before push() returns), replayed oldest first by StoreFallback.
//
// Besides the queue it keeps the "dead" profile versions: provisional
// versions written while the store was down that will never exist in the
// store (their write conflicted on replay, or the cap dropped it), so rows
// and writes that build on them are dropped instead of landing on another
// host's version of the same number.
//
// Thread safety: every member may be called from any thread; calls take turns
// on one connection.
#pragma once

#include "fdo/util/enum_names.h"
#include "fdo/util/expected.h"

#include <cstdint>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace fdo::daemon {

enum class SpoolKind { feedback, profile_write, profile_key, virtual_key, program };
inline constexpr EnumNames<SpoolKind, 5> kSpoolKindNames{
    {{{SpoolKind::feedback, "feedback"},
      {SpoolKind::profile_write, "profile_write"},
      {SpoolKind::profile_key, "profile_key"},
      {SpoolKind::virtual_key, "virtual_key"},
      {SpoolKind::program, "program"}}}};
std::string_view to_string(SpoolKind kind);

struct SpoolEntry {
  std::int64_t seq = 0; // order of acknowledgement
  SpoolKind kind = SpoolKind::feedback;
  std::string key;     // profile_write: the profile key; feedback: the batch id
  nlohmann::json body; // what to replay (store_fallback.cpp writes and reads it)
  std::uint64_t bytes = 0;
};

struct SpoolCounts {
  std::uint64_t feedback_batches = 0;
  std::uint64_t profile_writes = 0;
  std::uint64_t other = 0; // key mappings and program rows
  std::uint64_t bytes = 0;
  std::uint64_t entries() const { return feedback_batches + profile_writes + other; }
};

class StoreSpool {
public:
  // Opens (creating) the spool at `path`. A file that is not a spool is
  // refused with an error naming it, untouched.
  static Expected<StoreSpool> open(const std::string& path, std::uint64_t max_bytes);

  StoreSpool(StoreSpool&&) noexcept;
  StoreSpool& operator=(StoreSpool&&) noexcept;
  ~StoreSpool();

  const std::string& path() const;

  // Appends an entry, durably. When the spool would pass its cap, the oldest
  // entries are dropped to make room: profile writes first, then key and
  // program entries, then (only when nothing else is left) feedback. The
  // dropped entries are returned so the caller counts and logs them. An entry
  // larger than the whole cap is refused (resource_exhausted), nothing dropped.
  Expected<std::vector<SpoolEntry>> push(SpoolKind kind, std::string_view key,
                                         const nlohmann::json& body);
  // The oldest entry, if any.
  Expected<std::optional<SpoolEntry>> front();
  // Every entry of `kind`, oldest first.
  Expected<std::vector<SpoolEntry>> all(SpoolKind kind);
  // Removes one entry (replayed or dropped).
  Status pop(std::int64_t seq);

  Status mark_dead(std::string_view pk, std::int64_t version);
  Expected<bool> is_dead(std::string_view pk, std::int64_t version);
  // Forgets the dead versions (the queue is empty: nothing builds on them).
  Status clear_dead();

  SpoolCounts counts() const;

  struct Impl;

private:
  explicit StoreSpool(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

} // namespace fdo::daemon
