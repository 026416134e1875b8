// Back-end-neutral rules of the versioned write path and of reading a stored
// version: what a write stores (stamped, validated, canonical body, digest),
// which writes are allowed over a key's state, and the checks every read
// body passes; what putting a key mapping over the existing one means.
// Shared by the SQLite and PostgreSQL back ends.
#pragma once

#include "fdo/profile_store/profile_store.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace fdo::profile_store {
class DocCache;
}

namespace fdo::profile_store::detail {

// The profiles row of one key.
struct ProfileState {
  std::int64_t owner = 0;
  std::int64_t current = 0; // 0: no current profile
  std::int64_t last = 0;
  bool pinned = false;
};

// A write ready to run: the request's key, expected version and info, and
// its document stamped, checked and written out. Prepared before the
// writer's lock is taken (the text of a big program's document is
// milliseconds of CPU).
struct PreparedWrite {
  std::string pk;
  std::int64_t expected_version = 0;
  WriteInfo info;
  ProfileDoc doc; // with provenance stamped; as a read of the version returns it
  std::string body;
  std::string digest;
  std::int64_t functions = 0;
};
// Checks the key and expected version, stamps a copy of the document's
// provenance from `info` and `now`, checks it as a read would
// (normalize_profile), and writes its text and digest.
Expected<PreparedWrite> prepare_write(std::string_view pk, std::int64_t expected_version,
                                      const ProfileDoc& doc, const WriteInfo& info,
                                      std::int64_t now);
inline Expected<PreparedWrite> prepare_write(const WriteRequest& req, std::int64_t now) {
  return prepare_write(req.pk, req.expected_version, req.doc, req.info, now);
}

// The version `w` becomes once written as `version` at `now` over the key's
// state `st` (nullopt: no row before), exactly as a read returns it: the
// profiles row's pin and owner, this version's columns. Takes w's document,
// body and digest.
SharedProfile stored_record(PreparedWrite&& w, std::int64_t version, std::int64_t now,
                            const std::optional<ProfileState>& st);

// The version the write gets over the key's state `st` (nullopt: no row), or
// the error: tenant first (not_found, like an unknown key), then pinned, then
// conflict.
Expected<std::int64_t> check_write(const PreparedWrite& req, const std::optional<ProfileState>& st);

// Parses p.body into p.doc and checks it against p.digest (Errc::corrupt
// otherwise), reusing the cache's document for the same bytes.
Status decode_body(StoredProfile& p, DocCache& docs);

// Putting IK -> `pk` over the mapping's old value `previous` (nullopt: there
// was none): inserted, unchanged or replaced (logged: a program's profile key
// changed).
MappingResult profile_key_put(std::string_view ik, std::string_view pk,
                              std::optional<std::string> previous);
// Putting CK -> (`vk`, `ik`) over the old row (nullopt: none) changes nothing:
// same VK, and no IK given or the same one (nothing to write).
bool virtual_key_put_is_noop(const std::optional<std::string>& old_vk, std::string_view old_ik,
                             std::string_view vk, std::string_view ik);
// The result of a put that wrote the row over the old VK: unchanged when only
// the IK was learned.
MappingResult virtual_key_put(std::optional<std::string> old_vk, std::string_view vk);

} // namespace fdo::profile_store::detail
