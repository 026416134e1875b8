#include "fdo/daemon/lease_sampling.h"

#include "fdo/daemon/stage_sampling.h"
#include "fdo/perf/capabilities.h"
#include "fdo/util/log.h"

#include <algorithm>
#include <sys/stat.h>
#include <unistd.h>

namespace fdo::daemon {

using nlohmann::json;

namespace {

// jit's entry thunks (jit/src/llvm_support.h): code of the leased output too.
constexpr std::string_view kThunkPrefix = "__fdo_thunk_";
constexpr std::size_t kMaxNameBytes = 1024;
// Larger than any function an object of ours holds; keeps start + size far
// from overflow.
constexpr std::uint64_t kMaxRangeBytes = std::uint64_t{1} << 32;

class RealSamplingHost final : public SamplingHost {
public:
  SamplingAccess access() override {
    SamplingAccess a;
    a.euid = ::geteuid();
    a.perfmon = perf::effective_perf_privilege();
    if (auto p = perf::Syscalls::real().perf_event_paranoid()) a.paranoid = *p;
    return a;
  }
  bool is_thread_of(pid_t pid, pid_t tid) override {
    struct stat sb {};
    const std::string path = "/proc/" + std::to_string(pid) + "/task/" + std::to_string(tid);
    return ::stat(path.c_str(), &sb) == 0;
  }
  std::optional<uid_t> owner(pid_t pid) override {
    // /proc/<pid> belongs to the process's effective uid (root for a
    // non-dumpable one, which then is not ours to sample either).
    struct stat sb {};
    const std::string path = "/proc/" + std::to_string(pid);
    if (::stat(path.c_str(), &sb) != 0) return std::nullopt;
    return sb.st_uid;
  }
  perf::Syscalls& syscalls() override { return perf::Syscalls::real(); }
};

std::optional<std::uint64_t> as_unsigned(const json& v) {
  if (v.is_number_unsigned()) return v.get<std::uint64_t>();
  if (v.is_number_integer() && v.get<std::int64_t>() >= 0)
    return static_cast<std::uint64_t>(v.get<std::int64_t>());
  return std::nullopt;
}

std::optional<pid_t> as_pid(const json& v) {
  if (!v.is_number_integer()) return std::nullopt;
  const auto n = v.get<std::int64_t>();
  if (n <= 0 || n > std::int64_t{1} << 22) return std::nullopt; // PID_MAX_LIMIT
  return static_cast<pid_t>(n);
}

} // namespace

std::shared_ptr<SamplingHost> SamplingHost::real() {
  return std::make_shared<RealSamplingHost>();
}

SamplingVerdict may_sample(const SamplingAccess& host, const SamplingConfig& config, uid_t peer_uid,
                           pid_t peer_pid) {
  if (config.frequency_hz == 0 || config.events.empty())
    return {false, "sampling is off in fdod's configuration (sampling.frequency_hz = 0)"};
  if (peer_pid <= 0)
    return {false, "fdod does not know the runtime's process id on this transport (no "
                   "SO_PEERCRED pid), so it samples no threads"};
  if (host.perfmon)
    return {true, "fdod has CAP_PERFMON (or CAP_SYS_ADMIN): it samples the runtime's threads"};
  if (peer_uid != host.euid)
    return {false, "fdod (uid " + std::to_string(host.euid) +
                       ") lacks CAP_PERFMON and the runtime runs as uid " +
                       std::to_string(peer_uid) +
                       ": the kernel lets it sample only its own uid's threads; grant fdod "
                       "CAP_PERFMON (AmbientCapabilities=CAP_PERFMON) to sample runtimes"};
  if (!host.paranoid)
    return {false, "fdod lacks CAP_PERFMON and cannot read kernel.perf_event_paranoid"};
  if (*host.paranoid > 2)
    return {false, "fdod lacks CAP_PERFMON and kernel.perf_event_paranoid is " +
                       std::to_string(*host.paranoid) +
                       " (above 2 only CAP_PERFMON may open events); grant fdod CAP_PERFMON "
                       "or lower the setting to 2"};
  return {true, "the runtime runs as fdod's own uid and kernel.perf_event_paranoid is " +
                    std::to_string(*host.paranoid) + ": fdod samples its threads (user space)"};
}

LeaseSampling::LeaseSampling(std::shared_ptr<SamplingHost> host, pid_t pid, uid_t uid,
                             SamplingConfig config, const jit::CompileResult& metadata,
                             LeaseSamplingLimits limits)
    : host_(std::move(host)), pid_(pid), uid_(uid), config_(std::move(config)), limits_(limits) {
  for (const jit::EntryInfo& e : metadata.entries) {
    known_names_.insert(e.name);
    known_names_.insert(std::string(kThunkPrefix) + e.name);
  }
  for (const jit::FunctionBlocks& fb : metadata.block_map)
    known_names_.insert(fb.symbol);
  for (const auto& [pgo, source] : metadata.source_names) {
    (void)source;
    known_names_.insert(pgo);
    // A local function's symbol is its PGO name after "<file>:".
    if (auto colon = pgo.find(':'); colon != std::string::npos)
      known_names_.insert(pgo.substr(colon + 1));
  }
  for (const auto& [canonical, source] : metadata.local_names) {
    (void)source;
    known_names_.insert(canonical);
  }
  blocks_ = metadata.block_map;
}

Status LeaseSampling::set_ranges(const json& ranges) {
  if (!ranges.is_array() || ranges.size() > limits_.max_ranges)
    return make_error(Errc::invalid_argument, "ranges must be an array of at most " +
                                                  std::to_string(limits_.max_ranges) +
                                                  " {name, start, size} objects");
  std::vector<jit::FunctionRange> out;
  out.reserve(ranges.size());
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    const json& r = ranges[i];
    const std::string at = "ranges[" + std::to_string(i) + "]";
    const auto start = r.is_object() ? as_unsigned(r.value("start", json())) : std::nullopt;
    const auto size = r.is_object() ? as_unsigned(r.value("size", json())) : std::nullopt;
    if (!start || !size || !r.contains("name") || !r["name"].is_string())
      return make_error(Errc::invalid_argument,
                        at + " must be {\"name\": string, \"start\": address, \"size\": bytes}");
    jit::FunctionRange fr{r["name"].get<std::string>(), *start, *size};
    if (fr.name.size() > kMaxNameBytes || known_names_.count(fr.name) == 0)
      return make_error(Errc::invalid_argument,
                        at + " names '" + fr.name.substr(0, 80) +
                            "', which is not a function of the leased output");
    if (fr.size == 0 || fr.size > kMaxRangeBytes || fr.start > UINT64_MAX - fr.size)
      return make_error(Errc::invalid_argument,
                        at + " ('" + fr.name + "') has a size of " + std::to_string(fr.size) +
                            " bytes at " + std::to_string(fr.start) +
                            "; expected 1 to 2^32 bytes within the address space");
    for (const jit::FunctionBlocks& fb : blocks_)
      if (fb.symbol == fr.name) fr.blocks = fb.ranges;
    out.push_back(std::move(fr));
  }
  std::sort(out.begin(), out.end(), [](const jit::FunctionRange& a, const jit::FunctionRange& b) {
    return a.start < b.start;
  });
  for (std::size_t i = 1; i < out.size(); ++i)
    if (out[i - 1].start + out[i - 1].size > out[i].start)
      return make_error(Errc::invalid_argument,
                        "ranges of '" + out[i - 1].name + "' and '" + out[i].name + "' overlap");
  std::lock_guard lk(mu_);
  ranges_ = std::move(out);
  return ok();
}

Status LeaseSampling::add_threads(const json& tids) {
  if (!tids.is_array())
    return make_error(Errc::invalid_argument, "threads must be an array of thread ids");
  std::vector<pid_t> wanted;
  for (const json& t : tids) {
    auto tid = as_pid(t);
    if (!tid)
      return make_error(Errc::invalid_argument, "threads holds " + t.dump() + ", not a thread id");
    wanted.push_back(*tid);
  }
  // The connection's process must still be the tenant's: a pid reused by
  // another uid's process is never sampled.
  if (host_->owner(pid_) != std::optional<uid_t>(uid_))
    return make_error(Errc::permission_denied,
                      "process " + std::to_string(pid_) +
                          " (this connection's peer) is gone or no longer runs as uid " +
                          std::to_string(uid_) + "; fdod samples no threads for it");
  for (pid_t tid : wanted)
    if (!host_->is_thread_of(pid_, tid))
      return make_error(Errc::permission_denied,
                        "thread " + std::to_string(tid) + " is not a thread of process " +
                            std::to_string(pid_) +
                            " (this connection's peer); fdod samples only the threads of the "
                            "process that holds the lease");
  std::lock_guard lk(mu_);
  for (pid_t tid : wanted) {
    if (samplers_.count(tid) != 0) continue;
    if (samplers_.size() >= limits_.max_threads) {
      ++refused_;
      continue;
    }
    perf::SamplerConfig sc;
    sc.events = config_.events;
    sc.frequency_hz = config_.frequency_hz;
    sc.branch_stack = perf::BranchStack::if_supported;
    sc.data_pages = limits_.data_pages;
    sc.thread = tid;
    auto s = perf::Sampler::open(sc, host_->syscalls());
    if (!s) {
      last_error_ = s.error().describe();
      return std::move(s).error().context("sampling thread " + std::to_string(tid));
    }
    events_ = s->events();
    if (s->active_events() == 0) continue; // every event refused: the reasons are in events_
    s->start();
    samplers_.emplace(tid, std::move(*s));
  }
  return ok();
}

json LeaseSampling::state() const {
  std::lock_guard lk(mu_);
  json events = json::array();
  bool any = false;
  for (const perf::SamplerEvent& e : events_) {
    events.push_back(perf::to_json(e));
    any = any || e.status == perf::EventStatus::available;
  }
  std::string reason;
  if (events_.empty())
    reason = "no thread reported yet";
  else if (!any)
    reason = "no event could be opened on the runtime's threads (see events)";
  else
    reason = "sampling " + std::to_string(samplers_.size()) + " thread(s) of process " +
             std::to_string(pid_);
  if (!last_error_.empty()) reason += "; " + last_error_;
  return {{"available", any},
          {"reason", reason},
          {"threads", samplers_.size()},
          {"threads_refused", refused_},
          {"events", std::move(events)},
          {"frequency_hz", config_.frequency_hz},
          {"ranges", ranges_.size()}};
}

std::optional<StageObservation> LeaseSampling::drain() {
  std::lock_guard lk(mu_);
  if (samplers_.empty() || ranges_.empty()) return std::nullopt;
  perf::SampleSet all;
  all.events = config_.events;
  for (auto it = samplers_.begin(); it != samplers_.end();) {
    all.append(it->second.drain());
    // A thread that ended stays silent; its rings go with it.
    if (!host_->is_thread_of(pid_, it->first))
      it = samplers_.erase(it);
    else
      ++it;
  }
  StageSamplingRequest request{config_.events, config_.frequency_hz, config_.max_samples};
  auto samples = stage_sample_report(events_, request, std::move(all), ranges_);
  if (!samples) {
    log::debug("in-process sampling of process " + std::to_string(pid_) + ": " +
               samples.error().describe());
    return std::nullopt;
  }
  StageObservation out;
  out.samples = std::move(*samples);
  // Names and extents only: the block maps stay here (what the time shares need).
  auto& ranges = out.function_ranges.emplace();
  ranges.reserve(ranges_.size());
  for (const jit::FunctionRange& r : ranges_)
    ranges.push_back({r.name, r.start, r.size});
  return out;
}

} // namespace fdo::daemon
