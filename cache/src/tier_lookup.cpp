#include "tier_lookup.h"

#include "fdo/util/log.h"

#include <algorithm>

namespace fdo::cache::detail {

namespace {

// After a restart only the disk knows a program's earlier outputs; a few of
// its newest files are enough to find one that still validates.
constexpr int kPreviousFilesTried = 3;

} // namespace

TierLookup::TierLookup(std::unique_ptr<MemoryTier> memory, std::unique_ptr<DiskTier> disk)
    : memory_(std::move(memory)), disk_(std::move(disk)) {}

TierLookup::Loaded TierLookup::load(const std::string& key, const std::string& identity) {
  auto result = loads_.run(key, [&]() -> Expected<Loaded> {
    Loaded out;
    // A load that finished just before this flight began has filled memory.
    if (EntryRef ref = memory_->lookup(key)) {
      out.status = LoadStatus::hit;
      out.entry = std::move(ref);
      out.source = Outcome::memory_hit;
      return out;
    }
    LoadResult r = disk_->load(key, identity);
    out.status = r.status;
    out.problem = r.problem;
    if (r.status == LoadStatus::hit) out.entry = memory_->insert(std::move(r.entry));
    return out;
  });
  return *result.first; // the work never fails: errors are LoadStatus values
}

Found TierLookup::find_existing(const Wanted& want) {
  Found out;
  auto usable = [&](const EntryRef& ref) {
    return ref && ref->info.ck == want.ck && ref->info.compiler_identity == want.identity;
  };
  for (const std::string& key : want.candidates) {
    EntryRef ref = memory_->lookup(key);
    if (usable(ref)) {
      // Keep the disk copy of a hot entry from aging out behind the memory tier.
      if (disk_) disk_->note_use(key);
      out.entry = std::move(ref);
      out.source = Outcome::memory_hit;
      out.key = key;
      return out;
    }
  }
  if (!disk_) return out;
  for (const std::string& key : want.candidates) {
    if (!disk_->contains(key)) continue;
    Loaded r = load(key, want.identity);
    if (r.status == LoadStatus::corrupt) {
      out.corrupt = CorruptFile{key, r.problem};
    } else if (r.status == LoadStatus::hit && usable(r.entry)) {
      out.entry = std::move(r.entry);
      out.source = r.source;
      out.key = key;
      return out;
    }
  }
  return out;
}

EntryRef TierLookup::find_previous(const Wanted& want, const std::string& last_served) {
  auto other = [&](const EntryRef& ref) {
    return ref && ref->info.ck != want.ck && ref->info.compiler_identity == want.identity;
  };
  if (!last_served.empty()) {
    EntryRef ref = memory_->lookup(last_served);
    if (other(ref)) return ref;
    if (disk_ && disk_->contains(last_served)) {
      Loaded r = load(last_served, want.identity);
      if (other(r.entry)) return r.entry;
    }
  }
  if (!disk_) return {};
  int tries = 0;
  for (const std::string& key : disk_->keys_for_ik(want.ik)) {
    if (std::find(want.candidates.begin(), want.candidates.end(), key) != want.candidates.end())
      continue;
    if (++tries > kPreviousFilesTried) break;
    EntryRef ref = memory_->lookup(key);
    if (!ref) ref = load(key, want.identity).entry;
    if (other(ref)) return ref;
  }
  return {};
}

EntryRef TierLookup::store(std::shared_ptr<const Entry> entry) {
  EntryRef ref = memory_->insert(entry);
  if (disk_)
    if (auto st = disk_->store(*entry); !st)
      log::warning("cache: " + st.error().describe() + " (kept in memory only)");
  return ref;
}

EvictedFrom TierLookup::evicted_from(const std::string& key) const {
  bool mem = memory_->was_evicted(key);
  bool dsk = disk_ && disk_->was_evicted(key);
  if (mem && dsk) return EvictedFrom::both;
  if (mem) return EvictedFrom::memory;
  if (dsk) return EvictedFrom::disk;
  return EvictedFrom::neither;
}

std::size_t TierLookup::evict_prefix(std::string_view prefix) {
  std::size_t n = memory_->evict_prefix(prefix);
  if (disk_) n += disk_->evict_prefix(prefix);
  return n;
}

} // namespace fdo::cache::detail
