#include "fdo/cache/keys.h"
#include "fdo/util/hash.h"

#include <catch2/catch.hpp>

using namespace fdo;
using namespace fdo::cache;

namespace {
// The framing docs/keys.md specifies, written out by hand so the test checks
// the document rather than re-using Hasher::update_field.
std::string field(std::string_view s) {
  std::string out;
  std::uint64_t n = s.size();
  for (int i = 0; i < 8; ++i)
    out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  out += s;
  return out;
}
} // namespace

TEST_CASE("IK is BLAKE3 over the documented framed fields", "[cache][keys]") {
  std::string bytes = "define i32 @f() { ret i32 0 }";
  std::string id = "llvm-16;fdo-0.1;x86_64;skylake";
  std::string ik = initial_key("", bytes, id);
  CHECK(is_hex_key(ik));
  CHECK(ik == blake3_hex(field("fdo.ik.v1") + field(bytes) + field(id)));
  CHECK(classify_key(ik) == KeyKind::initial);
}

TEST_CASE("IK changes with the program bytes and with the compiler identity", "[cache][keys]") {
  std::string a = initial_key("", "module a", "id1");
  CHECK(a == initial_key("", "module a", "id1"));
  CHECK(a != initial_key("", "module b", "id1"));
  CHECK(a != initial_key("", "module a", "id2"));
  // Framing: moving a byte from the program into the identity changes the key.
  CHECK(initial_key("", "ab", "c") != initial_key("", "a", "bc"));
  CHECK(initial_key("", "", "") != initial_key("", "", "x"));
}

TEST_CASE("program_hash ignores the compiler identity", "[cache][keys]") {
  CHECK(program_hash("", "m") == blake3_hex(field("fdo.program.v1") + field("m")));
  CHECK(program_hash("", "m") != program_hash("", "n"));
  CHECK(program_hash("", "m") != initial_key("", "m", ""));
}

// The scope used to be an envelope the daemon spliced in front of the bytes;
// keys made then must still match, so the scoped IK and program hash are pinned
// to the envelope form (docs/keys.md, "The program field").
TEST_CASE("a scoped IK equals the IK of the old FDO-SCOPE envelope", "[cache][keys]") {
  std::string bytes = "define i32 @f() { ret i32 0 }";
  std::string id = "llvm-16;fdo-0.1;x86_64;skylake";
  std::string envelope = std::string("FDO-SCOPE\0", 10) + "uid:1000\n" + bytes;
  REQUIRE(envelope.size() == 10 + 8 + 1 + bytes.size());
  CHECK(kScopeTag == envelope.substr(0, 10));

  std::string ik = initial_key("uid:1000", bytes, id);
  CHECK(ik == blake3_hex(field("fdo.ik.v1") + field(envelope) + field(id)));
  CHECK(program_hash("uid:1000", bytes) == blake3_hex(field("fdo.program.v1") + field(envelope)));
  // And to fixed values (computed by the code before the scope was a field),
  // so a change to the hashing helpers cannot move both sides above at once.
  CHECK(initial_key("", bytes, id) ==
        "2d66fdd972a7d58d5f6f3ec848e22cd91e67ca5b3e07968178d976ca72981018");
  CHECK(ik == "03c7f3c6a3cf59c16b7d2619c6214032505a1234c8668c4725076b2e0415628a");
  CHECK(program_hash("uid:1000", bytes) ==
        "25ecf812f3bc27e71a86a7b2f4afd798808d0470f79a0dae3774dab900cc26f6");
}

TEST_CASE("the scope keeps tenants apart and cannot be forged from the bytes", "[cache][keys]") {
  std::string bytes = "module";
  std::string a = initial_key("uid:1000", bytes, "id");
  CHECK(a != initial_key("", bytes, "id"));
  CHECK(a != initial_key("uid:1001", bytes, "id"));
  CHECK(a == initial_key("uid:1000", bytes, "id"));
  CHECK(program_hash("uid:1000", bytes) != program_hash("", bytes));
  // An empty scope is the unscoped form, not an empty envelope.
  CHECK(
      initial_key("", bytes, "id") !=
      blake3_hex(field("fdo.ik.v1") + field(std::string(kScopeTag) + "\n" + bytes) + field("id")));

  // The two ways two programs could share a byte stream are refused.
  CHECK(check_scope("uid:1000", bytes));
  CHECK(check_scope("", bytes));
  CHECK(check_scope("uid:1000", std::string(kScopeTag) + "uid:1\n" + bytes)); // scoped: any bytes
  // scope "a\nb" + bytes "c" would hash like scope "a" + bytes "b\nc".
  CHECK(initial_key("a\nb", "c", "id") == initial_key("a", "b\nc", "id"));
  auto newline = check_scope("a\nb", "c");
  REQUIRE_FALSE(newline);
  CHECK(newline.error().code() == Errc::invalid_argument);
  CHECK(newline.error().message().find("newline") != std::string::npos);
  // Unscoped bytes that start with the tag would hash like a scoped program.
  std::string forged = std::string(kScopeTag) + "uid:1000\n" + bytes;
  CHECK(initial_key("", forged, "id") == a);
  auto tagged = check_scope("", forged);
  REQUIRE_FALSE(tagged);
  CHECK(tagged.error().code() == Errc::invalid_argument);
  CHECK(tagged.error().message().find("scope tag") != std::string::npos);
}

TEST_CASE("VK is IK plus -v and reverses to IK", "[cache][keys]") {
  std::string ik = initial_key("", "p", "id");
  std::string vk = virtual_key(ik);
  CHECK(vk == ik + "-v");
  CHECK(vk.size() == kVirtualKeyLength);
  CHECK(is_virtual_key(vk));
  CHECK_FALSE(is_virtual_key(ik));
  auto back = ik_of_virtual_key(vk);
  REQUIRE(back);
  CHECK(*back == ik);
  CHECK(classify_key(vk) == KeyKind::virtual_key);
  CHECK(is_storage_key(vk));

  for (std::string bad : {std::string("-v"), ik, ik + "-V", ik + "-vv", ik.substr(1) + "-v",
                          std::string(64, 'G') + "-v", std::string(64, 'A') + "-v"}) {
    INFO(bad);
    CHECK_FALSE(is_virtual_key(bad));
    auto r = ik_of_virtual_key(bad);
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::invalid_argument);
    CHECK(r.error().message().find("not a virtual key") != std::string::npos);
  }
}

TEST_CASE("CK extends IK and changes exactly when digest or mode changes", "[cache][keys]") {
  std::string ik = initial_key("", "p", "id");
  std::string d1(64, 'a'), d2(64, 'b');
  std::string ck = cache_key(ik, d1, CompileMode::optimized);
  CHECK(ck.size() == kCacheKeyLength);
  CHECK(ck.starts_with(ik + "-"));
  CHECK(is_cache_key(ck));
  CHECK(classify_key(ck) == KeyKind::cache_key);
  CHECK(is_storage_key(ck));
  CHECK(ck == cache_key(ik, d1, CompileMode::optimized));
  CHECK(ck != cache_key(ik, d2, CompileMode::optimized));
  CHECK(ck != cache_key(ik, d1, CompileMode::instrumented));
  CHECK(ck != cache_key(ik, d1, CompileMode::plain));
  CHECK(cache_key(ik, no_profile_digest(), CompileMode::instrumented) !=
        cache_key(ik, d1, CompileMode::instrumented));
  // The suffix is the documented hash; the prefix is the IK, so other programs differ.
  std::string suffix =
      blake3_hex(field("fdo.ck.v1") + field(d1) + field("optimized")).substr(0, 32);
  CHECK(ck == ik + "-" + suffix);
  std::string other = initial_key("", "q", "id");
  CHECK(cache_key(other, d1, CompileMode::optimized) != ck);
  CHECK(cache_key(other, d1, CompileMode::optimized).substr(65) == ck.substr(65));
  auto back = ik_of_key(ck);
  REQUIRE(back);
  CHECK(*back == ik);
}

TEST_CASE("invalid keys are rejected with a message", "[cache][keys]") {
  for (std::string bad : {std::string(), std::string("../../etc/passwd"), std::string(97, 'a'),
                          initial_key("", "p", "id") + "-" + std::string(32, 'z'),
                          initial_key("", "p", "id") + "/" + std::string(32, 'a')}) {
    INFO(bad);
    CHECK(classify_key(bad) == KeyKind::invalid);
    CHECK_FALSE(is_storage_key(bad));
    auto r = ik_of_key(bad);
    REQUIRE_FALSE(r);
    CHECK(r.error().message().find("not an fdo key") != std::string::npos);
  }
  CHECK_FALSE(is_storage_key(initial_key("", "p", "id"))); // an IK alone is never stored
  CHECK(to_string(KeyKind::virtual_key) == "virtual");
}
