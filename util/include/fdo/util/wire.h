// Fixed-layout binary encoding for messages between our own processes (the
// exec job and its reply, exec_messages.h) and for on-disk headers: integers
// little-endian at fixed widths, strings and lists prefixed by a u32 count.
//
// WireReader reads bytes that may come from an untrusted process. Every read
// is checked against what is left, and a count is checked against the least
// bytes its elements need before anything is allocated, so a lying count is
// an error, never a huge allocation. The first failure sticks: later reads
// return zero values, and finish() reports the first failure with its offset
// (one check at the end instead of one per field).
#pragma once

#include "fdo/util/expected.h"

#include <bit>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace fdo::wire {

void put_u32(std::string& out, std::uint32_t v);
void put_u64(std::string& out, std::uint64_t v);
// The little-endian value at `offset` (the caller checked the bounds).
inline std::uint32_t load_u32(std::string_view bytes, std::size_t offset) {
  std::uint32_t v;
  std::memcpy(&v, bytes.data() + offset, 4);
  if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap32(v);
  return v;
}
inline std::uint64_t load_u64(std::string_view bytes, std::size_t offset) {
  std::uint64_t v;
  std::memcpy(&v, bytes.data() + offset, 8);
  if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap64(v);
  return v;
}

class WireWriter {
public:
  void u8(std::uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void boolean(bool v) { u8(v ? 1 : 0); }
  void u32(std::uint32_t v) { put_u32(out_, v); }
  void u64(std::uint64_t v) { put_u64(out_, v); }
  void i64(std::int64_t v) { u64(static_cast<std::uint64_t>(v)); }
  void f64(double v);
  // A u32 length, then the bytes. Errc::resource_exhausted (at take()) past 4 GiB.
  void str(std::string_view s);
  // A u32 element count (lists, maps); the caller writes the elements.
  void count(std::size_t n);
  void opt_u64(const std::optional<std::uint64_t>& v) {
    boolean(v.has_value());
    if (v) u64(*v);
  }
  // The bytes written, or the first length that did not fit its prefix.
  Expected<std::string> take() &&;

private:
  std::string out_;
  bool overflow_ = false;
};

class WireReader {
public:
  // `what` names the message in errors ("exec reply").
  WireReader(std::string_view bytes, std::string_view what) : bytes_(bytes), what_(what) {}

  // Inline while the bytes are there and nothing failed; the rest (and the
  // error) out of line.
  std::uint8_t u8() {
    if (failed_ || offset_ >= bytes_.size()) return u8_slow();
    return static_cast<std::uint8_t>(bytes_[offset_++]);
  }
  bool boolean(); // 0 or 1; anything else fails
  std::uint32_t u32() {
    if (failed_ || bytes_.size() - offset_ < 4) return u32_slow();
    std::uint32_t v = load_u32(bytes_, offset_);
    offset_ += 4;
    return v;
  }
  std::uint64_t u64() {
    if (failed_ || bytes_.size() - offset_ < 8) return u64_slow();
    std::uint64_t v = load_u64(bytes_, offset_);
    offset_ += 8;
    return v;
  }
  std::int64_t i64() { return static_cast<std::int64_t>(u64()); }
  double f64();
  std::string str();
  std::string_view str_view(); // valid while the bytes are
  // A count whose elements take at least `min_element_bytes` each: fails
  // when they could not fit in what is left (or past `max`).
  std::size_t count(std::size_t min_element_bytes, std::size_t max = SIZE_MAX);
  std::optional<std::uint64_t> opt_u64();
  // A u8 that must be at most `last` (an enum's last enumerator).
  std::uint8_t enum_u8(std::uint8_t last, std::string_view field);

  bool failed() const { return failed_; }
  std::size_t offset() const { return offset_; }
  // Fails the read with `message` (a value out of range) unless already failed.
  void fail(std::string message);
  // ok() when every read succeeded and no byte is left over; else
  // Errc::corrupt naming the message, the offset and what went wrong.
  Status finish() const;

private:
  bool take(std::size_t n, std::string_view field);
  std::uint8_t u8_slow();
  std::uint32_t u32_slow();
  std::uint64_t u64_slow();
  std::string_view bytes_;
  std::string_view what_;
  std::size_t offset_ = 0;
  bool failed_ = false;
  std::string error_;
};

} // namespace fdo::wire
