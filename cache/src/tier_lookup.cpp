#include "tier_lookup.h"

#include "fdo/util/log.h"

#include <algorithm>

namespace fdo::cache::detail {

namespace {

// After a restart only the disk knows a program's earlier outputs; a few of
// its newest files are enough to find one that still validates.
constexpr int kPreviousFilesTried = 3;

// Prefix evictions remembered for compiles still running; one older than the
// oldest remembered counts as covering every key (the output is dropped again,
// a later stage compiles it: a miss, never an orphan).
constexpr std::size_t kRecentEvictions = 4096;

// Only entries compiled for the wanted CK under the wanted identity count.
bool usable(const EntryRef& ref, const Wanted& want) {
  return ref && ref->info.ck == want.ck && ref->info.compiler_identity == want.identity;
}

} // namespace

TierLookup::TierLookup(std::unique_ptr<MemoryTier> memory, std::unique_ptr<DiskTier> disk,
                       std::shared_ptr<RemoteTier> remote)
    : memory_(std::move(memory)), disk_(std::move(disk)), remote_(std::move(remote)) {}

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

TierLookup::RemoteLoaded TierLookup::fetch_remote(const std::string& key,
                                                  const std::string& identity) {
  auto result = fetches_.run(key, [&]() -> Expected<RemoteLoaded> {
    RemoteLoaded out;
    // A fetch that finished just before this flight began has filled memory.
    if (EntryRef ref = memory_->lookup(key)) {
      out.fetch.status = RemoteFetchStatus::hit;
      out.entry = std::move(ref);
      out.source = Outcome::memory_hit;
      return out;
    }
    out.fetch = remote_->fetch(key, identity);
    if (out.fetch.status == RemoteFetchStatus::hit) {
      std::shared_ptr<const Entry> entry = std::move(out.fetch.entry);
      out.entry = memory_->insert(entry);
      if (disk_)
        if (auto st = disk_->store(*entry); !st)
          log::warning("cache: " + st.error().describe() + " (remote hit kept in memory only)");
    }
    return out;
  });
  return *result.first; // the work never fails: errors are RemoteFetchStatus values
}

Found TierLookup::find_existing(const Wanted& want, RemoteLookup remote) {
  Found out;
  for (const std::string& key : want.candidates) {
    EntryRef ref = memory_->lookup(key);
    if (usable(ref, want)) {
      // Keep the disk copy of a hot entry from aging out behind the memory tier.
      if (disk_) disk_->note_use(key);
      out.entry = std::move(ref);
      out.source = Outcome::memory_hit;
      out.key = key;
      return out;
    }
  }
  if (disk_) find_on_disk(want, out);
  if (!out.entry && remote_ && remote == RemoteLookup::ask) find_remote(want, out);
  return out;
}

void TierLookup::find_on_disk(const Wanted& want, Found& out) {
  for (const std::string& key : want.candidates) {
    if (!disk_->contains(key)) continue;
    Loaded r = load(key, want.identity);
    if (r.status == LoadStatus::corrupt) {
      out.corrupt = CorruptFile{key, r.problem};
    } else if (r.status == LoadStatus::hit && usable(r.entry, want)) {
      out.entry = std::move(r.entry);
      out.source = r.source;
      out.key = key;
      return;
    }
  }
}

void TierLookup::find_remote(const Wanted& want, Found& out) {
  for (const std::string& key : want.candidates) {
    RemoteLoaded f = fetch_remote(key, want.identity);
    switch (f.fetch.status) {
    case RemoteFetchStatus::hit:
      if (usable(f.entry, want)) {
        out.entry = std::move(f.entry);
        out.source = f.source;
        out.key = key;
        return;
      }
      break;
    case RemoteFetchStatus::miss:
      break;
    case RemoteFetchStatus::unavailable:
      out.remote_unavailable = f.fetch.problem;
      return; // the tier answers the other candidates the same way
    case RemoteFetchStatus::corrupt:
    case RemoteFetchStatus::identity_mismatch:
    case RemoteFetchStatus::too_large:
      out.remote_corrupt = CorruptFile{key, f.fetch.problem};
      break;
    }
  }
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

EntryRef TierLookup::store(std::shared_ptr<const Entry> entry, std::uint64_t mark) {
  // Its program deleted already: served to whoever compiled it, kept nowhere.
  // Else a ticket, which an evict_prefix that begins meanwhile waits for.
  std::uint64_t ticket = 0;
  bool gone = false;
  {
    std::lock_guard lock(evictions_mu_);
    gone = evicted_since_locked(mark, entry->key);
    if (gone)
      dropped_after_evict_++;
    else
      stores_in_flight_.insert(ticket = store_tickets_++);
  }
  EntryRef ref = memory_->insert(entry);
  if (gone) {
    memory_->evict_prefix(entry->key); // freed when the compiler's handle goes
    return ref;
  }
  struct Ended {
    TierLookup& t;
    std::uint64_t ticket;
    ~Ended() {
      std::lock_guard lock(t.evictions_mu_);
      t.stores_in_flight_.erase(ticket);
      t.store_ended_.notify_all();
    }
  } ended{*this, ticket};
  if (disk_)
    if (auto st = disk_->store(*entry); !st)
      log::warning("cache: " + st.error().describe() + " (kept in memory only)");
  // Checked after both local stores: an eviction that came before them is
  // seen here, one that comes after them finds the entry in the tiers.
  if (evicted_since(mark, entry->key)) {
    memory_->evict_prefix(entry->key);
    if (disk_) disk_->evict_prefix(entry->key);
    std::lock_guard lock(evictions_mu_);
    dropped_after_evict_++;
    return ref;
  }
  if (remote_) remote_->store(std::move(entry));
  return ref;
}

std::uint64_t TierLookup::eviction_mark() const {
  std::lock_guard lock(evictions_mu_);
  return evictions_;
}

std::uint64_t TierLookup::dropped_after_evict() const {
  std::lock_guard lock(evictions_mu_);
  return dropped_after_evict_;
}

bool TierLookup::evicted_since(std::uint64_t mark, std::string_view key) const {
  std::lock_guard lock(evictions_mu_);
  return evicted_since_locked(mark, key);
}

bool TierLookup::evicted_since_locked(std::uint64_t mark, std::string_view key) const {
  if (mark >= evictions_) return false;
  if (evictions_ - mark > recent_evicts_.size()) return true;
  for (auto it = recent_evicts_.end() - static_cast<std::ptrdiff_t>(evictions_ - mark);
       it != recent_evicts_.end(); ++it)
    if (key.starts_with(*it)) return true;
  return false;
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
  std::uint64_t begun = 0;
  {
    // Noted before the tiers are swept: a store that misses this note ran
    // before the sweep, which then finds its entry; a store that begins
    // after it writes nothing of the prefix.
    std::lock_guard lock(evictions_mu_);
    evictions_++;
    recent_evicts_.emplace_back(prefix);
    if (recent_evicts_.size() > kRecentEvictions) recent_evicts_.pop_front();
    begun = store_tickets_;
  }
  std::size_t n = memory_->evict_prefix(prefix);
  if (disk_) n += disk_->evict_prefix(prefix);
  // A store that began before the note may write its entry after the sweep;
  // it sees the note afterwards and drops it again. Waited for (no lock held
  // across its I/O), so nothing of the prefix is left once this returns.
  std::unique_lock lock(evictions_mu_);
  store_ended_.wait(
      lock, [&] { return stores_in_flight_.empty() || *stores_in_flight_.begin() >= begun; });
  return n;
}

} // namespace fdo::cache::detail
