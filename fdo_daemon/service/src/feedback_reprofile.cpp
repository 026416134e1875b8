// The feedback loop's re-profiling (docs/perf.md, "Drift"; docs/lifecycle.md):
// when the served build's sampled time shares drift from its baseline, a
// version without counts makes the next stages count again; when those
// counts are what an earlier profile holds, that profile serves again.
#include "fdo/daemon/feedback_loop.h"

#include <cstdio>
#include <set>

namespace fdo::daemon {

namespace ps = fdo::profile_store;

void FeedbackLoop::consider_reprofile(const PolicyConfig& policy, const PolicyInput& in,
                                      KeyState& st, bool own_build, PolicyDecision& d) {
  if (in.current == nullptr || in.pinned) return;
  std::optional<std::map<std::string, double>> baseline;
  if (own_build) {
    baseline = recorded_time_shares(*in.current);
  } else if (st.own_baseline) {
    baseline = st.own_baseline;
  } else if (window_judgeable(policy, st.window)) {
    // Another build serves (a variant the guard kept): its shares differ
    // from the profile's by how it was compiled, not by the workload. Its
    // own first full window is what it drifts from.
    st.own_baseline = st.window.shares();
    d.reason += "; time-share baseline of the served build taken over " +
                std::to_string(st.window.stages()) + " sampled stages";
    return;
  }
  ReprofileDecision r =
      decide_reprofile(policy, *in.current, st.window, baseline ? &*baseline : nullptr);
  if (r.reason.empty()) return;
  if (!r.reprofile) {
    d.reason += "; " + r.reason;
    return;
  }
  d.action = PolicyAction::rewrite;
  d.kind = RewriteKind::drift;
  d.drift = *r.drift;
  d.profile = reprofile_doc(*in.current);
  d.profile.reprofile_of = in.current_version;
  d.reason = r.reason;
}

Expected<std::vector<ps::SharedProfile>> FeedbackLoop::earlier_versions(const std::string& pk,
                                                                        std::int64_t reprofiled) {
  // The versions the re-profile could be counting again, newest first: the
  // one it re-profiled and the finished profiles before it (a workload that
  // went back to an earlier phase finds that phase's profile).
  constexpr int kLookback = 16;
  std::vector<ps::SharedProfile> out;
  std::set<std::string> checked; // a verdict or a checkpoint repeats its version's digest
  std::int64_t v = reprofiled;
  for (int looked = 0; v > 0 && looked < kLookback; ++looked, --v) {
    FDO_TRY(std::optional<ps::StoredProfile> got, store_.version(pk, v));
    if (!got || !checked.insert(got->digest).second) continue; // pruned, or a repeat
    const ProfileDoc& earlier = got->doc;
    // Only a finished profile: counts, optimized, not itself a re-profile.
    if (earlier.knobs.mode || choose_mode(&earlier) != CompileMode::optimized ||
        earlier.reprofile_of > 0)
      continue;
    out.push_back(std::make_shared<const ps::StoredProfile>(std::move(*got)));
  }
  return out;
}

void FeedbackLoop::recognise_reprofile(const KeyState& st, const PolicyConfig& policy,
                                       const PolicyInput& in, const FeedbackAccumulator& counted,
                                       PolicyDecision& d) {
  // Read ahead of the key's lock (read_ahead); none held: recognised at a later stage.
  if (st.earlier_of != in.current->reprofile_of) return;
  for (const ps::SharedProfile& got : st.earlier) {
    const ProfileDoc& earlier = got->doc;
    const std::int64_t v = got->version;
    const double distance = counts_distance(earlier.functions, counted.counts());
    if (distance >= policy.drift_threshold) continue;
    // That profile's compile-affecting part (its digest, so its build is the
    // one already compiled), this profile's bookkeeping; the shares it
    // records are the re-profile's stages', as for any profile made from
    // counts (fold).
    ProfileDoc again = *in.current;
    again.knobs = earlier.knobs;
    again.functions = earlier.functions;
    again.cs_functions = earlier.cs_functions;
    again.outside_functions = earlier.outside_functions;
    again.reprofile_of = 0;
    char text[32];
    std::snprintf(text, sizeof text, "%.3f", distance);
    char limit[32];
    std::snprintf(limit, sizeof limit, "%.3f", policy.drift_threshold);
    d.kind = RewriteKind::reprofile_unchanged;
    d.profile = std::move(again);
    d.reason = "re-profile counted what v" + std::to_string(v) + " holds (distance " + text +
               " below " + limit + " over " + std::to_string(counted.stages()) + " stages): v" +
               std::to_string(v) + "'s profile serves again";
    return;
  }
}

} // namespace fdo::daemon
