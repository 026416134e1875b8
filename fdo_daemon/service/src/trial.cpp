#include "fdo/daemon/trial.h"

#include "fdo/util/enum_names.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>

namespace fdo::daemon {

namespace {
constexpr EnumNames<Arm, 2> kArmNames{
    {{{Arm::incumbent, "incumbent"}, {Arm::candidate, "candidate"}}}};
constexpr EnumNames<Verdict, 4> kVerdictNames{{{{Verdict::undecided, "undecided"},
                                                {Verdict::accepted, "accepted"},
                                                {Verdict::rejected, "rejected"},
                                                {Verdict::no_difference, "no_difference"}}}};
} // namespace

std::string_view to_string(Arm a) {
  return kArmNames.name(a);
}

std::string_view to_string(Verdict v) {
  return kVerdictNames.name(v);
}

namespace {

// SplitMix64's output function: a well-mixed 64-bit hash of the counter.
std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
}

// The test's fixed settings (docs/guard.md, "The test"). None of them
// touches the error bounds, which hold for any values: they size the bets.
//
// The median of |a| + |b| for a, b independent N(0, 2 sigma^2) is
// 2.1067 sigma: dividing a block's within-arm spread by it estimates the
// per-stage noise sigma, which is also the standard deviation of a block's
// contrast (four stages, each arm's mean of two).
constexpr double kSpreadToSigma = 1.0 / 2.1067;
// The scale never goes below this (a 0.01% stage noise): identical or
// noiseless times still give a finite standardized contrast.
constexpr double kMinScale = 1e-4;
// A bet stakes at most this share (each block multiplies a process by 1 +
// kMaxStake * tanh(theta * u), between 0.1 and 1.9): five blocks all one way
// reach 1.9^5 = 24.8 >= 1 / reject_alpha, six 1.9^6 = 47 >= 2 / keep_alpha.
constexpr double kMaxStake = 0.9;
// The bet's aggressiveness theta is the mean standardized contrast of the
// blocks before (each clipped to +-kClip so a burst counts as one block
// "clearly one way", no more), shrunk towards kPriorTheta with the weight of
// kPriorBlocks blocks, and kept within 0..kMaxTheta.
constexpr double kClip = 3.0;
constexpr double kPriorTheta = 0.5;
constexpr double kPriorBlocks = 2.0;
constexpr double kMaxTheta = 2.0;
// The keep process's share of keep_alpha; the rest is the final signed-rank
// test's. (The share moves power between early and late keeps; the bound is
// their sum either way.)
constexpr double kSequentialShare = 0.5;

// One one-sided test: the log of its betting process over the blocks'
// standardized contrasts u (> 0: evidence for the side it tests).
struct Bettor {
  double log_e = 0.0;
  double sum_u = 0.0;
  double n = 0.0;

  void bet(double u) {
    const double theta =
        std::clamp((kPriorTheta * kPriorBlocks + sum_u) / (kPriorBlocks + n), 0.0, kMaxTheta);
    log_e += std::log1p(kMaxStake * std::tanh(theta * u));
    sum_u += std::clamp(u, -kClip, kClip);
    n += 1.0;
  }
};

// The exact one-sided p-value of Wilcoxon's signed-rank test of `x` (zeros
// dropped, ties given midranks): the chance that fair, independent signs on
// the same magnitudes give a sum of positive ranks at least the observed
// one. Doubled midranks are integers, so the null distribution is a count
// over integer sums (in doubles: the counts pass 2^64 from 64 values on).
double signed_rank_p(const std::vector<double>& x) {
  std::vector<double> a;
  for (double v : x)
    if (v != 0.0) a.push_back(v);
  const std::size_t n = a.size();
  if (n == 0) return 1.0;
  std::sort(a.begin(), a.end(), [](double u, double v) { return std::fabs(u) < std::fabs(v); });
  std::vector<std::size_t> score(n); // doubled midrank
  std::size_t observed = 0, total = 0;
  for (std::size_t i = 0; i < n;) {
    std::size_t j = i;
    while (j + 1 < n && std::fabs(a[j + 1]) == std::fabs(a[i]))
      ++j;
    for (std::size_t k = i; k <= j; ++k) {
      score[k] = i + j + 2;
      if (a[k] > 0) observed += score[k];
    }
    total += (j - i + 1) * (i + j + 2);
    i = j + 1;
  }
  std::vector<double> p(total + 1, 0.0);
  p[0] = 1.0;
  std::size_t reach = 0;
  for (std::size_t k = 0; k < n; ++k) {
    reach += score[k];
    for (std::size_t t = reach; t >= score[k]; --t)
      p[t] = 0.5 * (p[t] + p[t - score[k]]);
    for (std::size_t t = std::min(score[k], reach + 1); t-- > 0;)
      p[t] *= 0.5;
  }
  double tail = 0.0;
  for (std::size_t t = observed; t <= total; ++t)
    tail += p[t];
  return std::min(tail, 1.0);
}

} // namespace

bool Trial::candidate_first(std::size_t block) const {
  return (mix(seed_ ^ mix(static_cast<std::uint64_t>(block))) >> 63) != 0;
}

Arm Trial::next_arm() const {
  const std::size_t block = std::min(incumbent_.size(), candidate_.size()) / 2;
  std::size_t inc = incumbent_.size() - 2 * block, cand = candidate_.size() - 2 * block;
  // The block's slots in order; the first one its arm's count has not filled.
  const bool cf = candidate_first(block);
  const Arm order[4] = {cf ? Arm::candidate : Arm::incumbent, cf ? Arm::incumbent : Arm::candidate,
                        cf ? Arm::incumbent : Arm::candidate, cf ? Arm::candidate : Arm::incumbent};
  for (Arm a : order) {
    std::size_t& filled = a == Arm::incumbent ? inc : cand;
    if (filled == 0) return a;
    --filled;
  }
  return incumbent_.size() <= candidate_.size() ? Arm::incumbent : Arm::candidate;
}

void Trial::add(Arm arm, double exec_time) {
  if (!(exec_time > 0) || !std::isfinite(exec_time)) return;
  (arm == Arm::incumbent ? incumbent_ : candidate_).push_back(exec_time);
}

TrialResult Trial::evaluate(const TrialConfig& config) const {
  TrialResult r;
  const std::size_t pairs = std::min(incumbent_.size(), candidate_.size());
  r.pairs = static_cast<int>(pairs);
  if (pairs == 0) return r;
  std::vector<double> d(pairs);
  for (std::size_t i = 0; i < pairs; ++i)
    d[i] = std::log(candidate_[i] / incumbent_[i]);
  r.ratio = std::exp(median(d));

  // Block b: the pairs 2b and 2b + 1. Its contrast is the mean of their log
  // ratios; its spread, |ln I1/I2| + |ln C1/C2|, is the same whichever order
  // the coin chose, so it may scale the block's own contrast.
  const std::size_t blocks = pairs / 2;
  r.blocks = static_cast<int>(blocks);
  const double margin = std::log1p(config.min_effect);
  std::vector<double> spreads; // sorted
  spreads.reserve(blocks);
  std::vector<double> faster(blocks); // by how much each block favours the candidate
  Bettor keep, reject;
  for (std::size_t b = 0; b < blocks; ++b) {
    const std::size_t i = 2 * b, j = i + 1;
    const double contrast = (d[i] + d[j]) / 2.0;
    const double spread = std::fabs(std::log(incumbent_[i] / incumbent_[j])) +
                          std::fabs(std::log(candidate_[i] / candidate_[j]));
    spreads.insert(std::upper_bound(spreads.begin(), spreads.end(), spread), spread);
    const std::size_t n = spreads.size();
    const double mid = n % 2 ? spreads[n / 2] : (spreads[n / 2 - 1] + spreads[n / 2]) / 2.0;
    const double scale = std::max(mid * kSpreadToSigma, kMinScale);
    // Keep: the candidate faster by more than min_effect (a contrast below
    // -margin); reject: slower by more than min_effect.
    faster[b] = -(contrast + margin);
    keep.bet(faster[b] / scale);
    reject.bet((contrast - margin) / scale);
  }
  r.keep_e = std::exp(keep.log_e);
  r.reject_e = std::exp(reject.log_e);

  // keep_alpha is split: kSequentialShare of it for the keep process at
  // every look, the rest for one exact signed-rank test of all the blocks
  // when the budget is spent.
  const double keep_at = std::log(1.0 / (config.keep_alpha * kSequentialShare));
  const double reject_at = std::log(1.0 / config.reject_alpha);
  if (r.pairs >= config.min_pairs) {
    if (reject.log_e >= reject_at) {
      r.verdict = Verdict::rejected;
      return r;
    }
    if (keep.log_e >= keep_at) {
      r.verdict = Verdict::accepted;
      return r;
    }
  }
  if (r.pairs < config.max_pairs) return r;
  // The budget's blocks only: a trial evaluated again past its budget (its
  // verdict's write failed and a stage came meanwhile) looks at the same test.
  faster.resize(std::min(faster.size(), static_cast<std::size_t>(config.max_pairs / 2)));
  r.final_p = signed_rank_p(faster);
  r.verdict = r.final_p <= config.keep_alpha * (1.0 - kSequentialShare) ? Verdict::accepted
                                                                        : Verdict::no_difference;
  return r;
}

std::string describe_ratio(double ratio) {
  char buf[64];
  if (ratio >= 1.005)
    std::snprintf(buf, sizeof buf, "%.2fx slower", ratio);
  else if (ratio <= 1 / 1.005)
    std::snprintf(buf, sizeof buf, "%.2fx faster", 1.0 / ratio);
  else
    std::snprintf(buf, sizeof buf, "no faster or slower (%.3fx)", ratio);
  return buf;
}

std::uint64_t trial_seed(std::string_view pk, std::string_view id, std::int64_t version) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  auto eat = [&](std::string_view s) {
    for (unsigned char c : s) {
      h ^= c;
      h *= 0x100000001b3ull;
    }
    h ^= 0xff; // a separator no string holds
    h *= 0x100000001b3ull;
  };
  eat(pk);
  eat(id);
  eat(std::to_string(version));
  return h;
}

} // namespace fdo::daemon
