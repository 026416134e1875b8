// RAII for perf event fds and their mappings, through the Syscalls seam (so
// the fake in the tests sees every close and munmap and can check for leaks).
#pragma once

#include "fdo/perf/events.h"
#include "fdo/perf/syscalls.h"

#include <cstring>
#include <utility>

namespace fdo::perf::detail {

class EventFd {
public:
  EventFd() = default;
  EventFd(Syscalls& sys, int fd) : sys_(&sys), fd_(fd) {}
  EventFd(EventFd&& o) noexcept : sys_(o.sys_), fd_(std::exchange(o.fd_, -1)) {}
  EventFd& operator=(EventFd&& o) noexcept {
    if (this != &o) {
      reset();
      sys_ = o.sys_;
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  EventFd(const EventFd&) = delete;
  EventFd& operator=(const EventFd&) = delete;
  ~EventFd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void reset() {
    if (fd_ >= 0) sys_->close(fd_);
    fd_ = -1;
  }

private:
  Syscalls* sys_ = nullptr;
  int fd_ = -1;
};

class EventMapping {
public:
  EventMapping() = default;
  EventMapping(Syscalls& sys, void* addr, std::size_t length)
      : sys_(&sys), addr_(addr), length_(length) {}
  EventMapping(EventMapping&& o) noexcept
      : sys_(o.sys_), addr_(std::exchange(o.addr_, nullptr)), length_(std::exchange(o.length_, 0)) {
  }
  EventMapping& operator=(EventMapping&& o) noexcept {
    if (this != &o) {
      reset();
      sys_ = o.sys_;
      addr_ = std::exchange(o.addr_, nullptr);
      length_ = std::exchange(o.length_, 0);
    }
    return *this;
  }
  EventMapping(const EventMapping&) = delete;
  EventMapping& operator=(const EventMapping&) = delete;
  ~EventMapping() { reset(); }

  void* data() const { return addr_; }
  std::size_t size() const { return length_; }
  bool valid() const { return addr_ != nullptr; }
  void reset() {
    if (addr_ != nullptr) sys_->munmap(addr_, length_);
    addr_ = nullptr;
    length_ = 0;
  }

private:
  Syscalls* sys_ = nullptr;
  void* addr_ = nullptr;
  std::size_t length_ = 0;
};

// The attributes every event we open shares: disabled until start(), user
// level only (works at perf_event_paranoid 2 without CAP_PERFMON).
inline perf_event_attr base_attr(const ResolvedEvent& ev) {
  perf_event_attr attr;
  std::memset(&attr, 0, sizeof attr);
  attr.size = sizeof attr;
  attr.type = ev.type;
  attr.config = ev.config;
  attr.config1 = ev.config1;
  attr.config2 = ev.config2;
  attr.disabled = 1;
  attr.exclude_kernel = 1;
  attr.exclude_hv = 1;
  return attr;
}

} // namespace fdo::perf::detail
