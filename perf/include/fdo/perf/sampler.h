// Sampling of (miss) events into per-event ring buffers, for attribution to
// JIT-compiled functions. Each event gets its own perf_event fd and ring
// (1 + 2^n pages, mapped writable so the kernel never overwrites unread
// records: it emits PERF_RECORD_LOST instead). Like CounterGroup, this never
// fails at the caller for missing hardware: events that cannot be opened
// carry a status and a reason.
#pragma once

#include "fdo/perf/events.h"
#include "fdo/perf/records.h"
#include "fdo/perf/syscalls.h"
#include "fdo/util/expected.h"

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <sys/types.h>
#include <vector>

namespace fdo::perf {

// off: never; if_supported: ask, and fall back without it when the PMU
// refuses (noted in the event's reason); required: an event that cannot
// record a branch stack is not opened.
enum class BranchStack { off, if_supported, required };

struct SamplerConfig {
  std::vector<std::string> events{"branch-misses", "L1-icache-load-misses"};
  // Exactly one of these; neither means frequency_hz = 1000.
  std::optional<std::uint64_t> frequency_hz;
  std::optional<std::uint64_t> period;
  BranchStack branch_stack = BranchStack::if_supported;
  // Per event, a power of two. Rings are locked memory: unprivileged processes
  // get kernel.perf_event_mlock_kb (516 KiB) per online CPU in all.
  std::size_t data_pages = 32;
  // The thread sampled: 0 is the calling thread; another thread id needs
  // the kernel's leave (ptrace access to it, or CAP_PERFMON). One thread per
  // Sampler: per-task rings cannot follow a task's new threads (inherit).
  pid_t thread = 0;
};

struct SamplerEvent {
  std::string name;
  EventStatus status = EventStatus::other;
  int error = 0;
  std::string reason;        // why not opened, or notes (branch stack fell back)
  bool branch_stack = false; // records carry a branch stack
  bool operator==(const SamplerEvent&) const = default;
};

nlohmann::json to_json(const SamplerEvent& event);

// Samples drained from the rings, with the names their `event` index refers to.
struct SampleSet {
  std::vector<std::string> events;
  std::vector<Sample> samples;
  ParseStats stats;

  // Appends `other` (same event list required; returns false otherwise).
  bool append(const SampleSet& other);
};
nlohmann::json to_json(const SampleSet& set); // counts only, not every sample

class Sampler {
public:
  static constexpr std::size_t max_events = 16;
  // Fails only on a malformed config (no events, empty/duplicate names, both
  // frequency and period, zero rate, data_pages not a power of two).
  static Expected<Sampler> open(const SamplerConfig& config, Syscalls& sys = Syscalls::real());

  Sampler(Sampler&&) noexcept;
  Sampler& operator=(Sampler&&) noexcept;
  Sampler(const Sampler&) = delete;
  Sampler& operator=(const Sampler&) = delete;
  ~Sampler();

  void start();
  void stop();
  // Everything recorded since the last drain. Safe while running; drain often
  // enough that the rings do not fill (lost samples are counted, not fatal).
  SampleSet drain();

  const std::vector<SamplerEvent>& events() const;
  // Number of events actually sampling.
  std::size_t active_events() const;

private:
  struct Impl;
  explicit Sampler(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

} // namespace fdo::perf
