// The context-sensitive counts of a profile (ProfileDoc::cs_functions, which
// the context-sensitive PGO round adds; docs/jit.md) summarized for people:
// per function, by source name, how many counters and counts it holds.
// `fdoctl profile show` prints the summary, `fdoctl profile diff` what changed
// in it. Pure formatting, tested alone.
#pragma once

#include "fdo/util/profile.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace fdo::ctl {

struct CsFunctionSummary {
  std::string name;  // PGO name (the key of cs_functions)
  std::string shown; // source name, the PGO name beside it when they differ
  std::size_t counters = 0;
  std::uint64_t total = 0; // sum of its counts
};

// One entry per cs_functions member, most counts first (ties by name).
std::vector<CsFunctionSummary> cs_summary(const ProfileDoc& doc);

// "" when the document has no cs_functions; otherwise a heading with the
// totals and a table of at most `limit` functions, most counts first.
std::string render_cs_functions(const ProfileDoc& doc, std::size_t limit = 10);

} // namespace fdo::ctl
