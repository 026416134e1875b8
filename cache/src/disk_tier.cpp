#include "fdo/cache/disk_tier.h"

#include "bounded.h"
#include "fdo/cache/keys.h"
#include "fdo/util/enum_names.h"
#include "fdo/util/hash.h"
#include "fdo/util/log.h"
#include "fdo/util/wire.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <list>
#include <map>
#include <mutex>
#include <sys/stat.h>
#include <unistd.h>

namespace fdo::cache {

namespace fs = std::filesystem;

namespace {

constexpr EnumNames<LoadStatus, 3> kLoadStatusNames{
    {{{LoadStatus::hit, "hit"}, {LoadStatus::miss, "miss"}, {LoadStatus::corrupt, "corrupt"}}}};

constexpr std::size_t kChecksumOffset = 48;
constexpr std::size_t kRecentlyEvictedKeys = 4096;

using wire::put_u32;
using wire::put_u64;

Error corrupt(std::string what) {
  return make_error(Errc::corrupt, std::move(what));
}

// Entries are tenants' compiled code: private to the daemon's user whatever
// the umask (which can only narrow these further).
constexpr mode_t kEntryFileMode = 0600;

Digest256 payload_checksum(std::string_view fixed_header, std::string_view body) {
  Hasher h;
  h.update(fixed_header);
  h.update(body);
  return h.digest();
}

Expected<EntryInfo> info_from_json(std::string_view text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return corrupt("entry info is not a JSON object");
  EntryInfo info;
  auto get_string = [&](const char* name, std::string& out) -> Status {
    auto it = j.find(name);
    if (it == j.end() || !it->is_string())
      return corrupt(std::string("entry info field \"") + name + "\" is missing or not a string");
    out = it->get<std::string>();
    return ok();
  };
  auto get_int = [&](const char* name, std::int64_t& out) -> Status {
    auto it = j.find(name);
    if (it == j.end() || !it->is_number_integer())
      return corrupt(std::string("entry info field \"") + name + "\" is missing or not an integer");
    out = it->get<std::int64_t>();
    return ok();
  };
  FDO_TRY_STATUS(get_string("ck", info.ck));
  FDO_TRY_STATUS(get_string("compiler_identity", info.compiler_identity));
  FDO_TRY_STATUS(get_string("pk", info.pk));
  FDO_TRY_STATUS(get_int("profile_version", info.profile_version));
  FDO_TRY_STATUS(get_string("profile_digest", info.profile_digest));
  std::string mode;
  FDO_TRY_STATUS(get_string("mode", mode));
  auto parsed = parse_compile_mode(mode);
  if (!parsed) return corrupt("entry info has unknown compile mode \"" + mode + "\"");
  info.mode = *parsed;
  FDO_TRY_STATUS(get_string("program_hash", info.program_hash));
  FDO_TRY_STATUS(get_int("created_unix_ms", info.created_unix_ms));
  if (!is_cache_key(info.ck)) return corrupt("entry info names an invalid cache key");
  return info;
}

// Reads the whole file behind fd; reports its identity for a later safe unlink.
struct FileBytes {
  std::string bytes;
  dev_t dev = 0;
  ino_t ino = 0;
};

Expected<FileBytes> read_fd(int fd, std::uint64_t max_bytes, const std::string& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return Error::from_errno("fstat " + path, errno);
  FileBytes out;
  out.dev = st.st_dev;
  out.ino = st.st_ino;
  if (static_cast<std::uint64_t>(st.st_size) > max_bytes)
    return corrupt("file is " + std::to_string(st.st_size) + " bytes, above the " +
                   std::to_string(max_bytes) + "-byte limit for one entry");
  out.bytes.resize(static_cast<std::size_t>(st.st_size));
  std::size_t done = 0;
  while (done < out.bytes.size()) {
    ssize_t n = ::read(fd, out.bytes.data() + done, out.bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Error::from_errno("read " + path, errno);
    }
    if (n == 0) break; // shrank while we read: decode will report the truncation
    done += static_cast<std::size_t>(n);
  }
  out.bytes.resize(done);
  return out;
}

} // namespace

std::string_view to_string(LoadStatus status) {
  return kLoadStatusNames.name(status);
}

std::string encode_entry(const Entry& entry) {
  std::string info = to_json(entry.info).dump();
  std::string out;
  out.reserve(kEntryHeaderSize + entry.key.size() + info.size() + entry.object.size() +
              entry.metadata.size());
  out.append(kEntryMagic, sizeof kEntryMagic);
  put_u32(out, kEntryFormatVersion);
  put_u32(out, kEntryHeaderSize);
  put_u32(out, static_cast<std::uint32_t>(entry.key.size()));
  put_u32(out, static_cast<std::uint32_t>(info.size()));
  put_u64(out, entry.object.size());
  put_u64(out, entry.metadata.size());
  put_u64(out, 0); // reserved
  std::string body;
  body.reserve(entry.key.size() + info.size() + entry.object.size() + entry.metadata.size());
  body += entry.key;
  body += info;
  body += entry.object;
  body += entry.metadata;
  Digest256 sum = payload_checksum(out, body);
  out.append(reinterpret_cast<const char*>(sum.data()), sum.size());
  out += body;
  return out;
}

Expected<Entry> decode_entry(std::string_view b) {
  if (b.size() < kEntryHeaderSize)
    return corrupt("truncated: " + std::to_string(b.size()) + " bytes, shorter than the " +
                   std::to_string(kEntryHeaderSize) + "-byte header");
  if (std::memcmp(b.data(), kEntryMagic, sizeof kEntryMagic) != 0)
    return corrupt("bad magic (not an fdo cache entry)");
  if (std::uint32_t v = wire::load_u32(b, 8); v != kEntryFormatVersion)
    return corrupt("unsupported format version " + std::to_string(v) + " (this build reads " +
                   std::to_string(kEntryFormatVersion) + ")");
  if (std::uint32_t hs = wire::load_u32(b, 12); hs != kEntryHeaderSize)
    return corrupt("bad header size " + std::to_string(hs));
  std::uint64_t key_len = wire::load_u32(b, 16), info_len = wire::load_u32(b, 20);
  std::uint64_t object_len = wire::load_u64(b, 24), metadata_len = wire::load_u64(b, 32);
  if (wire::load_u64(b, 40) != 0) return corrupt("reserved header field is not zero");
  std::uint64_t body = b.size() - kEntryHeaderSize;
  // Sum piecewise so huge lengths cannot wrap around.
  if (key_len > body || info_len > body - key_len || object_len > body - key_len - info_len ||
      metadata_len != body - key_len - info_len - object_len)
    return corrupt("section lengths do not match the file size (" + std::to_string(b.size()) +
                   " bytes): truncated or damaged");
  Digest256 sum = payload_checksum(b.substr(0, kChecksumOffset), b.substr(kEntryHeaderSize));
  if (std::memcmp(sum.data(), b.data() + kChecksumOffset, sum.size()) != 0)
    return corrupt("checksum mismatch");
  Entry e;
  std::size_t off = kEntryHeaderSize;
  e.key = std::string(b.substr(off, key_len));
  off += key_len;
  if (!is_storage_key(e.key)) return corrupt("header holds an invalid storage key");
  FDO_TRY(e.info, info_from_json(b.substr(off, info_len)));
  off += info_len;
  e.object = std::string(b.substr(off, object_len));
  off += object_len;
  e.metadata = std::string(b.substr(off, metadata_len));
  return e;
}

struct DiskTier::Impl {
  explicit Impl(DiskTierConfig c) : config(std::move(c)), evicted(kRecentlyEvictedKeys) {
    objects = (fs::path(config.root) / "objects").string();
    stats.budget_bytes = config.budget_bytes;
  }

  struct Item {
    std::uint64_t size = 0;
    std::uint64_t last_use = 0; // tick; larger = more recent
    std::list<std::string>::iterator lru_pos;
  };

  DiskTierConfig config;
  std::string objects;
  mutable std::mutex mu;
  std::map<std::string, Item> index; // ordered: one IK's keys are adjacent
  std::list<std::string> lru;        // front = most recently used
  std::uint64_t tick = 0;
  DiskTierStats stats;
  detail::RecentKeys evicted;

  std::string path_for(const std::string& key) const {
    return objects + "/" + key.substr(0, 2) + "/" + key + ".obj";
  }

  // --- with mu held ---
  void touch(const std::string& key, std::uint64_t size) {
    auto it = index.find(key);
    if (it == index.end()) {
      lru.push_front(key);
      it = index.emplace(key, Item{size, 0, lru.begin()}).first;
      stats.entries++;
      stats.bytes += size;
    } else {
      lru.splice(lru.begin(), lru, it->second.lru_pos);
      stats.bytes = stats.bytes - it->second.size + size;
      it->second.size = size;
    }
    it->second.last_use = ++tick;
  }
  void forget(const std::string& key) {
    auto it = index.find(key);
    if (it == index.end()) return;
    stats.entries--;
    stats.bytes -= it->second.size;
    lru.erase(it->second.lru_pos);
    index.erase(it);
  }
  void evict(const std::string& key) {
    std::string path = path_for(key);
    if (::unlink(path.c_str()) != 0 && errno != ENOENT)
      log::warning("cache: cannot remove evicted " + path + ": " + std::strerror(errno));
    evicted.add(key);
    stats.evictions++;
    forget(key);
  }
  void enforce_budget() {
    while (stats.bytes > config.budget_bytes && lru.size() > 1) {
      std::string victim = lru.back();
      evict(victim);
    }
  }
  // Removes path only if it is still the file we read (a fresh store may have
  // replaced it since).
  void remove_if_same(const std::string& path, dev_t dev, ino_t ino) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0 && st.st_dev == dev && st.st_ino == ino)
      ::unlink(path.c_str());
  }

  Status scan() {
    if (Status made = create_private_dirs(objects); !made)
      return std::move(made).error().context("create " + objects);
    std::error_code ec;
    struct Found {
      std::string key;
      std::uint64_t size;
      struct timespec mtime;
    };
    std::vector<Found> found;
    for (fs::directory_iterator shard(objects, ec), end; !ec && shard != end; shard.increment(ec)) {
      if (!shard->is_directory()) continue;
      std::string shard_name = shard->path().filename().string();
      std::error_code ec2;
      for (fs::directory_iterator f(shard->path(), ec2), fend; !ec2 && f != fend;
           f.increment(ec2)) {
        std::string name = f->path().filename().string();
        std::string path = f->path().string();
        if (name.starts_with(kAtomicTempPrefix)) {
          // Left by a writer that died before its rename: never a valid entry.
          if (::unlink(path.c_str()) == 0) stats.stray_files_removed++;
          continue;
        }
        if (!name.ends_with(".obj")) continue;
        std::string key = name.substr(0, name.size() - 4);
        if (!is_storage_key(key) || key.substr(0, 2) != shard_name) continue;
        struct stat st {};
        if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
        found.push_back({key, static_cast<std::uint64_t>(st.st_size), st.st_mtim});
      }
      if (ec2) log::warning("cache: cannot list " + shard->path().string() + ": " + ec2.message());
    }
    if (ec) return make_error(Errc::io, "list " + objects + ": " + ec.message());
    std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) {
      if (a.mtime.tv_sec != b.mtime.tv_sec) return a.mtime.tv_sec < b.mtime.tv_sec;
      return a.mtime.tv_nsec < b.mtime.tv_nsec;
    });
    std::lock_guard lock(mu);
    for (const Found& f : found)
      touch(f.key, f.size); // oldest first, so the newest ends at the LRU front
    enforce_budget();
    return ok();
  }
};

DiskTier::DiskTier(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DiskTier::~DiskTier() = default;

Expected<std::unique_ptr<DiskTier>> DiskTier::open(DiskTierConfig config) {
  if (config.root.empty())
    return make_error(Errc::invalid_argument, "disk tier root directory is empty");
  if (config.budget_bytes == 0)
    return make_error(Errc::invalid_argument, "disk tier budget must be greater than 0 bytes");
  auto impl = std::make_unique<Impl>(std::move(config));
  if (auto st = impl->scan(); !st) return std::move(st).error().context("open cache disk tier");
  return std::unique_ptr<DiskTier>(new DiskTier(std::move(impl)));
}

LoadResult DiskTier::load(const std::string& key, std::string_view expected_identity) {
  Impl& d = *impl_;
  LoadResult r;
  if (!is_storage_key(key)) {
    r.problem = "not a storage key";
    return r;
  }
  std::string path = d.path_for(key);
  int raw = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (raw < 0) {
    int err = errno;
    std::lock_guard lock(d.mu);
    d.stats.misses++;
    if (err == ENOENT) {
      d.forget(key);
    } else {
      d.stats.read_errors++;
      r.problem = "open " + path + ": " + std::strerror(err);
    }
    return r;
  }
  Fd fd(raw);
  auto file = read_fd(fd.get(), d.config.max_entry_bytes + kEntryHeaderSize + 4096, path);
  if (!file && file.error().code() != Errc::corrupt) {
    std::lock_guard lock(d.mu);
    d.stats.misses++;
    d.stats.read_errors++;
    r.problem = file.error().describe();
    return r;
  }
  Expected<Entry> entry = file ? decode_entry(file->bytes) : Expected<Entry>(file.error());
  if (entry) {
    if (entry->key != key)
      entry = corrupt("file holds entry " + entry->key + ", not " + key);
    else if (!expected_identity.empty() && entry->info.compiler_identity != expected_identity)
      entry = corrupt("compiled under compiler identity \"" + entry->info.compiler_identity +
                      "\", expected \"" + std::string(expected_identity) + "\"");
  }
  if (!entry) {
    r.status = LoadStatus::corrupt;
    r.problem = entry.error().message();
    log::warning("cache: removing corrupt entry " + path + ": " + r.problem);
    std::lock_guard lock(d.mu);
    if (file)
      d.remove_if_same(path, file->dev, file->ino);
    else
      ::unlink(path.c_str());
    d.forget(key);
    d.stats.corrupt++;
    d.stats.misses++;
    return r;
  }
  // Record the use in the file itself so LRU order survives a restart.
  ::futimens(fd.get(), nullptr);
  std::lock_guard lock(d.mu);
  d.touch(key, file->bytes.size());
  d.stats.hits++;
  r.status = LoadStatus::hit;
  r.entry = std::make_shared<const Entry>(std::move(*entry));
  return r;
}

Status DiskTier::store(const Entry& entry) {
  Impl& d = *impl_;
  if (!is_storage_key(entry.key))
    return make_error(Errc::invalid_argument, "cannot store under \"" + entry.key.substr(0, 100) +
                                                  "\": not a storage key (VK or CK)");
  std::string bytes = encode_entry(entry);
  if (bytes.size() > d.config.budget_bytes || entry.object.size() > d.config.max_entry_bytes) {
    std::lock_guard lock(d.mu);
    d.stats.skipped_too_large++;
    return ok(); // the memory tier still has it; the disk simply cannot hold it
  }
  std::string path = d.path_for(entry.key);
  Status made = create_private_dirs(fs::path(path).parent_path().string());
  Status st = !made ? Status(std::move(made).error().context("create directory for " + path))
                    : write_file_atomic(path, bytes, d.config.durability, kEntryFileMode);
  std::lock_guard lock(d.mu);
  if (!st) {
    d.stats.store_failures++;
    return std::move(st).error().context("store cache entry " + entry.key);
  }
  d.stats.stores++;
  d.touch(entry.key, bytes.size());
  d.enforce_budget();
  return ok();
}

bool DiskTier::contains(const std::string& key) const {
  std::lock_guard lock(impl_->mu);
  return impl_->index.count(key) != 0;
}

void DiskTier::note_use(const std::string& key) {
  std::lock_guard lock(impl_->mu);
  auto it = impl_->index.find(key);
  if (it == impl_->index.end()) return;
  impl_->lru.splice(impl_->lru.begin(), impl_->lru, it->second.lru_pos);
  it->second.last_use = ++impl_->tick;
}

std::vector<std::string> DiskTier::keys_for_ik(std::string_view ik) const {
  std::vector<std::pair<std::uint64_t, std::string>> found;
  {
    std::lock_guard lock(impl_->mu);
    for (auto it = impl_->index.lower_bound(std::string(ik));
         it != impl_->index.end() && it->first.compare(0, ik.size(), ik) == 0; ++it)
      found.emplace_back(it->second.last_use, it->first);
  }
  std::sort(found.begin(), found.end(), std::greater<>());
  std::vector<std::string> keys;
  for (auto& [tick, key] : found)
    keys.push_back(std::move(key));
  return keys;
}

std::size_t DiskTier::evict_prefix(std::string_view prefix) {
  std::lock_guard lock(impl_->mu);
  std::vector<std::string> victims;
  for (auto it = impl_->index.lower_bound(std::string(prefix));
       it != impl_->index.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it)
    victims.push_back(it->first);
  for (const std::string& key : victims)
    impl_->evict(key);
  return victims.size();
}

bool DiskTier::was_evicted(const std::string& key) const {
  std::lock_guard lock(impl_->mu);
  return impl_->evicted.contains(key);
}

std::string DiskTier::path_for(const std::string& key) const {
  return impl_->path_for(key);
}
const std::string& DiskTier::root() const {
  return impl_->config.root;
}

DiskTierStats DiskTier::stats() const {
  std::lock_guard lock(impl_->mu);
  return impl_->stats;
}

} // namespace fdo::cache
