// The parts of recent partitioned builds, held in fdod's memory so that the
// next compile of the same program in the same mode can take the parts a
// profile rewrite did not reach (docs/jit.md, "Incremental recompiles"): the
// compile worker keeps nothing between jobs. Keyed by tenant scope, program
// (initial key) and mode, so one tenant's parts are never offered to
// another's compile; the least recently used builds go past `max_bytes`.
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

  std::size_t bytes() const;
  std::size_t builds() const;

private:
  struct Entry {
    std::string key;
    std::shared_ptr<const HeldBuild> build;
  };
  static std::string key_of(const std::string& scope, const std::string& ik, CompileMode mode);

  const std::size_t max_bytes_;
  mutable std::mutex mu_;
  std::list<Entry> lru_; // most recent first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  std::size_t bytes_ = 0;
};

} // namespace fdo::daemon
