// BLAKE3 hashing (over llvm::BLAKE3) and hex keys. All fdo keys are 256-bit
// BLAKE3 digests written as 64 lower-case hex characters.
#pragma once

#include "fdo/util/expected.h"

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace fdo {

using Digest256 = std::array<std::uint8_t, 32>;

std::string to_hex(std::span<const std::uint8_t> bytes);
// Parses exactly 2*N hex characters (either case) into N bytes.
Expected<std::string> from_hex(std::string_view hex);
// True for a 64-character lower-case hex string (the form of every key).
bool is_hex_key(std::string_view s);

// Incremental hasher. Field helpers frame their input (length or fixed width,
// little-endian) so that concatenations of different fields cannot collide:
// update_field("ab") + update_field("c") differs from update_field("a") + update_field("bc").
class Hasher {
public:
  Hasher();
  ~Hasher();
  Hasher(Hasher&&) noexcept;
  Hasher& operator=(Hasher&&) noexcept;
  Hasher(const Hasher&) = delete;
  Hasher& operator=(const Hasher&) = delete;

  // Raw bytes, unframed.
  Hasher& update(std::span<const std::uint8_t> bytes);
  Hasher& update(std::string_view bytes);
  // Length-prefixed (u64 LE) bytes.
  Hasher& update_field(std::string_view bytes);
  Hasher& update_u64(std::uint64_t v);
  Hasher& update_i64(std::int64_t v) { return update_u64(static_cast<std::uint64_t>(v)); }
  Hasher& update_u8(std::uint8_t v);

  Digest256 digest() const;
  std::string hex() const;
  // The first 8 digest bytes as a little-endian integer (for 64-bit hashes).
  std::uint64_t digest64() const;

  // Room for the BLAKE3 state (llvm::BLAKE3, 1,912 bytes in LLVM 16; hash.cpp
  // checks it fits): kept in place, since a heap block of that size per hasher
  // cost more than hashing a cache key.
  static constexpr std::size_t kStateBytes = 1920;

private:
  // mutable: LLVM's final() is not const, though it leaves the state as it was.
  alignas(16) mutable unsigned char state_[kStateBytes];
};

Digest256 blake3(std::string_view bytes);
std::string blake3_hex(std::string_view bytes);

} // namespace fdo
