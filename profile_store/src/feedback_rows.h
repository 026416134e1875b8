// Back-end-neutral parts of feedback: validating and merging a batch in
// memory, saturating sums, the stored encoding of count vectors, and the
// batch id rules. Used by the SQLite and the PostgreSQL back ends.
#pragma once

#include "fdo/profile_store/profile_store.h"

#include <cstdint>
#include <limits>
#include <map>
#include <span>
#include <string>
#include <tuple>
#include <vector>

namespace fdo::profile_store::detail {

inline std::uint64_t sat_add(std::uint64_t a, std::uint64_t b) {
  return b > std::numeric_limits<std::uint64_t>::max() - a
             ? std::numeric_limits<std::uint64_t>::max()
             : a + b;
}
// uint64 values are stored bit-for-bit in signed 64-bit columns.
inline std::int64_t as_i64(std::uint64_t v) {
  return static_cast<std::int64_t>(v);
}
inline std::uint64_t as_u64(std::int64_t v) {
  return static_cast<std::uint64_t>(v);
}

// Little-endian uint64 array.
std::vector<std::uint8_t> encode_counts(const std::vector<std::uint64_t>& counts);
Expected<std::vector<std::uint64_t>> decode_counts(const std::vector<std::uint8_t>& bytes,
                                                   const std::string& what);

// (pk, version, host)
using FeedbackKey = std::tuple<std::string, std::int64_t, std::string>;
struct MergedFeedback {
  std::size_t rows = 0;
  FeedbackTotals totals; // stages, exec_ns, counters, function_counts of these rows
};
// Validates every row (keys, version > 0, names, equal count lengths within
// the batch) and sums rows of the same (pk, version, host), so a bad row
// fails the batch before anything is written.
Expected<std::map<FeedbackKey, MergedFeedback>> merge_feedback(std::span<const FeedbackRow> rows);

// A batch id is a key like any other (non-empty when given, bounded).
Status check_batch_id(std::string_view batch_id);

// Adds one host's stored row to totals being built (sums saturate; the
// counts of a function must have one length across hosts).
Status add_host_totals(FeedbackTotals& into, const std::string& host, std::uint64_t stages,
                       std::uint64_t exec_ns, std::int64_t updated_at);

// Adds one host's stored value of counter `name` (saturating).
inline void add_counter(FeedbackTotals& into, const std::string& name, std::uint64_t value) {
  std::uint64_t& sum = into.counters[name];
  sum = sat_add(sum, value);
}

// Adds one host's stored counts of `fn` (corrupt when lengths differ).
Status add_function_counts(FeedbackTotals& into, const std::string& fn,
                           const std::vector<std::uint64_t>& counts, const std::string& what);

std::string length_mismatch(const std::string& what, const std::string& fn, std::size_t got,
                            std::size_t stored);

} // namespace fdo::profile_store::detail
