#include "fdo/cache/keys.h"

#include "fdo/util/enum_names.h"
#include "fdo/util/hash.h"

namespace fdo::cache {

namespace {

bool is_lower_hex(std::string_view s) {
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

constexpr EnumNames<KeyKind, 4> kKeyKindNames{{{{KeyKind::initial, "initial"},
                                                {KeyKind::virtual_key, "virtual"},
                                                {KeyKind::cache_key, "cache"},
                                                {KeyKind::invalid, "invalid"}}}};

// Feeds the program field exactly as update_field(envelope) would, without
// building the envelope: programs can be large and this runs on every stage.
void update_program_field(Hasher& h, std::string_view scope, std::string_view bytes) {
  if (scope.empty()) {
    h.update_field(bytes);
    return;
  }
  h.update_u64(kScopeTag.size() + scope.size() + 1 + bytes.size());
  h.update(kScopeTag).update(scope).update(std::string_view("\n")).update(bytes);
}

} // namespace

std::string_view to_string(KeyKind kind) {
  return kKeyKindNames.name(kind);
}

Status check_scope(std::string_view scope, std::string_view program_bytes) {
  if (scope.find('\n') != std::string_view::npos)
    return make_error(Errc::invalid_argument, "program scope must not contain a newline: \"" +
                                                  std::string(scope.substr(0, 100)) + "\"");
  if (scope.empty() && program_bytes.starts_with(kScopeTag))
    return make_error(Errc::invalid_argument,
                      "unscoped program bytes must not start with the scope tag FDO-SCOPE\\0");
  return ok();
}

std::string initial_key(std::string_view scope, std::string_view program_bytes,
                        std::string_view compiler_identity) {
  Hasher h;
  h.update_field("fdo.ik.v1");
  update_program_field(h, scope, program_bytes);
  h.update_field(compiler_identity);
  return h.hex();
}

std::string program_hash(std::string_view scope, std::string_view program_bytes) {
  Hasher h;
  h.update_field("fdo.program.v1");
  update_program_field(h, scope, program_bytes);
  return h.hex();
}

std::string virtual_key(std::string_view ik) {
  std::string vk(ik);
  vk += kVirtualSuffix;
  return vk;
}

bool is_virtual_key(std::string_view key) {
  return key.size() == kVirtualKeyLength && key.ends_with(kVirtualSuffix) &&
         is_hex_key(key.substr(0, kInitialKeyLength));
}

Expected<std::string> ik_of_virtual_key(std::string_view vk) {
  if (!is_virtual_key(vk))
    return make_error(
        Errc::invalid_argument,
        "not a virtual key (expected 64 lower-case hex digits followed by \"-v\"): \"" +
            std::string(vk.substr(0, 100)) + "\"");
  return std::string(vk.substr(0, kInitialKeyLength));
}

std::string cache_key(std::string_view ik, std::string_view profile_digest, CompileMode mode) {
  Hasher h;
  h.update_field("fdo.ck.v1");
  h.update_field(profile_digest);
  h.update_field(to_string(mode));
  std::string ck(ik);
  ck += '-';
  ck += h.hex().substr(0, kProfileSuffixHex);
  return ck;
}

bool is_cache_key(std::string_view key) {
  return key.size() == kCacheKeyLength && key[kInitialKeyLength] == '-' &&
         is_hex_key(key.substr(0, kInitialKeyLength)) &&
         is_lower_hex(key.substr(kInitialKeyLength + 1));
}

KeyKind classify_key(std::string_view key) {
  if (is_hex_key(key)) return KeyKind::initial;
  if (is_virtual_key(key)) return KeyKind::virtual_key;
  if (is_cache_key(key)) return KeyKind::cache_key;
  return KeyKind::invalid;
}

bool is_storage_key(std::string_view key) {
  return is_virtual_key(key) || is_cache_key(key);
}

Expected<std::string> ik_of_key(std::string_view key) {
  if (classify_key(key) == KeyKind::invalid)
    return make_error(Errc::invalid_argument, "not an fdo key (IK, IK-v or IK-<32 hex>): \"" +
                                                  std::string(key.substr(0, 100)) + "\"");
  return std::string(key.substr(0, kInitialKeyLength));
}

} // namespace fdo::cache
