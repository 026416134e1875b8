#include "fdo/perf/records.h"

#include <algorithm>
#include <cstring>
#include <linux/perf_event.h>

namespace fdo::perf {

ParseStats& ParseStats::operator+=(const ParseStats& o) {
  records += o.records;
  samples += o.samples;
  lost_records += o.lost_records;
  lost_samples += o.lost_samples;
  throttles += o.throttles;
  unthrottles += o.unthrottles;
  other_records += o.other_records;
  malformed += o.malformed;
  if (first_error.empty()) first_error = o.first_error;
  return *this;
}

bool layout_supported(const RecordLayout& layout) {
  // PERF_SAMPLE_READ's size depends on read_format and the group; we never ask
  // for it. Everything after the branch stack is never read, so any such bit
  // is fine (the record size skips it).
  return (layout.sample_type & PERF_SAMPLE_READ) == 0;
}

namespace {

// Bounds-checked cursor over one record.
class Cursor {
public:
  Cursor(const std::uint8_t* p, std::size_t n) : p_(p), n_(n) {}
  bool u64(std::uint64_t& v) { return take(&v, 8); }
  bool u32(std::uint32_t& v) { return take(&v, 4); }
  bool skip(std::uint64_t bytes) {
    if (bytes > n_ - off_) return false;
    off_ += static_cast<std::size_t>(bytes);
    return true;
  }

private:
  bool take(void* out, std::size_t bytes) {
    if (bytes > n_ - off_) return false;
    std::memcpy(out, p_ + off_, bytes);
    off_ += bytes;
    return true;
  }
  const std::uint8_t* p_;
  std::size_t n_;
  std::size_t off_ = 0;
};

bool parse_sample(Cursor& c, const RecordLayout& layout, std::uint32_t event, Sample& s,
                  std::string& error) {
  auto bad = [&](const char* what) {
    error = what;
    return false;
  };
  const std::uint64_t t = layout.sample_type;
  std::uint64_t u = 0;
  std::uint32_t a = 0, b = 0;
  s.event = event;
  if ((t & PERF_SAMPLE_IDENTIFIER) && !c.u64(u)) return bad("sample truncated in identifier");
  if ((t & PERF_SAMPLE_IP) && !c.u64(s.ip)) return bad("sample truncated in ip");
  if (t & PERF_SAMPLE_TID) {
    if (!c.u32(a) || !c.u32(b)) return bad("sample truncated in pid/tid");
    s.pid = a;
    s.tid = b;
  }
  if ((t & PERF_SAMPLE_TIME) && !c.u64(u)) return bad("sample truncated in time");
  if ((t & PERF_SAMPLE_ADDR) && !c.u64(u)) return bad("sample truncated in addr");
  if ((t & PERF_SAMPLE_ID) && !c.u64(u)) return bad("sample truncated in id");
  if ((t & PERF_SAMPLE_STREAM_ID) && !c.u64(u)) return bad("sample truncated in stream_id");
  if ((t & PERF_SAMPLE_CPU) && (!c.u32(a) || !c.u32(b))) return bad("sample truncated in cpu");
  if (t & PERF_SAMPLE_PERIOD) {
    if (!c.u64(s.period)) return bad("sample truncated in period");
  }
  if (t & PERF_SAMPLE_CALLCHAIN) {
    std::uint64_t nr = 0;
    if (!c.u64(nr) || nr > (1u << 20) || !c.skip(nr * 8))
      return bad("sample truncated in callchain");
  }
  if (t & PERF_SAMPLE_RAW) {
    // u32 size + data, padded by the kernel so the record stays 8-byte aligned.
    if (!c.u32(a) || !c.skip(a)) return bad("sample truncated in raw data");
  }
  if (t & PERF_SAMPLE_BRANCH_STACK) {
    std::uint64_t bnr = 0;
    if (!c.u64(bnr) || bnr > 4096) return bad("sample truncated in branch stack size");
    if ((layout.branch_sample_type & PERF_SAMPLE_BRANCH_HW_INDEX) && !c.u64(u))
      return bad("sample truncated in branch hw_idx");
    s.branches.resize(static_cast<std::size_t>(bnr));
    for (auto& br : s.branches) {
      std::uint64_t flags = 0;
      if (!c.u64(br.from) || !c.u64(br.to) || !c.u64(flags))
        return bad("sample truncated in branch entries");
      br.mispredicted = (flags & 1u) != 0;
      br.predicted = (flags & 2u) != 0;
    }
  }
  return true;
}

} // namespace

void parse_records(std::span<const std::uint8_t> bytes, const RecordLayout& layout,
                   std::uint32_t event, std::vector<Sample>& out, ParseStats& stats) {
  auto fail = [&](std::string msg) {
    ++stats.malformed;
    if (stats.first_error.empty()) stats.first_error = std::move(msg);
  };
  if (!layout_supported(layout)) {
    fail("sample layout with PERF_SAMPLE_READ is not supported");
    return;
  }
  std::size_t off = 0;
  while (off < bytes.size()) {
    if (bytes.size() - off < sizeof(perf_event_header)) {
      fail("truncated record header at offset " + std::to_string(off));
      return;
    }
    perf_event_header h;
    std::memcpy(&h, bytes.data() + off, sizeof h);
    if (h.size < sizeof h || h.size > bytes.size() - off) {
      fail("record at offset " + std::to_string(off) + " has impossible size " +
           std::to_string(h.size));
      return;
    }
    ++stats.records;
    Cursor c(bytes.data() + off + sizeof h, h.size - sizeof h);
    switch (h.type) {
    case PERF_RECORD_SAMPLE: {
      Sample s;
      std::string error;
      if (!parse_sample(c, layout, event, s, error)) {
        fail(error + " (record at offset " + std::to_string(off) + ")");
        // The size field is intact, so the following records are still usable.
        break;
      }
      ++stats.samples;
      out.push_back(std::move(s));
      break;
    }
    case PERF_RECORD_LOST: {
      std::uint64_t id = 0, lost = 0;
      if (!c.u64(id) || !c.u64(lost)) {
        fail("truncated PERF_RECORD_LOST at offset " + std::to_string(off));
        break;
      }
      ++stats.lost_records;
      stats.lost_samples += lost;
      break;
    }
    case PERF_RECORD_THROTTLE:
      ++stats.throttles;
      break;
    case PERF_RECORD_UNTHROTTLE:
      ++stats.unthrottles;
      break;
    default:
      ++stats.other_records;
      break;
    }
    off += h.size;
  }
}

std::size_t drain_ring(std::span<std::uint8_t> mapping, std::size_t page_size,
                       const RecordLayout& layout, std::uint32_t event, std::vector<Sample>& out,
                       ParseStats& stats) {
  auto fail = [&](std::string msg) {
    ++stats.malformed;
    if (stats.first_error.empty()) stats.first_error = std::move(msg);
  };
  if (mapping.size() < page_size + page_size || page_size < sizeof(perf_event_mmap_page)) {
    fail("ring mapping of " + std::to_string(mapping.size()) + " bytes is too small");
    return 0;
  }
  auto* meta = reinterpret_cast<perf_event_mmap_page*>(mapping.data());
  std::uint64_t data_offset = meta->data_offset != 0 ? meta->data_offset : page_size;
  std::uint64_t data_size = meta->data_size != 0 ? meta->data_size : mapping.size() - page_size;
  if (data_offset > mapping.size() || data_size > mapping.size() - data_offset ||
      (data_size & (data_size - 1)) != 0) {
    fail("ring metadata is inconsistent (data_offset " + std::to_string(data_offset) +
         ", data_size " + std::to_string(data_size) + ")");
    return 0;
  }
  // Acquire pairs with the kernel's write barrier before it publishes
  // data_head: record bytes below head are complete once we see head.
  const std::uint64_t head = __atomic_load_n(&meta->data_head, __ATOMIC_ACQUIRE);
  const std::uint64_t tail = meta->data_tail; // only we write it
  if (head == tail) return 0;
  const std::uint64_t avail = head - tail;
  if (avail > data_size) {
    // Cannot happen with a writable mapping (the kernel respects data_tail);
    // the overwritten span is unrecoverable, skip it.
    fail("ring overrun: " + std::to_string(avail) + " bytes pending in a " +
         std::to_string(data_size) + "-byte buffer");
    __atomic_store_n(&meta->data_tail, head, __ATOMIC_RELEASE);
    return static_cast<std::size_t>(avail);
  }
  const std::uint8_t* data = mapping.data() + data_offset;
  std::vector<std::uint8_t> linear(static_cast<std::size_t>(avail));
  const std::size_t begin = static_cast<std::size_t>(tail & (data_size - 1));
  const std::size_t first = std::min<std::size_t>(linear.size(), data_size - begin);
  std::memcpy(linear.data(), data + begin, first);
  if (first < linear.size()) std::memcpy(linear.data() + first, data, linear.size() - first);
  parse_records(linear, layout, event, out, stats);
  // Release: our reads of the records happen before the kernel may reuse them.
  __atomic_store_n(&meta->data_tail, head, __ATOMIC_RELEASE);
  return linear.size();
}

} // namespace fdo::perf
