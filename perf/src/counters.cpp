#include "fdo/perf/counters.h"

#include "fdo/util/enum_names.h"
#include "handles.h"
#include "user_page.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <limits>
#include <optional>
#include <set>
#include <sys/ioctl.h>
#include <sys/mman.h>

namespace fdo::perf {

namespace {
constexpr EnumNames<ReadMethod, 3> kReadMethodNames{{{
    {ReadMethod::rdpmc, "rdpmc"},
    {ReadMethod::read_syscall, "read_syscall"},
    {ReadMethod::none, "none"},
}}};
} // namespace

std::string_view to_string(ReadMethod method) {
  return kReadMethodNames.name(method);
}

const EventReading* Measurement::find(std::string_view name) const {
  for (const auto& e : events)
    if (e.name == name) return &e;
  return nullptr;
}

nlohmann::json to_json(const EventReading& r) {
  nlohmann::json j;
  j["name"] = r.name;
  j["value"] = r.value ? nlohmann::json(*r.value) : nlohmann::json(nullptr);
  j["raw"] = r.raw;
  j["enabled_ns"] = r.enabled_ns;
  j["running_ns"] = r.running_ns;
  j["running_ratio"] = r.running_ratio;
  j["multiplexed"] = r.multiplexed;
  j["status"] = std::string(to_string(r.status));
  j["reason"] = r.reason;
  j["errno"] = r.error;
  return j;
}

nlohmann::json to_json(const Measurement& m) {
  nlohmann::json j;
  j["events"] = nlohmann::json::array();
  for (const auto& e : m.events)
    j["events"].push_back(to_json(e));
  j["task_clock_ns"] = m.task_clock_ns ? nlohmann::json(*m.task_clock_ns) : nlohmann::json(nullptr);
  j["task_clock_reason"] = m.task_clock_reason;
  j["thread_cpu_ns"] = m.thread_cpu_ns;
  j["process_cpu_ns"] = m.process_cpu_ns;
  j["wall_ns"] = m.wall_ns;
  j["read_method"] = std::string(to_string(m.method));
  return j;
}

namespace {

std::uint64_t load_u64(const std::uint8_t* p) {
  std::uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

std::uint64_t now_ns(clockid_t clock) {
  timespec ts{};
  ::clock_gettime(clock, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ull +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

// read(2) of a perf fd, retrying EINTR (a signal to the worker must not lose
// a measurement). Returns bytes read or the errno.
SysResult read_retrying(Syscalls& sys, int fd, void* buf, std::size_t size) {
  SysResult r;
  for (int attempt = 0; attempt < 1000; ++attempt) {
    r = sys.read(fd, buf, size);
    if (r.ok() || r.error != EINTR) return r;
  }
  return r;
}

constexpr std::uint64_t group_read_format = PERF_FORMAT_GROUP | PERF_FORMAT_TOTAL_TIME_ENABLED |
                                            PERF_FORMAT_TOTAL_TIME_RUNNING | PERF_FORMAT_ID;

} // namespace

Expected<GroupRead> parse_group_read(std::span<const std::uint8_t> bytes) {
  if (bytes.size() < 24)
    return make_error(Errc::corrupt, "perf group read returned " + std::to_string(bytes.size()) +
                                         " bytes, fewer than the 24-byte header");
  GroupRead out;
  const std::uint64_t nr = load_u64(bytes.data());
  out.time_enabled = load_u64(bytes.data() + 8);
  out.time_running = load_u64(bytes.data() + 16);
  if (nr > (bytes.size() - 24) / 16)
    return make_error(Errc::corrupt, "perf group read claims " + std::to_string(nr) +
                                         " counters but carries " + std::to_string(bytes.size()) +
                                         " bytes");
  out.values.resize(nr);
  for (std::uint64_t i = 0; i < nr; ++i) {
    out.values[i].value = load_u64(bytes.data() + 24 + 16 * i);
    out.values[i].id = load_u64(bytes.data() + 32 + 16 * i);
  }
  return out;
}

EventReading scale_reading(std::string name, std::uint64_t raw, std::uint64_t enabled_ns,
                           std::uint64_t running_ns) {
  EventReading r;
  r.name = std::move(name);
  r.raw = raw;
  r.enabled_ns = enabled_ns;
  r.running_ns = running_ns;
  if (running_ns == 0) {
    r.status = EventStatus::multiplexed_to_zero;
    r.running_ratio = 0.0;
    r.reason = "'" + r.name +
               "' was never on a hardware counter during the window (time_running "
               "= 0 of " +
               std::to_string(enabled_ns) +
               " ns enabled): not counted; too many events for the PMU's counters?";
    return r;
  }
  r.status = EventStatus::available;
  if (running_ns >= enabled_ns) {
    r.value = raw;
    r.running_ratio = 1.0;
    return r;
  }
  // 128 bits: raw * enabled overflows 64 bits after a few seconds of cycles.
  unsigned __int128 scaled = static_cast<unsigned __int128>(raw) * enabled_ns / running_ns;
  r.value = scaled > std::numeric_limits<std::uint64_t>::max()
                ? std::numeric_limits<std::uint64_t>::max()
                : static_cast<std::uint64_t>(scaled);
  r.running_ratio = static_cast<double>(running_ns) / static_cast<double>(enabled_ns);
  r.multiplexed = true;
  return r;
}

struct Slot {
  std::string name;
  EventStatus status = EventStatus::other;
  int error = 0;
  std::string reason;
  detail::EventFd fd;
  std::uint64_t id = 0;
  detail::EventMapping page; // user page for rdpmc (group members that need a PMU)
  detail::PageSnapshot begin;
  detail::PageSnapshot end;
};

struct CounterGroup::Impl {
  Syscalls* sys = nullptr;
  GroupOptions options;
  std::vector<Slot> slots;
  int leader = -1; // index into slots
  std::size_t members = 0;
  bool rdpmc_candidate = false; // every member has a user page

  detail::EventFd task_clock;
  std::string task_clock_reason;

  enum class State { idle, running, stopped } state = State::idle;
  std::uint64_t wall_start = 0, wall_end = 0, cpu_start = 0, cpu_end = 0;
  std::uint64_t process_cpu_start = 0, process_cpu_end = 0;
  bool rdpmc_begin_ok = false;
  bool rdpmc_end_ok = false;
  // A failed enable/disable/reset of the group during this window.
  int group_error = 0;
  std::string group_error_reason;
  std::string task_clock_window_error;
  // The task clock's (count, time enabled, time running) when its window
  // began: what a reading subtracts. Not reset per window: its last reading
  // after a stop is where the next window starts (the clock does not move
  // while disabled), so a window costs no PERF_EVENT_IOC_RESET.
  std::array<std::uint64_t, 3> task_clock_base{};
  std::optional<std::array<std::uint64_t, 3>> task_clock_stopped;

  int leader_fd() const { return leader >= 0 ? slots[leader].fd.get() : -1; }
  bool snapshot_all(bool at_end);
  void group_ioctl(unsigned long request, const char* what);
  Measurement read_now();
};

bool CounterGroup::Impl::snapshot_all(bool at_end) {
  if (!rdpmc_candidate || members == 0) return false;
  for (auto& s : slots) {
    if (!s.fd.valid()) continue;
    auto* pc = static_cast<const volatile perf_event_mmap_page*>(s.page.data());
    if (detail::read_user_page(pc, *sys, at_end ? s.end : s.begin) != detail::SnapshotResult::ok)
      return false;
  }
  return true;
}

void CounterGroup::Impl::group_ioctl(unsigned long request, const char* what) {
  if (leader < 0) return;
  SysResult r = sys->ioctl(leader_fd(), request, PERF_IOC_FLAG_GROUP);
  if (!r.ok() && group_error == 0) {
    group_error = r.error;
    group_error_reason = std::string("ioctl(") + what + ") on the counting group failed with " +
                         errno_name(r.error) + " (" + std::strerror(r.error) + ")";
  }
}

Expected<CounterGroup> CounterGroup::open(const std::vector<std::string>& events, Syscalls& sys,
                                          GroupOptions options) {
  if (events.size() > max_events)
    return make_error(Errc::invalid_argument, "counting group: " + std::to_string(events.size()) +
                                                  " events requested, at most " +
                                                  std::to_string(max_events));
  std::set<std::string> seen;
  for (const auto& e : events) {
    if (e.empty()) return make_error(Errc::invalid_argument, "counting group: empty event name");
    if (!seen.insert(e).second)
      return make_error(Errc::invalid_argument, "counting group: event '" + e + "' listed twice");
  }

  auto impl = std::make_unique<Impl>();
  impl->sys = &sys;
  impl->options = options;
  std::optional<HostContext> host;
  auto host_ctx = [&]() -> const HostContext& {
    if (!host) host = host_context(sys);
    return *host;
  };

  const bool want_rdpmc =
      options.read == ReadPreference::rdpmc_if_available && sys.has_user_counter_instructions();
  bool all_paged = want_rdpmc;

  impl->slots.resize(events.size());
  for (std::size_t i = 0; i < events.size(); ++i) {
    Slot& slot = impl->slots[i];
    slot.name = events[i];
    auto resolved = resolve_event(events[i]);
    if (!resolved) {
      OpenFailure f = classify_resolve_error(events[i], resolved.error());
      slot.status = f.status;
      slot.reason = f.reason;
      continue;
    }
    perf_event_attr attr = detail::base_attr(*resolved);
    attr.read_format = group_read_format;
    const bool is_member = impl->leader >= 0;
    SysResult r = sys.perf_event_open(attr, 0, -1, impl->leader_fd(), 0);
    if (!r.ok()) {
      OpenFailure f = classify_open_error(events[i], r.error, host_ctx());
      slot.status = f.status;
      slot.error = f.error;
      slot.reason = f.reason;
      if (is_member && r.error == EINVAL)
        slot.reason += "; as a group member it may not fit on the PMU's counters together with "
                       "the events before it";
      continue;
    }
    slot.fd = detail::EventFd(sys, static_cast<int>(r.value));
    std::uint64_t id = 0;
    SysResult idr =
        sys.ioctl(slot.fd.get(), PERF_EVENT_IOC_ID, reinterpret_cast<unsigned long>(&id));
    if (!idr.ok()) {
      slot.fd.reset();
      slot.status = EventStatus::other;
      slot.error = idr.error;
      slot.reason = "'" + slot.name + "': ioctl(PERF_EVENT_IOC_ID) failed with " +
                    errno_name(idr.error) + ": cannot match its group read values";
      continue;
    }
    slot.id = id;
    slot.status = EventStatus::available;
    if (!is_member) impl->leader = static_cast<int>(i);
    ++impl->members;

    if (all_paged && resolved->needs_pmu()) {
      MapResult m = sys.mmap(page_size(), PROT_READ, MAP_SHARED, slot.fd.get(), 0);
      if (m.ok())
        slot.page = detail::EventMapping(sys, m.addr, page_size());
      else
        all_paged = false; // read(2) still works; rdpmc is an optimisation
    } else {
      all_paged = false;
    }
  }
  impl->rdpmc_candidate = all_paged && impl->members > 0;
  if (!impl->rdpmc_candidate)
    for (auto& s : impl->slots)
      s.page.reset();

  // The software fallback: outside the group so that a multiplexed hardware
  // group never takes CPU time with it.
  auto tc = resolve_event(task_clock_event);
  if (tc) {
    perf_event_attr attr = detail::base_attr(*tc);
    attr.read_format = PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING;
    SysResult r = sys.perf_event_open(attr, 0, -1, -1, 0);
    if (r.ok())
      impl->task_clock = detail::EventFd(sys, static_cast<int>(r.value));
    else
      impl->task_clock_reason = classify_open_error(task_clock_event, r.error, host_ctx()).reason;
  } else {
    impl->task_clock_reason = tc.error().describe();
  }
  return CounterGroup(std::move(impl));
}

CounterGroup::CounterGroup(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CounterGroup::CounterGroup(CounterGroup&&) noexcept = default;
CounterGroup& CounterGroup::operator=(CounterGroup&&) noexcept = default;
CounterGroup::~CounterGroup() = default;

void CounterGroup::start() {
  Impl& g = *impl_;
  g.group_error = 0;
  g.group_error_reason.clear();
  g.task_clock_window_error.clear();
  g.rdpmc_begin_ok = g.rdpmc_end_ok = false;
  // The process clock is a system call (about 1.3 us in a VM): read outside
  // the wall and thread windows so that it does not widen them.
  g.process_cpu_start = now_ns(CLOCK_PROCESS_CPUTIME_ID);
  g.wall_start = now_ns(CLOCK_MONOTONIC);
  g.cpu_start = now_ns(CLOCK_THREAD_CPUTIME_ID);
  if (g.task_clock.valid()) {
    // Read while stopped, the clock's value is this window's start; never
    // read since (the first window, or a window not read after its stop), it
    // is reset instead.
    SysResult r1;
    if (g.task_clock_stopped) {
      g.task_clock_base = *g.task_clock_stopped;
    } else {
      r1 = g.sys->ioctl(g.task_clock.get(), PERF_EVENT_IOC_RESET, 0);
      g.task_clock_base = {};
    }
    g.task_clock_stopped.reset();
    SysResult r2 = g.sys->ioctl(g.task_clock.get(), PERF_EVENT_IOC_ENABLE, 0);
    if (!r1.ok() || !r2.ok())
      g.task_clock_window_error =
          "ioctl on task-clock failed with " + errno_name(r1.ok() ? r2.error : r1.error);
  }
  g.group_ioctl(PERF_EVENT_IOC_RESET, "PERF_EVENT_IOC_RESET");
  g.group_ioctl(PERF_EVENT_IOC_ENABLE, "PERF_EVENT_IOC_ENABLE");
  g.state = Impl::State::running;
  // Last, so that the window the counters see is as tight as possible.
  g.rdpmc_begin_ok = g.group_error == 0 && g.snapshot_all(false);
}

void CounterGroup::stop() {
  Impl& g = *impl_;
  if (g.state != Impl::State::running) return;
  g.rdpmc_end_ok = g.rdpmc_begin_ok && g.snapshot_all(true);
  g.group_ioctl(PERF_EVENT_IOC_DISABLE, "PERF_EVENT_IOC_DISABLE");
  if (g.task_clock.valid()) {
    SysResult r = g.sys->ioctl(g.task_clock.get(), PERF_EVENT_IOC_DISABLE, 0);
    if (!r.ok() && g.task_clock_window_error.empty())
      g.task_clock_window_error =
          "ioctl(PERF_EVENT_IOC_DISABLE) on task-clock failed with " + errno_name(r.error);
  }
  g.cpu_end = now_ns(CLOCK_THREAD_CPUTIME_ID);
  g.wall_end = now_ns(CLOCK_MONOTONIC);
  g.process_cpu_end = now_ns(CLOCK_PROCESS_CPUTIME_ID);
  g.state = Impl::State::stopped;
}

Measurement CounterGroup::read() {
  return impl_->read_now();
}

Measurement CounterGroup::Impl::read_now() {
  Measurement m;
  m.events.reserve(slots.size());
  for (const auto& s : slots) {
    EventReading r;
    r.name = s.name;
    r.status = s.status;
    r.error = s.error;
    r.reason = s.reason;
    m.events.push_back(std::move(r));
  }
  if (state == State::idle) {
    for (auto& r : m.events)
      if (r.status == EventStatus::available) r.reason = "read before start(): nothing measured";
    m.task_clock_reason = task_clock.valid() ? "read before start()" : task_clock_reason;
    return m;
  }

  const bool running = state == State::running;
  m.wall_ns = (running ? now_ns(CLOCK_MONOTONIC) : wall_end) - wall_start;
  m.thread_cpu_ns = (running ? now_ns(CLOCK_THREAD_CPUTIME_ID) : cpu_end) - cpu_start;
  m.process_cpu_ns =
      (running ? now_ns(CLOCK_PROCESS_CPUTIME_ID) : process_cpu_end) - process_cpu_start;

  // Hardware group.
  if (members > 0 && group_error != 0) {
    for (std::size_t i = 0; i < slots.size(); ++i)
      if (slots[i].fd.valid()) {
        m.events[i].status = EventStatus::other;
        m.events[i].error = group_error;
        m.events[i].reason = group_error_reason;
      }
  } else if (members > 0) {
    bool done = false;
    if (rdpmc_begin_ok && (running || rdpmc_end_ok)) {
      bool now_ok = true;
      if (running) now_ok = snapshot_all(true);
      if (now_ok) {
        for (std::size_t i = 0; i < slots.size(); ++i) {
          const Slot& s = slots[i];
          if (!s.fd.valid()) continue;
          EventReading r =
              scale_reading(s.name, s.end.count - s.begin.count, s.end.enabled - s.begin.enabled,
                            s.end.running - s.begin.running);
          m.events[i] = std::move(r);
        }
        m.method = ReadMethod::rdpmc;
        done = true;
      }
    }
    if (!done) {
      std::vector<std::uint8_t> buf(24 + 16 * members);
      SysResult r = read_retrying(*sys, leader_fd(), buf.data(), buf.size());
      std::string failure;
      int failure_errno = 0;
      if (!r.ok()) {
        failure_errno = r.error;
        failure = "read(2) of the counting group failed with " + errno_name(r.error) + " (" +
                  std::strerror(r.error) + ")";
      } else {
        auto parsed = parse_group_read({buf.data(), static_cast<std::size_t>(r.value)});
        if (!parsed) {
          failure = parsed.error().message();
        } else {
          for (std::size_t i = 0; i < slots.size(); ++i) {
            const Slot& s = slots[i];
            if (!s.fd.valid()) continue;
            auto it = std::find_if(parsed->values.begin(), parsed->values.end(),
                                   [&](const GroupReadValue& v) { return v.id == s.id; });
            if (it == parsed->values.end()) {
              m.events[i].status = EventStatus::other;
              m.events[i].reason = "'" + s.name + "': its id " + std::to_string(s.id) +
                                   " is missing from the group read";
              continue;
            }
            m.events[i] =
                scale_reading(s.name, it->value, parsed->time_enabled, parsed->time_running);
          }
          m.method = ReadMethod::read_syscall;
        }
      }
      if (!failure.empty())
        for (std::size_t i = 0; i < slots.size(); ++i)
          if (slots[i].fd.valid()) {
            m.events[i].status = EventStatus::other;
            m.events[i].error = failure_errno;
            m.events[i].reason = "'" + slots[i].name + "': " + failure;
          }
    }
  }

  // Software fallback.
  if (!task_clock.valid()) {
    m.task_clock_reason = task_clock_reason;
  } else if (!task_clock_window_error.empty()) {
    m.task_clock_reason = task_clock_window_error;
  } else {
    std::uint64_t buf[3] = {0, 0, 0};
    SysResult r = read_retrying(*sys, task_clock.get(), buf, sizeof buf);
    if (!r.ok())
      m.task_clock_reason = "read(2) of task-clock failed with " + errno_name(r.error);
    else if (r.value != static_cast<long>(sizeof buf))
      m.task_clock_reason =
          "read(2) of task-clock returned " + std::to_string(r.value) + " bytes, expected 24";
    else {
      if (state == State::stopped) task_clock_stopped = {buf[0], buf[1], buf[2]};
      const std::array<std::uint64_t, 3>& b = task_clock_base;
      EventReading tc =
          scale_reading(std::string(task_clock_event), buf[0] - b[0], buf[1] - b[1], buf[2] - b[2]);
      if (tc.value)
        m.task_clock_ns = tc.value;
      else
        m.task_clock_reason = tc.reason;
    }
  }
  return m;
}

std::vector<EventReading> CounterGroup::statuses() const {
  std::vector<EventReading> out;
  for (const auto& s : impl_->slots) {
    EventReading r;
    r.name = s.name;
    r.status = s.status;
    r.error = s.error;
    r.reason = s.reason;
    out.push_back(std::move(r));
  }
  return out;
}

std::size_t CounterGroup::counting_events() const {
  return impl_->members;
}

ReadMethod CounterGroup::read_method() const {
  const Impl& g = *impl_;
  if (g.members == 0) return ReadMethod::none;
  if (!g.rdpmc_candidate) return ReadMethod::read_syscall;
  for (const auto& s : g.slots) {
    if (!s.fd.valid()) continue;
    auto* pc = static_cast<const volatile perf_event_mmap_page*>(s.page.data());
    if (!pc->cap_user_rdpmc || !pc->cap_user_time) return ReadMethod::read_syscall;
  }
  return ReadMethod::rdpmc;
}

bool CounterGroup::task_clock_available() const {
  return impl_->task_clock.valid();
}

} // namespace fdo::perf
