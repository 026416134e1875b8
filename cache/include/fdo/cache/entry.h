// One cached compilation output and the handle through which stages hold it.
#pragma once

#include "fdo/util/profile.h"

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

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

struct Entry {
  std::string key; // the storage key: a VK (first stage) or a CK
  EntryInfo info;
  std::string object;   // relocatable object bytes
  std::string metadata; // opaque JSON text from the compiler

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
