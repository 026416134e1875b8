#include "fdo/perf/sampler.h"

#include "handles.h"

#include <cerrno>
#include <cstring>
#include <set>
#include <sys/ioctl.h>
#include <sys/mman.h>

namespace fdo::perf {

bool SampleSet::append(const SampleSet& other) {
  if (other.events != events) return false;
  samples.insert(samples.end(), other.samples.begin(), other.samples.end());
  stats += other.stats;
  return true;
}

nlohmann::json to_json(const SamplerEvent& e) {
  return {{"name", e.name},
          {"status", std::string(to_string(e.status))},
          {"errno", e.error},
          {"reason", e.reason},
          {"branch_stack", e.branch_stack}};
}

nlohmann::json to_json(const SampleSet& set) {
  nlohmann::json j;
  j["events"] = set.events;
  std::vector<std::uint64_t> per_event(set.events.size(), 0);
  for (const auto& s : set.samples)
    if (s.event < per_event.size()) ++per_event[s.event];
  j["samples_per_event"] = per_event;
  j["samples"] = set.samples.size();
  j["lost_records"] = set.stats.lost_records;
  j["lost_samples"] = set.stats.lost_samples;
  j["throttles"] = set.stats.throttles;
  j["malformed_records"] = set.stats.malformed;
  j["first_error"] = set.stats.first_error;
  return j;
}

namespace {

struct Ring {
  std::uint32_t event = 0; // index into the configured events
  detail::EventFd fd;
  detail::EventMapping mapping;
  RecordLayout layout;
};

Status validate(const SamplerConfig& c) {
  if (c.events.empty()) return make_error(Errc::invalid_argument, "sampler: no events to sample");
  if (c.events.size() > Sampler::max_events)
    return make_error(Errc::invalid_argument, "sampler: " + std::to_string(c.events.size()) +
                                                  " events, at most " +
                                                  std::to_string(Sampler::max_events));
  std::set<std::string> seen;
  for (const auto& e : c.events) {
    if (e.empty()) return make_error(Errc::invalid_argument, "sampler: empty event name");
    if (!seen.insert(e).second)
      return make_error(Errc::invalid_argument, "sampler: event '" + e + "' listed twice");
  }
  if (c.frequency_hz && c.period)
    return make_error(Errc::invalid_argument, "sampler: give a frequency or a period, not both");
  if (c.frequency_hz && *c.frequency_hz == 0)
    return make_error(Errc::invalid_argument, "sampler: frequency_hz must be > 0");
  if (c.period && *c.period == 0)
    return make_error(Errc::invalid_argument, "sampler: period must be > 0");
  if (c.data_pages == 0 || (c.data_pages & (c.data_pages - 1)) != 0 || c.data_pages > 65536)
    return make_error(Errc::invalid_argument,
                      "sampler: data_pages must be a power of two in [1, 65536], got " +
                          std::to_string(c.data_pages));
  return ok();
}

} // namespace

struct Sampler::Impl {
  Syscalls* sys = nullptr;
  SamplerConfig config;
  std::vector<SamplerEvent> events;
  std::vector<Ring> rings;

  void ioctl_all(unsigned long request, const char* what) {
    for (auto& r : rings) {
      SysResult res = sys->ioctl(r.fd.get(), request, 0);
      if (!res.ok()) {
        SamplerEvent& e = events[r.event];
        e.status = EventStatus::other;
        e.error = res.error;
        e.reason = "'" + e.name + "': ioctl(" + what + ") failed with " + errno_name(res.error);
      }
    }
  }
};

Expected<Sampler> Sampler::open(const SamplerConfig& config, Syscalls& sys) {
  FDO_TRY_STATUS(validate(config));
  auto impl = std::make_unique<Impl>();
  impl->sys = &sys;
  impl->config = config;
  std::optional<HostContext> host;
  auto host_ctx = [&]() -> const HostContext& {
    if (!host) host = host_context(sys);
    return *host;
  };

  std::uint64_t frequency = 0;
  std::string rate_note;
  if (!config.period) {
    frequency = config.frequency_hz.value_or(1000);
    // Above the limit the kernel answers EINVAL; clamp and say so instead.
    auto max_rate = sys.perf_event_max_sample_rate();
    if (max_rate && *max_rate > 0 && frequency > static_cast<std::uint64_t>(*max_rate)) {
      rate_note = "frequency " + std::to_string(frequency) +
                  " Hz clamped to kernel.perf_event_max_sample_rate=" + std::to_string(*max_rate);
      frequency = static_cast<std::uint64_t>(*max_rate);
    }
  }

  const std::size_t ring_bytes = (1 + config.data_pages) * page_size();
  for (std::size_t i = 0; i < config.events.size(); ++i) {
    SamplerEvent ev;
    ev.name = config.events[i];
    auto resolved = resolve_event(ev.name);
    if (!resolved) {
      OpenFailure f = classify_resolve_error(ev.name, resolved.error());
      ev.status = f.status;
      ev.reason = f.reason;
      impl->events.push_back(std::move(ev));
      continue;
    }
    perf_event_attr attr = detail::base_attr(*resolved);
    if (config.period) {
      attr.sample_period = *config.period;
    } else {
      attr.freq = 1;
      attr.sample_freq = frequency;
    }
    attr.sample_type = PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_PERIOD;
    const bool want_branches = config.branch_stack != BranchStack::off;
    if (want_branches) {
      attr.sample_type |= PERF_SAMPLE_BRANCH_STACK;
      // No privilege bits: the kernel takes them from exclude_kernel/hv.
      attr.branch_sample_type = PERF_SAMPLE_BRANCH_ANY;
    }
    SysResult r = sys.perf_event_open(attr, config.thread, -1, -1, 0);
    std::string note = rate_note;
    if (!r.ok() && want_branches && config.branch_stack == BranchStack::if_supported) {
      const int first_error = r.error;
      attr.sample_type &= ~static_cast<std::uint64_t>(PERF_SAMPLE_BRANCH_STACK);
      attr.branch_sample_type = 0;
      r = sys.perf_event_open(attr, config.thread, -1, -1, 0);
      if (r.ok())
        note += std::string(note.empty() ? "" : "; ") + "branch stack not available (" +
                errno_name(first_error) + "): sampling IPs only";
    }
    if (!r.ok()) {
      OpenFailure f = classify_open_error(ev.name + " (sampling)", r.error, host_ctx());
      ev.status = f.status;
      ev.error = f.error;
      ev.reason = f.reason;
      impl->events.push_back(std::move(ev));
      continue;
    }
    Ring ring;
    ring.event = static_cast<std::uint32_t>(i);
    ring.fd = detail::EventFd(sys, static_cast<int>(r.value));
    // Writable: we publish data_tail, so the kernel never overwrites unread
    // records (it counts them in PERF_RECORD_LOST instead).
    MapResult m = sys.mmap(ring_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, ring.fd.get(), 0);
    if (!m.ok()) {
      ev.status = EventStatus::other;
      ev.error = m.error;
      ev.reason = "'" + ev.name + "': mmap of the " + std::to_string(ring_bytes) +
                  "-byte sample ring failed with " + errno_name(m.error) + " (" +
                  std::strerror(m.error) + ")" +
                  (m.error == EPERM || m.error == ENOMEM
                       ? "; lower data_pages or raise kernel.perf_event_mlock_kb"
                       : "");
      impl->events.push_back(std::move(ev));
      continue;
    }
    ring.mapping = detail::EventMapping(sys, m.addr, ring_bytes);
    ring.layout.sample_type = attr.sample_type;
    ring.layout.branch_sample_type = attr.branch_sample_type;
    ev.status = EventStatus::available;
    ev.branch_stack = (attr.sample_type & PERF_SAMPLE_BRANCH_STACK) != 0;
    ev.reason = note;
    impl->events.push_back(std::move(ev));
    impl->rings.push_back(std::move(ring));
  }
  return Sampler(std::move(impl));
}

Sampler::Sampler(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Sampler::Sampler(Sampler&&) noexcept = default;
Sampler& Sampler::operator=(Sampler&&) noexcept = default;
Sampler::~Sampler() = default;

void Sampler::start() {
  // No PERF_EVENT_IOC_RESET: it zeroes the event's count, which a sampler
  // never reads (its samples come from the ring, drained separately), and
  // leaves the distance to the next sample as it was.
  impl_->ioctl_all(PERF_EVENT_IOC_ENABLE, "PERF_EVENT_IOC_ENABLE");
}

void Sampler::stop() {
  impl_->ioctl_all(PERF_EVENT_IOC_DISABLE, "PERF_EVENT_IOC_DISABLE");
}

SampleSet Sampler::drain() {
  SampleSet set;
  set.events = impl_->config.events;
  for (auto& r : impl_->rings) {
    drain_ring(r.mapping.size() == 0
                   ? std::span<std::uint8_t>()
                   : std::span<std::uint8_t>(static_cast<std::uint8_t*>(r.mapping.data()),
                                             r.mapping.size()),
               page_size(), r.layout, r.event, set.samples, set.stats);
  }
  return set;
}

const std::vector<SamplerEvent>& Sampler::events() const {
  return impl_->events;
}

std::size_t Sampler::active_events() const {
  return impl_->rings.size();
}

} // namespace fdo::perf
