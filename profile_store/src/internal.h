// Implementation details shared by the profile store's source files.
#pragma once

#include "fdo/util/time.h"

#include "fdo/profile_store/profile_store.h"
#include "fdo/profile_store/sqlite.h"

#include <cstddef>
#include <cstdint>
#include <list>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace fdo::profile_store {

namespace detail {

// Keys are hashes in practice (64 hex digits); the bound only stops a
// runaway caller from filling the database with megabyte "keys".
inline constexpr std::size_t kMaxKeyBytes = 1024;

inline std::int64_t now_ms() { return fdo::unix_ms_now(); }
// "2026-11-22T10:11:12.345Z"
using fdo::rfc3339_ms;
Status check_key(std::string_view what, std::string_view key);
// canonical_json, with nlohmann's exception for invalid UTF-8 turned into an error.
Expected<std::string> canonical_text(const nlohmann::json& j, std::string_view what);

} // namespace detail

// Documents of recently read bodies, parsed and digest-checked. Parsing and
// re-hashing a body costs far more than reading it, and versions are written
// once, so a read whose body bytes equal the cached bytes reuses the result.
// The bytes are compared on every hit: a row changed by another process (or
// a version number reused after remove) is parsed and checked afresh.
class DocCache {
public:
  // Bounded by the bytes of the cached bodies (the parsed documents take a
  // small multiple of that); a body above a quarter of the budget is not cached.
  explicit DocCache(std::size_t budget_bytes) : budget_(budget_bytes) {}
  // The cached document for exactly this (pk, version, body, digest), or null.
  const ProfileDoc* find(const std::string& pk, std::int64_t version, const std::string& body,
                         const std::string& digest);
  void insert(const std::string& pk, std::int64_t version, const std::string& body,
              const std::string& digest, const ProfileDoc& doc);

private:
  struct Entry {
    std::string key;
    std::string body;
    std::string digest;
    ProfileDoc doc;
  };
  static std::string key_of(const std::string& pk, std::int64_t version);
  void erase(std::list<Entry>::iterator it);

  std::size_t budget_;
  std::size_t bytes_ = 0;
  std::list<Entry> lru_; // most recently used first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
};

struct ProfileStore::Impl {
  std::string path;
  Options options;
  sqlite::Connection db;
  // One connection per store, so calls from several threads take turns.
  std::mutex mu;
  DocCache docs{8u << 20};

  Status writable() const {
    if (options.mode == OpenMode::read_only)
      return make_error(Errc::permission_denied, "profile store '" + path + "' is open read-only");
    return ok();
  }

  Expected<sqlite::CachedStatement> sql(const std::string& text) { return db.cached(text); }

  // The profiles row of one key.
  struct State {
    std::int64_t owner = 0;
    std::int64_t current = 0; // 0: no current profile
    std::int64_t last = 0;
    bool pinned = false;
  };

  // Helpers that run with mu held (inside the caller's transaction, if any).
  Expected<std::int64_t> write_locked(const WriteRequest& req, std::int64_t now);
  Expected<std::optional<State>> state_locked(std::string_view pk);
  Expected<std::optional<StoredProfile>> current_locked(std::string_view pk);
  // The row at the statement's cursor (columns as kProfileColumns).
  Expected<StoredProfile> read_profile_row(const sqlite::Statement& st);
  Expected<std::optional<StoredProfile>> get_locked(std::string_view pk, std::int64_t version);
  // Oldest first; empty for an unknown key.
  Expected<std::vector<StoredProfile>> history_locked(std::string_view pk);
};

} // namespace fdo::profile_store
