// Which compiler identity each program (keys.h program_hash) was last compiled
// under, so that the first stage after a compiler upgrade is explained as
// compiler_identity_changed rather than new_program. A bounded LRU in memory
// in front of one small JSON file per program, <dir>/<2 hex>/<hash>, so the
// history survives a restart. Advisory: a missing, unreadable or damaged file
// reads as unknown, and a failed write only logs. Thread-safe.
#pragma once

#include "bounded.h"

#include <cstddef>
#include <mutex>
#include <optional>
#include <string>

namespace fdo::cache::detail {

class IdentityHistory {
public:
  // `dir` empty: in memory only (no state dir).
  IdentityHistory(std::string dir, std::size_t capacity);

  std::optional<std::string> last_identity(const std::string& program_hash);
  // Records `identity` for the program; the file is rewritten only when the
  // identity differs from the one remembered. `ik` is stored for people
  // reading the state dir.
  void remember(const std::string& program_hash, const std::string& identity,
                const std::string& ik);

private:
  std::string file_for(const std::string& program_hash) const;

  const std::string dir_;
  std::mutex mu_;
  BoundedLru<std::string> identities_; // program hash -> compiler identity
};

} // namespace fdo::cache::detail
