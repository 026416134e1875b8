#include "fdo/daemon/gpu_tuning.h"

#include "adapters.h"
#include "fdo/util/log.h"

#include <algorithm>

namespace fdo::daemon {

namespace ps = fdo::profile_store;

namespace {

// A trial whose shape no stage has had for this many stages is given up
// (the program stopped running it): another may start.
int abandon_after(const TrialConfig& c) {
  return std::max(64, 4 * c.max_pairs);
}

// The launch bounds tried for a launch of `threads` per block, in order:
// bounds of its block, then the same with a register cap that fits two
// blocks on a multiprocessor (.minnctapersm 2, as CUDA's
// __launch_bounds__(threads, 2)). Each is tried once (the profile's trials
// say which were) against the build of the moment; none once a bound for
// another block size is kept.
constexpr int kMinBlocksLadder[] = {0, 2};

std::optional<GpuKernelBounds> next_candidate(const ProfileDoc* current,
                                              const GpuKernelBounds* kept, const std::string& arch,
                                              const std::string& kernel, int threads) {
  if (kept != nullptr && kept->max_threads != threads) return std::nullopt;
  for (int min_blocks : kMinBlocksLadder) {
    GpuKernelBounds b{arch, kernel, threads, min_blocks};
    if (kept != nullptr && *kept == b) continue; // what the current build has
    if (current != nullptr && find_trial(current->gpu, b) != nullptr) continue;
    return b;
  }
  return std::nullopt;
}

TrialVerdict stored_verdict(Verdict v) {
  switch (v) {
  case Verdict::accepted:
    return TrialVerdict::accepted;
  case Verdict::rejected:
    return TrialVerdict::rejected;
  default:
    return TrialVerdict::no_difference;
  }
}

} // namespace

std::string_view to_string(GpuBuild b) {
  switch (b) {
  case GpuBuild::current:
    return "current";
  case GpuBuild::candidate:
    return "candidate";
  case GpuBuild::unbounded:
    return "unbounded";
  }
  return "current";
}

std::string describe(const GpuKernelBounds& b) {
  std::string s = "launch bounds " + std::to_string(b.max_threads);
  if (b.min_blocks_per_sm > 0) s += ", " + std::to_string(b.min_blocks_per_sm) + " blocks/SM";
  return s;
}

GpuTuner::GpuTuner(FeedbackStore& store, std::string host)
    : store_(store), host_(std::move(host)) {}

GpuStagePlan GpuTuner::plan(const std::string& pk, const ProfileDoc* current, std::int64_t version,
                            const std::string& arch, const GpuStageShape& shape, bool comparable,
                            const GuardConfig& config) {
  GpuStagePlan p;
  const std::uint64_t threads = shape.block.count();
  const GpuKernelBounds* kept = current ? find_bounds(current->gpu, arch, shape.kernel) : nullptr;
  if (kept != nullptr && threads > static_cast<std::uint64_t>(kept->max_threads)) {
    // The kept bound would refuse this launch: a build without it.
    ProfileDoc doc = *current;
    std::erase(doc.gpu.launch_bounds, *kept);
    p.build = GpuBuild::unbounded;
    p.bounds = *kept;
    p.variant = profile_ref(pk, version, std::move(doc));
    return p;
  }
  if (!comparable || config.mode == GuardMode::off || threads == 0 || threads > 1024) return p;
  {
    std::lock_guard lk(mu_);
    auto it = running_.find(pk);
    if (it == running_.end() || !it->second.trial) {
      const std::optional<GpuKernelBounds> next =
          next_candidate(current, kept, arch, shape.kernel, static_cast<int>(threads));
      if (!next) return p; // every candidate for this launch was tried
      // A trial starts once one shape has run guard.min_stages stages in a
      // row: a program run a few times is served as it is.
      Running& w = running_[pk];
      if (!(w.shape == shape)) {
        w.shape = shape;
        w.seen = 0;
      }
      if (++w.seen <= config.min_stages) return p;
      // A trial compiles its candidate from the profile: a program without
      // one gets it first (start_profile), and the trial starts at the next stage.
      if (current == nullptr) {
        p.wants_profile = true;
        return p;
      }
      w.id = next_id_++;
      w.bounds = *next;
      w.trial = Trial(trial_seed(pk, shape.kernel + " " + describe(*next) + " " + arch, version));
      w.other_stages = 0;
      it = running_.find(pk);
    }
    Running& r = it->second;
    if (!(r.shape == shape)) {
      if (++r.other_stages > abandon_after(config.trial)) {
        log::info("GPU trial of " + describe(r.bounds) + " for kernel " + r.bounds.kernel +
                  " of profile " + pk.substr(0, 12) + " given up: no comparable stage in " +
                  std::to_string(r.other_stages) + " stages");
        running_.erase(it);
      }
      return p;
    }
    r.other_stages = 0;
    p.trial = r.id;
    p.arm = r.trial->next_arm();
    p.bounds = r.bounds;
  }
  if (p.arm == Arm::candidate) {
    ProfileDoc doc = current ? *current : ProfileDoc{};
    set_bounds(doc.gpu, p.bounds);
    p.build = GpuBuild::candidate;
    p.variant = profile_ref(pk, version, std::move(doc));
  }
  return p;
}

Expected<GpuTrialProgress> GpuTuner::record(const std::string& pk, const GpuStagePlan& plan,
                                            double median_ms, const GuardConfig& config,
                                            const GpuWriter& who) {
  GpuTrialProgress out;
  if (!plan.trial) return out;
  out.trial = *plan.trial;
  GpuKernelBounds bounds;
  {
    std::lock_guard lk(mu_);
    auto it = running_.find(pk);
    if (it == running_.end() || !it->second.trial || it->second.id != *plan.trial)
      return out; // given up meanwhile
    Trial& t = *it->second.trial;
    t.add(plan.arm, median_ms);
    out.result = t.evaluate(config.trial);
    if (out.result.verdict == Verdict::undecided) return out;
    bounds = it->second.bounds;
    running_.erase(it);
  }
  out.decided = true;
  GpuBoundsTrial rec{bounds, stored_verdict(out.result.verdict), out.result.ratio,
                     out.result.pairs};
  const std::string reason = "GPU trial of " + describe(bounds) + " for kernel " + bounds.kernel +
                             " on " + bounds.arch + ": " + std::string(to_string(rec.verdict)) +
                             ", " + describe_ratio(rec.ratio) + " over " +
                             std::to_string(rec.pairs) + " pairs";
  log::info(reason + " (profile " + pk.substr(0, 12) + ")");
  FDO_TRY(out.written_version, rewrite(pk, reason, who, [&](ProfileDoc& doc) {
            doc.gpu.trials.push_back(rec);
            if (rec.verdict == TrialVerdict::accepted) set_bounds(doc.gpu, bounds);
          }));
  return out;
}

Expected<std::int64_t> GpuTuner::remember_launch(const std::string& pk, GpuLaunchRecord record,
                                                 const GpuWriter& who) {
  const std::string reason = "GPU launch of " + record.kernel + " tuned for " +
                             std::to_string(record.items) + " items on " + record.arch;
  return rewrite(pk, reason, who, [&](ProfileDoc& doc) { set_launch(doc.gpu, record); });
}

Expected<std::int64_t> GpuTuner::start_profile(const std::string& pk, const GpuWriter& who) {
  for (int attempt = 1;; ++attempt) {
    FDO_TRY(ps::SharedProfile cur, store_.current(pk));
    if (cur) return cur->version;
    ps::WriteInfo info;
    info.source = ps::WriteSource::feedback;
    info.reason = "GPU program: a profile for its tuned launches and launch-bound trials";
    info.owner = who.owner;
    info.host = host_;
    info.stage = who.stage;
    info.program = who.program;
    auto written = store_.write(pk, 0, ProfileDoc{}, info);
    if (written || written.error().code() != Errc::conflict || attempt == 4) return written;
  }
}

std::size_t GpuTuner::running() const {
  std::lock_guard lk(mu_);
  std::size_t n = 0;
  for (const auto& [pk, r] : running_)
    n += r.trial.has_value();
  return n;
}

Expected<std::int64_t> GpuTuner::rewrite(const std::string& pk, const std::string& reason,
                                         const GpuWriter& who,
                                         const std::function<void(ProfileDoc&)>& change) {
  constexpr int kAttempts = 4;
  for (int attempt = 1;; ++attempt) {
    FDO_TRY(ps::SharedProfile cur, store_.current(pk));
    ProfileDoc doc = cur ? cur->doc : ProfileDoc{};
    change(doc);
    ps::WriteInfo info;
    info.source = ps::WriteSource::feedback;
    info.reason = reason;
    info.owner = who.owner;
    info.host = host_;
    info.stage = who.stage;
    info.program = who.program;
    auto written = store_.write(pk, cur ? cur->version : 0, doc, info);
    if (written || written.error().code() != Errc::conflict || attempt == kAttempts) return written;
  }
}

} // namespace fdo::daemon
