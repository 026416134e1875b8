// The parts of recent partitioned builds, held in fdod's memory so that the
// next compile of the same program in the same mode can take the parts a
// profile rewrite did not reach (docs/jit.md, "Incremental recompiles"), and
// the pipeline prefix of each program's last such build, which its next
// compile in any PGO mode can start from ("The pipeline's prefix"): the
// compile worker keeps nothing between jobs. Keyed by tenant scope, program
// (initial key) and, for parts, mode, so one tenant's are never offered to
// another's compile; the least recently used go past `max_bytes`.
// Nothing here is durable: after a restart the first compile is whole.
#pragma once

#include "fdo/daemon/compile_parts.h"
#include "fdo/util/profile.h"

#include <cstddef>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace fdo::daemon {

// What fdod holds at most: about the object sets of a few dozen large
// programs' builds.
inline constexpr std::size_t kHeldPartsBytes = 128u << 20;

class HeldParts {
public:
  explicit HeldParts(std::size_t max_bytes) : max_bytes_(max_bytes) {}

  std::shared_ptr<const HeldBuild> find(const std::string& scope, const std::string& ik,
                                        CompileMode mode);
  // Replaces what is held for the program and mode (a build of one part, or
  // none, removes it).
  void put(const std::string& scope, const std::string& ik, CompileMode mode,
           std::shared_ptr<const HeldBuild> build);

  std::shared_ptr<const HeldPrefixBuild> find_prefix(const std::string& scope,
                                                     const std::string& ik);
  // Replaces the program's prefix (none removes it).
  void put_prefix(const std::string& scope, const std::string& ik,
                  std::shared_ptr<const HeldPrefixBuild> prefix);

  std::size_t bytes() const;
  std::size_t builds() const;   // part sets held
  std::size_t prefixes() const; // prefixes held

private:
  // One part set or one prefix.
  struct Entry {
    std::string key;
    std::shared_ptr<const HeldBuild> build;
    std::shared_ptr<const HeldPrefixBuild> prefix;
    std::size_t bytes = 0;
  };
  static std::string key_of(const std::string& scope, const std::string& ik, CompileMode mode);
  static std::string prefix_key_of(const std::string& scope, const std::string& ik);
  // Under mu_: the entry under `key`, moved to the front, or nullptr.
  Entry* touch_locked(const std::string& key);
  // Under mu_: drops the entry under `key` (into `dropped`, freed by the
  // caller after the lock), then adds `entry` unless it is empty or larger
  // than max_bytes_, and trims the least recently used past max_bytes_.
  void replace_locked(std::string key, Entry entry, std::vector<Entry>& dropped);

  const std::size_t max_bytes_;
  mutable std::mutex mu_;
  std::list<Entry> lru_; // most recent first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  std::size_t bytes_ = 0;
  std::size_t prefixes_ = 0;
};

} // namespace fdo::daemon
