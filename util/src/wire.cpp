#include "fdo/util/wire.h"

#include <bit>
#include <cstring>
#include <limits>

namespace fdo::wire {

namespace {

// Little-endian on the wire: a host of the other order swaps (std::endian).
template <class T> T to_wire_order(T v) {
  if constexpr (std::endian::native == std::endian::big) {
    if constexpr (sizeof(T) == 8)
      return __builtin_bswap64(v);
    else
      return __builtin_bswap32(v);
  }
  return v;
}

} // namespace

void put_u32(std::string& out, std::uint32_t v) {
  v = to_wire_order(v);
  char b[4];
  std::memcpy(b, &v, 4);
  out.append(b, 4);
}

void put_u64(std::string& out, std::uint64_t v) {
  v = to_wire_order(v);
  char b[8];
  std::memcpy(b, &v, 8);
  out.append(b, 8);
}

void WireWriter::f64(double v) {
  std::uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof bits);
  u64(bits);
}

void WireWriter::count(std::size_t n) {
  if (n > std::numeric_limits<std::uint32_t>::max()) {
    overflow_ = true;
    n = 0;
  }
  u32(static_cast<std::uint32_t>(n));
}

void WireWriter::str(std::string_view s) {
  count(s.size());
  if (s.size() <= std::numeric_limits<std::uint32_t>::max()) out_.append(s);
}

Expected<std::string> WireWriter::take() && {
  if (overflow_)
    return make_error(Errc::resource_exhausted,
                      "a string or list of more than 2^32 - 1 elements cannot be encoded");
  return std::move(out_);
}

void WireReader::fail(std::string message) {
  if (failed_) return;
  failed_ = true;
  error_ = std::move(message);
}

bool WireReader::take(std::size_t n, std::string_view field) {
  if (failed_) return false;
  if (n > bytes_.size() - offset_) {
    fail("truncated: " + std::string(field) + " needs " + std::to_string(n) + " byte(s), " +
         std::to_string(bytes_.size() - offset_) + " left");
    return false;
  }
  return true;
}

std::uint8_t WireReader::u8_slow() {
  if (!take(1, "a u8")) return 0;
  return static_cast<std::uint8_t>(bytes_[offset_++]);
}

bool WireReader::boolean() {
  const std::size_t at = offset_;
  std::uint8_t v = u8();
  if (v > 1) fail("a boolean at byte " + std::to_string(at) + " is " + std::to_string(v));
  return v == 1;
}

std::uint32_t WireReader::u32_slow() {
  if (!take(4, "a u32")) return 0;
  std::uint32_t v = load_u32(bytes_, offset_);
  offset_ += 4;
  return v;
}

std::uint64_t WireReader::u64_slow() {
  if (!take(8, "a u64")) return 0;
  std::uint64_t v = load_u64(bytes_, offset_);
  offset_ += 8;
  return v;
}

double WireReader::f64() {
  std::uint64_t bits = u64();
  double v = 0;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

std::string_view WireReader::str_view() {
  std::uint32_t n = u32();
  if (!take(n, "a string")) return {};
  std::string_view v = bytes_.substr(offset_, n);
  offset_ += n;
  return v;
}

std::string WireReader::str() {
  return std::string(str_view());
}

std::size_t WireReader::count(std::size_t min_element_bytes, std::size_t max) {
  const std::size_t at = offset_;
  std::uint32_t n = u32();
  if (failed_) return 0;
  const std::size_t left = bytes_.size() - offset_;
  if (n > max || (min_element_bytes != 0 && n > left / min_element_bytes)) {
    fail("a count of " + std::to_string(n) + " at byte " + std::to_string(at) +
         (n > max ? " is over the limit of " + std::to_string(max)
                  : " cannot fit in the " + std::to_string(left) + " byte(s) left"));
    return 0;
  }
  return n;
}

std::optional<std::uint64_t> WireReader::opt_u64() {
  if (!boolean()) return std::nullopt;
  return u64();
}

std::uint8_t WireReader::enum_u8(std::uint8_t last, std::string_view field) {
  const std::size_t at = offset_;
  std::uint8_t v = u8();
  if (v > last) {
    fail(std::string(field) + " at byte " + std::to_string(at) + " is " + std::to_string(v) +
         ", past the last known value " + std::to_string(last));
    return 0;
  }
  return v;
}

Status WireReader::finish() const {
  if (failed_) return make_error(Errc::corrupt, std::string(what_) + ": " + error_);
  if (offset_ != bytes_.size())
    return make_error(Errc::corrupt,
                      std::string(what_) + ": " + std::to_string(bytes_.size() - offset_) +
                          " byte(s) after the end at byte " + std::to_string(offset_));
  return ok();
}

} // namespace fdo::wire
