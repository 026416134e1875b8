// Per-program stage history: each IK's bounded explain records and what the
// program was served at its last stage (the "from" side of the next record,
// and the output an async tier-up serves meanwhile). Beyond max_programs the
// least recently used program is forgotten, so a daemon that sees millions of
// distinct programs keeps bounded memory. Thread-safe (one lock).
#pragma once

#include "bounded.h"
#include "fdo/cache/orchestrator.h"

#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace fdo::cache::detail {

// The entry a program ran with at its last stage.
struct Served {
  std::string storage_key;
  std::string ck;
  std::string digest;
  std::int64_t version = 0;
  CompileMode mode = CompileMode::plain;
};

class ExplainLog {
public:
  ExplainLog(std::size_t records_per_program, std::size_t max_programs);

  // Stamps the record's sequence and time and appends it to its IK's log,
  // dropping that log's oldest record past the bound. `now_serving`, when set,
  // becomes the program's last served entry.
  // Returns the record's sequence.
  std::uint64_t record(ExplainRecord r, const std::optional<Served>& now_serving);
  // Sets exec_ns on IK's record with this sequence, if it is still kept.
  void set_exec_ns(const std::string& ik, std::uint64_t sequence, std::uint64_t exec_ns);
  // Sets the variant (the live A/B guard's role and name) the stage ran.
  void set_variant(const std::string& ik, std::uint64_t sequence, std::string role,
                   std::string name);
  std::optional<Served> last_served(const std::string& ik) const;
  // Oldest first; empty for a program never seen (or forgotten).
  std::vector<ExplainRecord> records(const std::string& ik) const;

private:
  // Applies `change` to IK's record with this sequence, if it is still kept.
  void update(const std::string& ik, std::uint64_t sequence,
              const std::function<void(ExplainRecord&)>& change);
  struct Program {
    std::optional<Served> served;
    std::deque<ExplainRecord> log;
  };

  const std::size_t records_per_program_;
  mutable std::mutex mu_;
  // Reads bump recency too: a program someone asks about stays remembered.
  mutable BoundedLru<Program> programs_;
  std::uint64_t sequence_ = 0;
};

} // namespace fdo::cache::detail
