// The cache's three key kinds (docs/keys.md defines every byte):
//   IK  initial key   64 hex            BLAKE3("fdo.ik.v1", scoped program, compiler identity)
//   VK  virtual key   IK + "-v"         (66 chars) a first stage's output, before PK is known
//   CK  cache key     IK + "-" + 32 hex (97 chars) IK extended with profile digest and mode
// VK and CK both start with their IK, so every storage key names its program and
// the IK is recovered by taking the first 64 characters.
#pragma once

#include "fdo/util/expected.h"
#include "fdo/util/profile.h"

#include <string>
#include <string_view>

namespace fdo::cache {

inline constexpr std::string_view kVirtualSuffix = "-v";
inline constexpr std::size_t kInitialKeyLength = 64;
inline constexpr std::size_t kVirtualKeyLength = kInitialKeyLength + kVirtualSuffix.size();
inline constexpr std::size_t kProfileSuffixHex = 32;
inline constexpr std::size_t kCacheKeyLength = kInitialKeyLength + 1 + kProfileSuffixHex;

enum class KeyKind { initial, virtual_key, cache_key, invalid };
std::string_view to_string(KeyKind kind);

// A program field is hashed in its scoped form: the bytes alone for the
// unscoped (shared) scope "", otherwise kScopeTag + scope + "\n" + bytes, the
// envelope the daemon once spliced in front of the bytes, so keys recorded
// before the scope became a field still match (docs/keys.md).
inline constexpr std::string_view kScopeTag{"FDO-SCOPE\0", 10};

// The scoped form is one-to-one only for a scope without "\n" and unscoped
// bytes that do not start with kScopeTag; invalid_argument otherwise. The
// orchestrator refuses such programs before keying them.
Status check_scope(std::string_view scope, std::string_view program_bytes);

// IK: known before any compiling. The compiler identity is part of it so that
// an output compiled by another compiler can never be found; the scope is part
// of it so that one tenant's output is never served to another (docs/keys.md).
std::string initial_key(std::string_view scope, std::string_view program_bytes,
                        std::string_view compiler_identity);
// Identity-free hash of the scoped program; lets the cache notice that a
// program it has seen before now arrives under a different compiler identity.
std::string program_hash(std::string_view scope, std::string_view program_bytes);

// VK = IK + "-v". Precondition-free: an invalid IK yields an invalid VK.
std::string virtual_key(std::string_view ik);
bool is_virtual_key(std::string_view key);
// Inverse of virtual_key; invalid_argument names what was wrong.
Expected<std::string> ik_of_virtual_key(std::string_view vk);

// CK = IK + "-" + first 32 hex of BLAKE3("fdo.ck.v1", digest, mode).
std::string cache_key(std::string_view ik, std::string_view profile_digest, CompileMode mode);
bool is_cache_key(std::string_view key);

KeyKind classify_key(std::string_view key);
// True for a VK or a CK: the keys entries are stored under (safe as file names).
bool is_storage_key(std::string_view key);
// The IK every valid key starts with; invalid_argument for anything else.
Expected<std::string> ik_of_key(std::string_view key);

} // namespace fdo::cache
