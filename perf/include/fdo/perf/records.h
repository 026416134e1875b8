// The kernel's sample ring buffer, as pure functions over bytes: what a
// perf_event mmap region (struct perf_event_mmap_page followed by 2^n data
// pages) holds, how records wrap at the end of the data area, and how the
// records we ask for (PERF_RECORD_SAMPLE, PERF_RECORD_LOST, THROTTLE) are laid
// out. The Sampler runs these over the live mapping; tests run them over
// fixtures built byte by byte.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace fdo::perf {

struct BranchEntry {
  std::uint64_t from = 0;
  std::uint64_t to = 0;
  bool mispredicted = false;
  bool predicted = false;
};

struct Sample {
  std::uint32_t event = 0; // index into the SampleSet's event names
  std::uint64_t ip = 0;
  std::uint32_t pid = 0;
  std::uint32_t tid = 0;
  std::uint64_t period = 1; // events this sample stands for (PERF_SAMPLE_PERIOD)
  std::vector<BranchEntry> branches;
};

// What the sample records of one event contain (copied from its perf_event_attr).
struct RecordLayout {
  std::uint64_t sample_type = 0;        // PERF_SAMPLE_* bits
  std::uint64_t branch_sample_type = 0; // for PERF_SAMPLE_BRANCH_HW_INDEX
  std::uint64_t read_format = 0;        // needed only if PERF_SAMPLE_READ (rejected)
  bool sample_id_all = false;           // trailing sample_id on non-sample records
};
// Sample types parse_records understands; others make the layout unsupported.
bool layout_supported(const RecordLayout& layout);

struct ParseStats {
  std::uint64_t records = 0;
  std::uint64_t samples = 0;
  std::uint64_t lost_records = 0; // PERF_RECORD_LOST records seen
  std::uint64_t lost_samples = 0; // sum of their `lost` counts
  std::uint64_t throttles = 0;
  std::uint64_t unthrottles = 0;
  std::uint64_t other_records = 0; // skipped by size (MMAP, COMM, ...)
  std::uint64_t malformed = 0;     // records that could not be parsed (rest skipped)
  std::string first_error;

  ParseStats& operator+=(const ParseStats& other);
};

// Parses a contiguous run of records. Stops at the first malformed record
// (counted, described in first_error); never reads past `bytes`.
void parse_records(std::span<const std::uint8_t> bytes, const RecordLayout& layout,
                   std::uint32_t event, std::vector<Sample>& out, ParseStats& stats);

// Drains a live (or fixture) ring: `mapping` is the whole region (metadata page
// followed by the data area). Reads data_head with acquire ordering, copies
// [data_tail, data_head) out of the circular data area (records may straddle
// its end), parses it, then publishes data_tail with release ordering so the
// kernel may reuse the space. Returns the number of bytes consumed.
std::size_t drain_ring(std::span<std::uint8_t> mapping, std::size_t page_size,
                       const RecordLayout& layout, std::uint32_t event, std::vector<Sample>& out,
                       ParseStats& stats);

} // namespace fdo::perf
