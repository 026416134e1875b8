#include "fdo/jit/object_set.h"

#include <cstdint>
#include <llvm/Support/Endian.h>

namespace fdo::jit {

namespace {

constexpr std::size_t kCountBytes = 4;
constexpr std::size_t kSizeBytes = 8;

template <typename T> void append_le(std::string& out, T value) {
  char bytes[sizeof(T)];
  llvm::support::endian::write<T, llvm::support::little, 1>(bytes, value);
  out.append(bytes, sizeof(T));
}

template <typename T> T read_le(const char* p) {
  return llvm::support::endian::read<T, llvm::support::little, 1>(p);
}

fdo::Error corrupt(const std::string& why) {
  return make_error(Errc::corrupt, "object set: " + why);
}

} // namespace

std::string pack_objects(std::span<const std::string> objects) {
  if (objects.size() == 1) return objects.front();
  std::size_t total = kObjectSetMagic.size() + kCountBytes + objects.size() * kSizeBytes;
  for (const std::string& o : objects)
    total += o.size();
  std::string out;
  out.reserve(total);
  out.append(kObjectSetMagic);
  append_le<std::uint32_t>(out, static_cast<std::uint32_t>(objects.size()));
  for (const std::string& o : objects)
    append_le<std::uint64_t>(out, o.size());
  for (const std::string& o : objects)
    out.append(o);
  return out;
}

Expected<std::vector<std::string_view>> unpack_objects(std::string_view blob) {
  if (!blob.starts_with(kObjectSetMagic)) return std::vector<std::string_view>{blob};
  std::size_t pos = kObjectSetMagic.size();
  if (blob.size() < pos + kCountBytes) return corrupt("truncated before its count");
  const std::uint32_t count = read_le<std::uint32_t>(blob.data() + pos);
  pos += kCountBytes;
  if (count < 2) return corrupt("a container of " + std::to_string(count) + " object(s)");
  if ((blob.size() - pos) / kSizeBytes < count) return corrupt("truncated in its sizes");
  std::vector<std::uint64_t> sizes(count);
  for (std::uint64_t& s : sizes) {
    s = read_le<std::uint64_t>(blob.data() + pos);
    pos += kSizeBytes;
  }
  std::vector<std::string_view> out;
  out.reserve(count);
  for (std::uint64_t s : sizes) {
    if (s == 0) return corrupt("holds an empty object");
    if (s > blob.size() - pos) return corrupt("truncated in object " + std::to_string(out.size()));
    out.push_back(blob.substr(pos, s));
    pos += s;
  }
  if (pos != blob.size())
    return corrupt(std::to_string(blob.size() - pos) + " byte(s) past its last object");
  return out;
}

} // namespace fdo::jit
