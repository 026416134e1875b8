#include "fdo/util/hash.h"

#include <llvm/Support/BLAKE3.h>
#include <new>
#include <type_traits>

namespace fdo {

namespace {
constexpr char kHexDigits[] = "0123456789abcdef";

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}
} // namespace

std::string to_hex(std::span<const std::uint8_t> bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (std::uint8_t b : bytes) {
    out.push_back(kHexDigits[b >> 4]);
    out.push_back(kHexDigits[b & 0xf]);
  }
  return out;
}

Expected<std::string> from_hex(std::string_view hex) {
  if (hex.size() % 2 != 0)
    return make_error(Errc::invalid_argument,
                      "hex string has odd length " + std::to_string(hex.size()));
  std::string out;
  out.reserve(hex.size() / 2);
  for (std::size_t i = 0; i < hex.size(); i += 2) {
    int hi = hex_value(hex[i]), lo = hex_value(hex[i + 1]);
    if (hi < 0 || lo < 0)
      return make_error(Errc::invalid_argument,
                        "invalid hex character at offset " + std::to_string(hi < 0 ? i : i + 1));
    out.push_back(static_cast<char>((hi << 4) | lo));
  }
  return out;
}

bool is_hex_key(std::string_view s) {
  if (s.size() != 64) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

static_assert(sizeof(llvm::BLAKE3) <= Hasher::kStateBytes && alignof(llvm::BLAKE3) <= 16);
static_assert(std::is_trivially_copyable_v<llvm::BLAKE3> &&
              std::is_trivially_destructible_v<llvm::BLAKE3>);

namespace {
llvm::BLAKE3& state(unsigned char* bytes) {
  return *std::launder(reinterpret_cast<llvm::BLAKE3*>(bytes));
}
} // namespace

Hasher::Hasher() {
  new (state_) llvm::BLAKE3();
}
Hasher::~Hasher() = default; // trivially destructible state
Hasher::Hasher(Hasher&& other) noexcept {
  new (state_) llvm::BLAKE3(state(other.state_));
}
Hasher& Hasher::operator=(Hasher&& other) noexcept {
  if (this != &other) new (state_) llvm::BLAKE3(state(other.state_));
  return *this;
}

Hasher& Hasher::update(std::span<const std::uint8_t> bytes) {
  state(state_).update(llvm::ArrayRef<std::uint8_t>(bytes.data(), bytes.size()));
  return *this;
}

Hasher& Hasher::update(std::string_view bytes) {
  state(state_).update(llvm::StringRef(bytes.data(), bytes.size()));
  return *this;
}

Hasher& Hasher::update_u64(std::uint64_t v) {
  std::uint8_t le[8];
  for (int i = 0; i < 8; ++i)
    le[i] = static_cast<std::uint8_t>(v >> (8 * i));
  return update(std::span<const std::uint8_t>(le, 8));
}

Hasher& Hasher::update_u8(std::uint8_t v) {
  return update(std::span<const std::uint8_t>(&v, 1));
}

Hasher& Hasher::update_field(std::string_view bytes) {
  update_u64(bytes.size());
  return update(bytes);
}

Digest256 Hasher::digest() const {
  auto r = state(state_).final<32>();
  Digest256 out;
  std::copy(r.begin(), r.end(), out.begin());
  return out;
}

std::string Hasher::hex() const {
  Digest256 d = digest();
  return to_hex(d);
}

std::uint64_t Hasher::digest64() const {
  Digest256 d = digest();
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i)
    v = (v << 8) | d[i];
  return v;
}

Digest256 blake3(std::string_view bytes) {
  Hasher h;
  h.update(bytes);
  return h.digest();
}

std::string blake3_hex(std::string_view bytes) {
  Hasher h;
  h.update(bytes);
  return h.hex();
}

} // namespace fdo
