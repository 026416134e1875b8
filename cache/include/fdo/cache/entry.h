// One cached compilation output and the handle through which stages hold it.
#pragma once

#include "fdo/util/profile.h"

#include <cstdint>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <typeinfo>

namespace fdo::cache {

// What an output was compiled from; stored in the disk header so an entry can
// be checked against the key it was found under.
struct EntryInfo {
  std::string ck;                // the CK this output was compiled for
  std::string compiler_identity; // Compiler::identity() at compile time
  std::string pk;
  std::int64_t profile_version = 0;
  std::string profile_digest;
  CompileMode mode = CompileMode::plain;
  std::string program_hash; // keys.h program_hash(bytes)
  std::int64_t created_unix_ms = 0;

  bool operator==(const EntryInfo&) const = default;
};

nlohmann::json to_json(const EntryInfo& info);

// What a user of an entry decoded from its metadata (the daemon's
// StageMetadata), kept with the entry: decoded once however many stages run
// it, dropped with it. Type-erased, as the cache does not know the compiler's
// types. A copied entry starts with an empty slot (its metadata may change).
class DecodedSlot {
public:
  DecodedSlot() = default;
  DecodedSlot(const DecodedSlot&) {}
  DecodedSlot& operator=(const DecodedSlot&) {
    std::lock_guard lk(mu_);
    value_.reset();
    type_ = nullptr;
    return *this;
  }
  // The value kept as a T, or null (none yet, or kept as another type).
  template <class T> std::shared_ptr<const T> get() const {
    std::lock_guard lk(mu_);
    if (type_ == nullptr || *type_ != typeid(T)) return nullptr;
    return std::static_pointer_cast<const T>(value_);
  }
  template <class T> void set(std::shared_ptr<const T> value) const {
    std::lock_guard lk(mu_);
    type_ = &typeid(T);
    value_ = std::move(value);
  }

private:
  mutable std::mutex mu_;
  mutable std::shared_ptr<const void> value_;
  mutable const std::type_info* type_ = nullptr;
};

struct Entry {
  std::string key; // the storage key: a VK (first stage) or a CK
  EntryInfo info;
  std::string object;   // relocatable object bytes
  std::string metadata; // opaque JSON text from the compiler
  DecodedSlot decoded;  // `metadata` as its user decoded it (not counted in size_bytes)

  // What the entry costs the memory tier (payload plus key/header strings).
  std::uint64_t size_bytes() const;
};

// A counted reference to an entry. While any copy of a handle is alive the
// entry stays in memory, even if the memory tier has marked it for eviction
// (TPU CompiledSubgraph semantics); the last copy going away releases it.
// Copies share one reference.
class EntryRef {
public:
  EntryRef() = default;
  // A handle that owns its entry outright (not managed by a memory tier).
  static EntryRef unmanaged(std::shared_ptr<const Entry> entry) {
    return EntryRef(std::move(entry));
  }
  // Internal: built by MemoryTier with an aliasing pointer whose control block
  // releases the tier's reference.
  explicit EntryRef(std::shared_ptr<const Entry> entry) : entry_(std::move(entry)) {}

  explicit operator bool() const { return entry_ != nullptr; }
  const Entry& operator*() const { return *entry_; }
  const Entry* operator->() const { return entry_.get(); }
  const Entry* get() const { return entry_.get(); }
  void reset() { entry_.reset(); }

private:
  std::shared_ptr<const Entry> entry_;
};

} // namespace fdo::cache
