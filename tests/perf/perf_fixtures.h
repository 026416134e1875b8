// Test doubles for the perf library: a scriptable Syscalls fake that can fail
// any call with any errno and synthesize kernel payloads, and builders for the
// kernel's ring-buffer format (perf_event_mmap_page + records).
#pragma once

#include "fdo/perf/syscalls.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <vector>

namespace fdo::perf::testing {

struct FakeEvent {
  int fd = -1;
  perf_event_attr attr{};
  int group_fd = -1;
  std::uint64_t id = 0;
  bool closed = false;
  pid_t pid = 0; // the task perf_event_open was asked to watch
};

struct IoctlCall {
  int fd;
  unsigned long request;
  unsigned long arg;
};

class FakeSyscalls final : public Syscalls {
public:
  // --- scripting ---
  using OpenRule = std::function<int(const perf_event_attr&, int group_fd)>; // errno or 0
  std::vector<OpenRule> open_rules;
  void fail_pmu_events(int err) {
    open_rules.push_back([err](const perf_event_attr& a, int) {
      return (a.type == PERF_TYPE_HARDWARE || a.type == PERF_TYPE_HW_CACHE ||
              a.type == PERF_TYPE_RAW || a.type >= PERF_TYPE_MAX)
                 ? err
                 : 0;
    });
  }
  void fail_event(std::uint32_t type, std::uint64_t config, int err) {
    open_rules.push_back([=](const perf_event_attr& a, int) {
      return a.type == type && a.config == config ? err : 0;
    });
  }
  void fail_branch_stack(int err) {
    open_rules.push_back([err](const perf_event_attr& a, int) {
      return (a.sample_type & PERF_SAMPLE_BRANCH_STACK) ? err : 0;
    });
  }
  void fail_all(int err) {
    open_rules.push_back([err](const perf_event_attr&, int) { return err; });
  }

  // Counter values by (type, config); read payloads are synthesized from them.
  std::map<std::pair<std::uint32_t, std::uint64_t>, std::uint64_t> values;
  void set_value(std::uint32_t type, std::uint64_t config, std::uint64_t v) {
    values[{type, config}] = v;
  }
  std::uint64_t time_enabled = 1000;
  std::uint64_t time_running = 1000;
  int eintr_reads = 0;                       // the next N reads fail with EINTR
  int read_errno = 0;                        // every read fails with this (after the EINTRs)
  long short_read = -1;                      // if >= 0, reads return only this many bytes
  std::map<unsigned long, int> ioctl_errors; // request -> errno
  int mmap_errno = 0;
  std::optional<int> paranoid = 2;
  long max_sample_rate = 100000;
  bool user_counters = false;
  // Copied into every one-page mapping (counting groups' user pages).
  perf_event_mmap_page page_template{};
  std::function<std::uint64_t(std::uint32_t)> on_rdpmc;
  std::uint64_t tsc = 1'000'000;
  std::uint64_t tsc_step = 100;

  // --- observation ---
  std::vector<FakeEvent> opened;
  std::vector<IoctlCall> ioctls;
  int reads = 0;
  int rdpmc_calls = 0;
  int bad_closes = 0;
  int bad_unmaps = 0;
  std::map<void*, std::size_t> mappings;
  std::map<int, void*> mapping_by_fd;

  ~FakeSyscalls() override {
    for (auto& [addr, len] : mappings)
      std::free(addr);
  }

  std::size_t open_fds() const {
    std::size_t n = 0;
    for (const auto& e : opened)
      if (!e.closed) ++n;
    return n;
  }
  const FakeEvent* event_by_fd(int fd) const {
    for (const auto& e : opened)
      if (e.fd == fd) return &e;
    return nullptr;
  }
  std::span<std::uint8_t> mapping_for(int fd) {
    void* p = mapping_by_fd.at(fd);
    return {static_cast<std::uint8_t*>(p), mappings.at(p)};
  }
  perf_event_mmap_page* page_for(int fd) {
    return reinterpret_cast<perf_event_mmap_page*>(mapping_for(fd).data());
  }
  int count_ioctls(unsigned long request) const {
    int n = 0;
    for (const auto& c : ioctls)
      if (c.request == request) ++n;
    return n;
  }

  // --- Syscalls ---
  SysResult perf_event_open(const perf_event_attr& attr, pid_t pid, int, int group_fd,
                            unsigned long) override {
    for (const auto& rule : open_rules)
      if (int err = rule(attr, group_fd); err != 0) return {-1, err};
    FakeEvent e;
    e.fd = next_fd_++;
    e.attr = attr;
    e.group_fd = group_fd;
    e.pid = pid;
    e.id = 5000 + static_cast<std::uint64_t>(e.fd) * 7;
    opened.push_back(e);
    return {e.fd, 0};
  }
  SysResult ioctl(int fd, unsigned long request, unsigned long arg) override {
    ioctls.push_back({fd, request, arg});
    if (auto it = ioctl_errors.find(request); it != ioctl_errors.end()) return {-1, it->second};
    const FakeEvent* e = event_by_fd(fd);
    if (e == nullptr || e->closed) return {-1, EBADF};
    if (request == PERF_EVENT_IOC_ID) *reinterpret_cast<std::uint64_t*>(arg) = e->id;
    return {0, 0};
  }
  MapResult mmap(std::size_t length, int, int, int fd, off_t) override {
    if (mmap_errno != 0) return {nullptr, mmap_errno};
    void* p = std::aligned_alloc(4096, (length + 4095) / 4096 * 4096);
    std::memset(p, 0, length);
    if (length == page_size()) std::memcpy(p, &page_template, sizeof page_template);
    mappings[p] = length;
    mapping_by_fd[fd] = p;
    return {p, 0};
  }
  SysResult munmap(void* addr, std::size_t length) override {
    auto it = mappings.find(addr);
    if (it == mappings.end() || it->second != length) {
      ++bad_unmaps;
      return {-1, EINVAL};
    }
    std::free(addr);
    mappings.erase(it);
    for (auto m = mapping_by_fd.begin(); m != mapping_by_fd.end();)
      m = m->second == addr ? mapping_by_fd.erase(m) : std::next(m);
    return {0, 0};
  }
  SysResult read(int fd, void* buf, std::size_t count) override {
    ++reads;
    if (eintr_reads > 0) {
      --eintr_reads;
      return {-1, EINTR};
    }
    if (read_errno != 0) return {-1, read_errno};
    const FakeEvent* e = event_by_fd(fd);
    if (e == nullptr || e->closed) return {-1, EBADF};
    std::vector<std::uint64_t> words;
    if (e->attr.read_format & PERF_FORMAT_GROUP) {
      std::vector<const FakeEvent*> group{e};
      for (const auto& m : opened)
        if (!m.closed && m.group_fd == fd) group.push_back(&m);
      words.push_back(group.size());
      words.push_back(time_enabled);
      words.push_back(time_running);
      for (const FakeEvent* m : group) {
        words.push_back(value_of(*m));
        words.push_back(m->id);
      }
    } else {
      words.push_back(value_of(*e));
      words.push_back(time_enabled);
      words.push_back(time_running);
    }
    std::size_t bytes = std::min(count, words.size() * 8);
    if (short_read >= 0) bytes = std::min<std::size_t>(bytes, static_cast<std::size_t>(short_read));
    std::memcpy(buf, words.data(), bytes);
    return {static_cast<long>(bytes), 0};
  }
  SysResult close(int fd) override {
    for (auto& e : opened)
      if (e.fd == fd && !e.closed) {
        e.closed = true;
        return {0, 0};
      }
    ++bad_closes;
    return {-1, EBADF};
  }
  Expected<int> perf_event_paranoid() override {
    if (!paranoid) return make_error(Errc::io, "fake: paranoid unreadable");
    return *paranoid;
  }
  Expected<long> perf_event_max_sample_rate() override { return max_sample_rate; }
  std::uint64_t rdpmc(std::uint32_t counter) override {
    ++rdpmc_calls;
    return on_rdpmc ? on_rdpmc(counter) : 0;
  }
  std::uint64_t rdtsc() override {
    tsc += tsc_step;
    return tsc;
  }
  bool has_user_counter_instructions() const override { return user_counters; }

private:
  std::uint64_t value_of(const FakeEvent& e) const {
    auto it = values.find({e.attr.type, e.attr.config});
    return it == values.end() ? 0 : it->second;
  }
  int next_fd_ = 100;
};

// --- kernel record builders ---------------------------------------------------

class RecordBytes {
public:
  RecordBytes& u64(std::uint64_t v) { return put(&v, 8); }
  RecordBytes& u32(std::uint32_t v) { return put(&v, 4); }
  RecordBytes& u16(std::uint16_t v) { return put(&v, 2); }
  std::vector<std::uint8_t> bytes;

private:
  RecordBytes& put(const void* p, std::size_t n) {
    // Byte by byte: GCC 12 warns falsely (-Wstringop-overflow, -Warray-bounds)
    // on vector insert/resize of a few bytes here.
    auto* b = static_cast<const std::uint8_t*>(p);
    for (std::size_t i = 0; i < n; ++i)
      bytes.push_back(b[i]);
    return *this;
  }
};

inline std::vector<std::uint8_t> with_header(std::uint32_t type, const RecordBytes& body) {
  RecordBytes r;
  r.u32(type).u16(0).u16(static_cast<std::uint16_t>(8 + body.bytes.size()));
  r.bytes.insert(r.bytes.end(), body.bytes.begin(), body.bytes.end());
  return r.bytes;
}

// A PERF_RECORD_SAMPLE for sample_type IP | TID | PERIOD [| BRANCH_STACK].
struct FixtureBranch {
  std::uint64_t from, to;
  bool mispredicted;
};
inline std::vector<std::uint8_t> sample_record(std::uint64_t ip, std::uint64_t period,
                                               const std::vector<FixtureBranch>* branches = nullptr,
                                               std::uint32_t pid = 42, std::uint32_t tid = 43) {
  RecordBytes b;
  b.u64(ip).u32(pid).u32(tid).u64(period);
  if (branches != nullptr) {
    b.u64(branches->size());
    for (const auto& br : *branches)
      b.u64(br.from).u64(br.to).u64(br.mispredicted ? 1u : 2u);
  }
  return with_header(PERF_RECORD_SAMPLE, b);
}
inline std::vector<std::uint8_t> lost_record(std::uint64_t id, std::uint64_t lost) {
  RecordBytes b;
  b.u64(id).u64(lost);
  return with_header(PERF_RECORD_LOST, b);
}
inline std::vector<std::uint8_t> throttle_record() {
  RecordBytes b;
  b.u64(123).u64(1).u64(1);
  return with_header(PERF_RECORD_THROTTLE, b);
}
// A PERF_RECORD_COMM, which the parser must skip by size.
inline std::vector<std::uint8_t> comm_record() {
  RecordBytes b;
  b.u32(42).u32(43).u64(0x0074736574).u64(0); // "test\0" padded to 16
  return with_header(PERF_RECORD_COMM, b);
}

// Writes records into a ring the way the kernel does: at data_head, wrapping at
// the end of the data area, publishing the new head afterwards.
class RingWriter {
public:
  RingWriter(std::span<std::uint8_t> mapping, std::size_t page, bool set_layout = true)
      : mapping_(mapping), page_(page) {
    auto* meta = reinterpret_cast<perf_event_mmap_page*>(mapping_.data());
    if (set_layout) {
      meta->data_offset = page;
      meta->data_size = mapping.size() - page;
    }
  }
  perf_event_mmap_page* meta() { return reinterpret_cast<perf_event_mmap_page*>(mapping_.data()); }
  std::uint64_t data_size() const { return mapping_.size() - page_; }
  // Starts at an arbitrary (already consumed) position, e.g. just before the end.
  void set_position(std::uint64_t pos) {
    meta()->data_head = pos;
    meta()->data_tail = pos;
  }
  void append(const std::vector<std::uint8_t>& record) {
    std::uint64_t head = meta()->data_head;
    std::uint8_t* data = mapping_.data() + page_;
    for (std::size_t i = 0; i < record.size(); ++i)
      data[(head + i) % data_size()] = record[i];
    __atomic_store_n(&meta()->data_head, head + record.size(), __ATOMIC_RELEASE);
  }

private:
  std::span<std::uint8_t> mapping_;
  std::size_t page_;
};

} // namespace fdo::perf::testing
