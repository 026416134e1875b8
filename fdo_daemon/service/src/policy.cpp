#include "fdo/daemon/policy.h"

#include "fdo/daemon/cs_round.h"
#include "fdo/daemon/icache_layout.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <set>

namespace fdo::daemon {

namespace {
// Adds `from` into `into` site by site, value by value; keeps each site's
// values most frequent first. A different number of sites means a different
// shape: the newest wins.
void merge_value_sites(std::vector<ValueSite>& into, const std::vector<ValueSite>& from) {
  if (from.empty()) return;
  if (into.size() != from.size()) {
    into = from;
    return;
  }
  for (std::size_t s = 0; s < from.size(); ++s) {
    std::map<std::uint64_t, std::uint64_t> merged(into[s].begin(), into[s].end());
    for (const auto& [value, count] : from[s])
      merged[value] += count;
    into[s].assign(merged.begin(), merged.end());
    std::stable_sort(into[s].begin(), into[s].end(),
                     [](const auto& a, const auto& b) { return a.second > b.second; });
  }
}

// Argument value profiles, argument by argument: counts of equal values add,
// `other` adds, and past kArgValuesKept distinct values the rarest move into
// `other` (so the share of the most frequent one is never overstated, and the
// document stays bounded however many stages are folded).
constexpr std::size_t kArgValuesKept = 8;
void merge_arg_values(std::vector<ArgValues>& into, const std::vector<ArgValues>& from) {
  for (const ArgValues& f : from) {
    auto it =
        std::find_if(into.begin(), into.end(), [&](const ArgValues& a) { return a.arg == f.arg; });
    if (it == into.end()) {
      into.push_back(f);
      continue;
    }
    std::map<std::uint64_t, std::uint64_t> merged(it->values.begin(), it->values.end());
    for (const auto& [value, count] : f.values)
      merged[value] += count;
    it->other += f.other;
    it->values.assign(merged.begin(), merged.end());
    std::stable_sort(it->values.begin(), it->values.end(),
                     [](const auto& a, const auto& b) { return a.second > b.second; });
    while (it->values.size() > kArgValuesKept) {
      it->other += it->values.back().second;
      it->values.pop_back();
    }
  }
  std::sort(into.begin(), into.end(),
            [](const ArgValues& a, const ArgValues& b) { return a.arg < b.arg; });
}
} // namespace

void FeedbackAccumulator::add(const StageFeedback& stage) {
  add(stage, CountsPart::taken, CountersPart::taken);
}

void FeedbackAccumulator::add(const StageFeedback& stage, CountsPart counts_part,
                              CountersPart counters_part) {
  ++stages_;
  exec_ns_sum_ += stage.exec_ns;
  if (counters_part == CountersPart::taken)
    for (const auto& [event, value] : stage.counters)
      counters_[event] += value;
  if (counts_part == CountsPart::left) return;
  for (const auto& [name, fc] : stage.counts) {
    FunctionCounts& mine = counts_[name];
    if (mine.counts.empty() || mine.cfg_hash != fc.cfg_hash ||
        mine.counts.size() != fc.counts.size()) {
      // A different CFG under the same name means a different program shape:
      // the newest shape wins rather than mixing incompatible counters.
      mine = fc;
      continue;
    }
    for (std::size_t i = 0; i < fc.counts.size(); ++i)
      mine.counts[i] += fc.counts[i];
    merge_value_sites(mine.indirect_calls, fc.indirect_calls);
    merge_value_sites(mine.memop_sizes, fc.memop_sizes);
    merge_arg_values(mine.arg_values, fc.arg_values);
  }
}

void FeedbackAccumulator::merge(const FeedbackAccumulator& other) {
  StageFeedback as_stage;
  as_stage.counts = other.counts_;
  as_stage.counters = other.counters_;
  as_stage.exec_ns = other.exec_ns_sum_;
  add(as_stage);
  // add() counted one stage; the other accumulator may stand for many.
  stages_ += other.stages_ - 1;
}

std::uint64_t FeedbackAccumulator::total_counts() const {
  std::uint64_t total = 0;
  for (const auto& [name, fc] : counts_)
    for (std::uint64_t c : fc.counts)
      total += c;
  return total;
}

namespace {
std::uint64_t sum(const std::vector<std::uint64_t>& v) {
  std::uint64_t s = 0;
  for (std::uint64_t x : v)
    s += x;
  return s;
}

std::string fmt_double(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", v);
  return buf;
}
// A branch whose minority direction takes at least this share of its
// executions is near-50/50.
constexpr double kNearEven = 0.3;

// The minority direction's share of a branch's profiled executions, when it
// ran often enough to tell.
std::optional<double> minority_share(const BranchStat& b) {
  const std::uint64_t n = b.taken + b.not_taken;
  if (n < 100) return std::nullopt;
  return static_cast<double>(std::min(b.taken, b.not_taken)) / static_cast<double>(n);
}

// Marks !unpredictable, in `next`, the branches of its functions that `choose`
// picks; returns those not marked before, with their function.
template <typename Choose>
std::vector<std::pair<std::string, BranchStat>>
mark_branches(ProfileDoc& next, const std::map<std::string, std::vector<BranchStat>>& stats,
              Choose choose) {
  std::vector<std::pair<std::string, BranchStat>> marked;
  for (const auto& [fn, list] : stats) {
    auto it = next.functions.find(fn);
    if (it == next.functions.end()) continue;
    std::set<std::uint32_t> have(it->second.unpredictable.begin(), it->second.unpredictable.end());
    for (const BranchStat& b : list)
      if (choose(b) && have.insert(b.index).second) marked.emplace_back(fn, b);
    it->second.unpredictable.assign(have.begin(), have.end());
  }
  return marked;
}
} // namespace

double count_drift(const std::map<std::string, FunctionProfile>& old_functions,
                   const std::map<std::string, FunctionCounts>& fresh) {
  std::uint64_t fresh_total = 0;
  for (const auto& [name, fc] : fresh)
    fresh_total += sum(fc.counts);
  if (fresh_total == 0) return 0.0;
  double drift = 0.0;
  for (const auto& [name, fc] : fresh) {
    std::uint64_t fsum = sum(fc.counts);
    if (fsum == 0) continue;
    double weight = static_cast<double>(fsum) / static_cast<double>(fresh_total);
    auto it = old_functions.find(name);
    if (it == old_functions.end() || it->second.cfg_hash != fc.cfg_hash ||
        it->second.counts.size() != fc.counts.size()) {
      drift += weight; // new or reshaped function: entirely new information
      continue;
    }
    std::uint64_t osum = sum(it->second.counts);
    if (osum == 0) {
      drift += weight;
      continue;
    }
    // Total-variation distance between the two normalised counter vectors.
    double tvd = 0.0;
    for (std::size_t i = 0; i < fc.counts.size(); ++i)
      tvd += std::fabs(static_cast<double>(fc.counts[i]) / static_cast<double>(fsum) -
                       static_cast<double>(it->second.counts[i]) / static_cast<double>(osum));
    drift += weight * tvd / 2.0;
  }
  return std::clamp(drift, 0.0, 1.0);
}

double counts_distance(const std::map<std::string, FunctionProfile>& old_functions,
                       const std::map<std::string, FunctionCounts>& fresh) {
  std::uint64_t old_total = 0, fresh_total = 0;
  for (const auto& [name, f] : old_functions)
    old_total += sum(f.counts);
  for (const auto& [name, fc] : fresh)
    fresh_total += sum(fc.counts);
  if (old_total == 0 || fresh_total == 0) return old_total == fresh_total ? 0.0 : 1.0;
  double weights = 0.0;
  for (const auto& [name, fc] : fresh) {
    auto it = old_functions.find(name);
    const double was = it == old_functions.end() ? 0.0
                                                 : static_cast<double>(sum(it->second.counts)) /
                                                       static_cast<double>(old_total);
    weights +=
        std::fabs(static_cast<double>(sum(fc.counts)) / static_cast<double>(fresh_total) - was);
  }
  for (const auto& [name, f] : old_functions)
    if (!fresh.contains(name))
      weights += static_cast<double>(sum(f.counts)) / static_cast<double>(old_total);
  return std::max(count_drift(old_functions, fresh), std::clamp(weights / 2.0, 0.0, 1.0));
}

namespace {
bool has_counts(const ProfileDoc* doc) {
  if (doc == nullptr) return false;
  for (const auto& [name, f] : doc->functions)
    if (sum(f.counts) != 0) return true;
  return false;
}

ProfileDoc profile_from_counts(const ProfileDoc* current,
                               const std::map<std::string, FunctionCounts>& counts) {
  ProfileDoc doc;
  if (current != nullptr) {
    doc.knobs = current->knobs;
    doc.hardware = current->hardware;
    doc.guard = current->guard; // the guard's decisions outlive a new set of counts
  }
  // Counts were collected by an instrumented build; an operator's request to
  // re-instrument is satisfied now, so the next compile uses the profile.
  if (doc.knobs.mode == CompileMode::instrumented) doc.knobs.mode.reset();
  for (const auto& [name, fc] : counts) {
    FunctionProfile f;
    f.cfg_hash = fc.cfg_hash;
    f.counts = fc.counts;
    f.indirect_calls = fc.indirect_calls;
    f.memop_sizes = fc.memop_sizes;
    f.arg_values = fc.arg_values;
    if (current != nullptr) {
      auto it = current->functions.find(name);
      if (it != current->functions.end() && it->second.cfg_hash == fc.cfg_hash) {
        f.unpredictable = it->second.unpredictable;
        // A hot placement stays; a cold one only while the function still
        // never runs.
        if (it->second.layout == FunctionLayout::hot ||
            (it->second.layout == FunctionLayout::cold && sum(fc.counts) == 0))
          f.layout = it->second.layout;
        f.fingerprint = it->second.fingerprint;
        f.source_name = it->second.source_name;
      }
    }
    doc.functions.emplace(name, std::move(f));
  }
  return doc;
}

std::optional<std::uint64_t> counter(const FeedbackAccumulator& fb, const char* name) {
  auto it = fb.counters().find(name);
  if (it == fb.counters().end()) return std::nullopt;
  return it->second;
}
} // namespace

PolicyDecision decide(const PolicyConfig& config, const PolicyInput& input) {
  PolicyDecision d;
  if (input.pinned) {
    d.reason = "profile is pinned";
    return d;
  }
  // The context-sensitive round runs a fixed number of stages (cs_round.h).
  const bool cs_round = in_cs_round(input.current);
  const int needed = cs_round ? cs_round_stages(config) : config.min_stages;
  if (input.feedback == nullptr || input.feedback->stages() < needed) {
    std::int64_t seen = input.feedback ? input.feedback->stages() : 0;
    d.reason =
        std::string(cs_round ? "waiting for context-sensitive stages (" : "waiting for stages (") +
        std::to_string(seen) + " of " + std::to_string(needed) + ")";
    return d;
  }
  const FeedbackAccumulator& fb = *input.feedback;
  if (cs_round) return finish_cs_round(*input.current, fb);
  std::uint64_t total = fb.total_counts();
  if (total > 0) {
    if (total < config.min_counts) {
      d.reason = "waiting for counts (" + std::to_string(total) + " of " +
                 std::to_string(config.min_counts) + ")";
      return d;
    }
    d.drift = has_counts(input.current) ? count_drift(input.current->functions, fb.counts()) : 1.0;
    if (d.drift < config.drift_threshold) {
      d.reason =
          "drift " + fmt_double(d.drift) + " below threshold " + fmt_double(config.drift_threshold);
      return d;
    }
    d.action = PolicyAction::rewrite;
    d.kind = RewriteKind::counts;
    d.profile = profile_from_counts(input.current, fb.counts());
    d.reason = "instrumentation counts from " + std::to_string(fb.stages()) + " stages (" +
               std::to_string(total) + " counts, drift " + fmt_double(d.drift) + ")";
    start_cs_round(config, d.profile, d.reason);
    return d;
  }

  // No instrumentation under this version (an optimized build): only hardware
  // findings can justify a rewrite, and only where a PMU counted them.
  if (input.current == nullptr) {
    d.reason = "no counts and no profile yet";
    return d;
  }
  auto misses = counter(fb, "branch-misses");
  auto branches = counter(fb, "branch-instructions");
  auto icache = counter(fb, "L1-icache-load-misses");
  auto instructions = counter(fb, "instructions");
  // Every rewrite below needs a module-wide miss rate over the threshold,
  // branch misses sampled onto a branch, or sampled i-cache misses: a stage
  // with none of them (a steady optimized stage, whose build's branch
  // weights are all the statistics hold) is decided without copying the
  // profile.
  const std::optional<double> miss_rate =
      misses && branches && *branches > 0 && input.branch_stats != nullptr
          ? std::optional(static_cast<double>(*misses) / static_cast<double>(*branches))
          : std::nullopt;
  const bool rate_rule = miss_rate && *miss_rate >= config.branch_miss_unpredictable_rate;
  const bool sampled_rule = input.branch_stats != nullptr &&
                            std::ranges::any_of(*input.branch_stats, [&](const auto& fn) {
                              return std::ranges::any_of(fn.second, [&](const BranchStat& b) {
                                return b.misses >= config.branch_miss_min_samples;
                              });
                            });
  if (!rate_rule && !sampled_rule && input.icache_samples == nullptr) {
    d.reason = "no new information under an optimized build";
    return d;
  }
  ProfileDoc next = *input.current;
  std::vector<std::string> why;
  if (miss_rate) {
    const double rate = *miss_rate;
    next.hardware["branch_miss_rate"] = rate;
    if (rate >= config.branch_miss_unpredictable_rate) {
      // Near-50/50 branches are the ones a predictor cannot learn from bias
      // alone; with a high measured miss rate, stop the optimiser from
      // turning them into hard-to-predict control flow.
      auto marked = mark_branches(next, *input.branch_stats, [](const BranchStat& b) {
        auto m = minority_share(b);
        return m && *m >= kNearEven;
      });
      if (!marked.empty())
        why.push_back("branch miss rate " + fmt_double(rate) + " marked " +
                      std::to_string(marked.size()) + " branches unpredictable");
    }
  }
  // Branch misses sampled onto one branch (block_samples.h): the branch the
  // predictor keeps missing, named, with no module-wide rate needed.
  if (input.branch_stats != nullptr) {
    auto marked = mark_branches(next, *input.branch_stats, [&](const BranchStat& b) {
      auto m = minority_share(b);
      return b.misses >= config.branch_miss_min_samples && m && *m >= kNearEven;
    });
    if (!marked.empty()) {
      std::string text = "sampled branch misses marked unpredictable: ";
      for (std::size_t i = 0; i < marked.size(); ++i) {
        const auto& [fn, b] = marked[i];
        const double taken =
            static_cast<double>(b.taken) / static_cast<double>(b.taken + b.not_taken);
        text += (i == 0 ? "" : ", ") + display_name(fn, next.functions.at(fn)) + " branch " +
                std::to_string(b.index) + " (" + std::to_string(b.misses) +
                " miss samples, taken " + fmt_double(taken) + ")";
      }
      why.push_back(std::move(text));
    }
  }
  // i-cache pressure drives layout per function, from where the misses were
  // sampled (icache_layout.h); the counted module-wide figure only says
  // whether there is pressure at all, and never turns the module to -Os.
  std::optional<double> mpki;
  if (icache && instructions && *instructions > 0) {
    mpki = 1000.0 * static_cast<double>(*icache) / static_cast<double>(*instructions);
    next.hardware["icache_mpki"] = *mpki;
  }
  if (input.icache_samples != nullptr)
    if (auto layout = decide_icache_layout(config, *input.icache_samples, mpki, next))
      why.push_back(std::move(*layout));
  if (why.empty()) {
    d.reason = "no new information under an optimized build";
    return d;
  }
  d.action = PolicyAction::rewrite;
  d.kind = RewriteKind::hardware;
  d.profile = std::move(next);
  d.reason = why.front();
  for (std::size_t i = 1; i < why.size(); ++i)
    d.reason += "; " + why[i];
  return d;
}

} // namespace fdo::daemon
