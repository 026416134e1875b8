#include "fdo/daemon/cs_round.h"

#include "fdo/daemon/guard.h"

#include <algorithm>

namespace fdo::daemon {

bool in_cs_round(const ProfileDoc* current) {
  return current != nullptr && current->knobs.mode == CompileMode::cs_instrumented;
}

int cs_round_stages(const PolicyConfig& config) {
  return std::max(1, config.cs_pgo_stages);
}

void start_cs_round(const PolicyConfig& config, ProfileDoc& next, std::string& reason) {
  if (config.cs_pgo_stages <= 0 || next.knobs.mode) return;
  // The guard kept a build without context-sensitive counts: it measured
  // this program faster without them, so their stages are not spent again.
  if (incumbent_drops_cs(next.guard)) {
    reason += "; no context-sensitive round: the guard serves this program without "
              "context-sensitive counts";
    return;
  }
  next.knobs.mode = CompileMode::cs_instrumented;
  reason +=
      "; next " + std::to_string(config.cs_pgo_stages) + " stages gather context-sensitive counts";
}

PolicyDecision finish_cs_round(const ProfileDoc& current, const FeedbackAccumulator& feedback) {
  PolicyDecision d;
  d.action = PolicyAction::rewrite;
  d.kind = RewriteKind::cs_counts;
  d.profile = current;
  d.profile.knobs.mode.reset();
  d.profile.cs_functions.clear();
  std::uint64_t total = 0;
  for (const auto& [name, fc] : feedback.counts()) {
    // Only records the CS instrumentation made (a stage served by another
    // build contributes nothing here).
    if (!is_cs_hash(fc.cfg_hash)) continue;
    FunctionProfile f;
    f.cfg_hash = fc.cfg_hash;
    f.counts = fc.counts;
    f.memop_sizes = fc.memop_sizes;
    for (std::uint64_t c : fc.counts)
      total += c;
    if (auto it = current.functions.find(name); it != current.functions.end())
      f.source_name = it->second.source_name;
    d.profile.cs_functions.emplace(name, std::move(f));
  }
  if (total == 0) {
    d.profile.cs_functions.clear();
    d.reason = "context-sensitive round of " + std::to_string(feedback.stages()) +
               " stages counted nothing: optimized without context-sensitive counts";
    return d;
  }
  d.reason = "context-sensitive counts from " + std::to_string(feedback.stages()) + " stages (" +
             std::to_string(total) + " counts in " + std::to_string(d.profile.cs_functions.size()) +
             " functions)";
  return d;
}

} // namespace fdo::daemon
