// Self-monitoring counting group around one execution (the exec worker wraps
// the JIT-compiled call in measure()). One perf group (the first event that
// opens leads; the rest are members), user level only, so it works at
// perf_event_paranoid 2. Beside it, always: task-clock (a software event,
// where it opens), the thread's CPU time (CLOCK_THREAD_CPUTIME_ID) and wall
// time (CLOCK_MONOTONIC). Nothing here throws or fails at the caller: events
// that cannot be opened or read carry a status and a reason, and the software
// figures are always there.
//
// Counting is per thread (pid 0, cpu -1, no inherit): open, start, stop and
// read on the thread that runs the measured code.
#pragma once

#include "fdo/perf/events.h"
#include "fdo/perf/syscalls.h"
#include "fdo/util/expected.h"

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace fdo::perf {

enum class ReadMethod { rdpmc, read_syscall, none };
std::string_view to_string(ReadMethod method);

// rdpmc_if_available: read through the mmap'd user page (RDPMC) where the
// kernel sets cap_user_rdpmc and cap_user_time, read(2) otherwise.
enum class ReadPreference { rdpmc_if_available, read_syscall_only };

struct GroupOptions {
  ReadPreference read = ReadPreference::rdpmc_if_available;
};

struct EventReading {
  std::string name;
  // Scaled for multiplexing (raw * enabled / running); absent when the event
  // did not count (not opened, running == 0, read failed).
  std::optional<std::uint64_t> value;
  std::uint64_t raw = 0;
  std::uint64_t enabled_ns = 0;
  std::uint64_t running_ns = 0;
  double running_ratio = 0.0; // running / enabled (1.0: counted all the time)
  bool multiplexed = false;   // running < enabled: value is an estimate
  EventStatus status = EventStatus::other;
  std::string reason; // empty when available and counted
  int error = 0;      // errno behind the status, 0 if none
  bool operator==(const EventReading&) const = default;
};

struct Measurement {
  std::vector<EventReading> events; // in the order asked for
  // task-clock event (ns on CPU, user and kernel); absent when it could not be
  // opened or read (then task_clock_reason says why).
  std::optional<std::uint64_t> task_clock_ns;
  std::string task_clock_reason;
  std::uint64_t thread_cpu_ns = 0; // CLOCK_THREAD_CPUTIME_ID delta: never fails
  // CLOCK_PROCESS_CPUTIME_ID delta: every thread of the process, those the
  // measured code started included; never fails.
  std::uint64_t process_cpu_ns = 0;
  std::uint64_t wall_ns = 0; // CLOCK_MONOTONIC delta: never fails
  ReadMethod method = ReadMethod::none;

  // The reading for `name`, or nullptr.
  const EventReading* find(std::string_view name) const;
  bool operator==(const Measurement&) const = default;
};
nlohmann::json to_json(const EventReading& reading);
nlohmann::json to_json(const Measurement& measurement);

// What a PERF_FORMAT_GROUP | TOTAL_TIME_ENABLED | TOTAL_TIME_RUNNING | ID read
// returned. Pure parsing so the payload format is tested on its own.
struct GroupReadValue {
  std::uint64_t value = 0;
  std::uint64_t id = 0;
};
struct GroupRead {
  std::uint64_t time_enabled = 0;
  std::uint64_t time_running = 0;
  std::vector<GroupReadValue> values;
};
Expected<GroupRead> parse_group_read(std::span<const std::uint8_t> bytes);

// Multiplexing scaling of one counter: value = raw * enabled / running
// (128-bit intermediate); running == 0 -> multiplexed_to_zero, no value.
EventReading scale_reading(std::string name, std::uint64_t raw, std::uint64_t enabled_ns,
                           std::uint64_t running_ns);

class CounterGroup {
public:
  // Opens every event it can; fails only on a malformed request (empty or
  // duplicate names, more than max_events). Unknown or unavailable events are
  // recorded with their status and skipped.
  static constexpr std::size_t max_events = 32;
  static Expected<CounterGroup> open(const std::vector<std::string>& events,
                                     Syscalls& sys = Syscalls::real(), GroupOptions options = {});

  CounterGroup(CounterGroup&&) noexcept;
  CounterGroup& operator=(CounterGroup&&) noexcept;
  CounterGroup(const CounterGroup&) = delete;
  CounterGroup& operator=(const CounterGroup&) = delete;
  ~CounterGroup();

  // Resets and enables the group and task-clock; takes the clock start points.
  void start();
  // Disables them; takes the clock end points.
  void stop();
  // The figures since start(): after stop(), the window start..stop; before
  // stop(), start..now (counters keep running).
  Measurement read();

  // Per-event open status (value fields unset), in request order.
  std::vector<EventReading> statuses() const;
  // Number of events in the perf group (0 when nothing opened).
  std::size_t counting_events() const;
  // rdpmc when every group member's user page allows it, read_syscall when the
  // group is read with read(2), none when the group is empty.
  ReadMethod read_method() const;
  bool task_clock_available() const;

private:
  struct Impl;
  explicit CounterGroup(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Runs f between start() and stop() (stop() also runs if f throws) and returns read().
template <class F> Measurement measure(CounterGroup& group, F&& f) {
  struct Stopper {
    CounterGroup& g;
    bool armed = true;
    ~Stopper() {
      if (armed) g.stop();
    }
  } stopper{group};
  group.start();
  std::forward<F>(f)();
  stopper.armed = false;
  group.stop();
  return group.read();
}

} // namespace fdo::perf
