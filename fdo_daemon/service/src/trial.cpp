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

Arm Trial::next_arm() const {
  if (candidate_.size() != incumbent_.size())
    return candidate_.size() < incumbent_.size() ? Arm::candidate : Arm::incumbent;
  // Pairs alternate which arm goes first (ABBA...), so a steady drift of the
  // machine does not always land on the same arm's half of the pair.
  return incumbent_.size() % 2 == 0 ? Arm::incumbent : Arm::candidate;
}

void Trial::add(Arm arm, double exec_time) {
  if (!(exec_time > 0) || !std::isfinite(exec_time)) return;
  (arm == Arm::incumbent ? incumbent_ : candidate_).push_back(exec_time);
}

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
}

// Wilcoxon signed-rank statistic of `d` (zeros dropped), as a z score with
// the tie-corrected variance: > 0 when the positive differences dominate.
double signed_rank_z(const std::vector<double>& d) {
  std::vector<double> a;
  for (double x : d)
    if (x != 0.0) a.push_back(x);
  const std::size_t n = a.size();
  if (n == 0) return 0.0;
  std::vector<std::size_t> order(n);
  for (std::size_t i = 0; i < n; ++i)
    order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](std::size_t x, std::size_t y) { return std::fabs(a[x]) < std::fabs(a[y]); });
  double w_plus = 0.0, tie_term = 0.0;
  for (std::size_t i = 0; i < n;) {
    std::size_t j = i;
    while (j + 1 < n && std::fabs(a[order[j + 1]]) == std::fabs(a[order[i]]))
      ++j;
    const double rank = (static_cast<double>(i + j) / 2.0) + 1.0; // average rank, 1-based
    const double t = static_cast<double>(j - i + 1);
    tie_term += t * t * t - t;
    for (std::size_t k = i; k <= j; ++k)
      if (a[order[k]] > 0) w_plus += rank;
    i = j + 1;
  }
  const double nn = static_cast<double>(n);
  const double mean = nn * (nn + 1) / 4.0;
  const double var = nn * (nn + 1) * (2 * nn + 1) / 24.0 - tie_term / 48.0;
  if (var <= 0) return 0.0;
  return (w_plus - mean) / std::sqrt(var);
}

// Cross pairs (candidate stage, incumbent stage) where the candidate's time
// times `scale` is below the incumbent's; a tie counts one half.
double faster_pairs(const std::vector<double>& candidate, const std::vector<double>& incumbent,
                    std::size_t n, double scale) {
  double u = 0.0;
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < n; ++j) {
      const double c = candidate[i] * scale;
      u += c < incumbent[j] ? 1.0 : c == incumbent[j] ? 0.5 : 0.0;
    }
  return u;
}

constexpr int kExactRankSamples = 30;

} // namespace

double rank_sum_tail(int m, int n, double u) {
  if (m <= 0 || n <= 0) return u <= 0 ? 1.0 : 0.0;
  const double mn = static_cast<double>(m) * n;
  if (u <= 0) return 1.0;
  if (u > mn) return 0.0;
  if (m > kExactRankSamples || n > kExactRankSamples) {
    const double mean = mn / 2.0;
    const double sd = std::sqrt(mn * (m + n + 1) / 12.0);
    return 0.5 * std::erfc((u - 0.5 - mean) / sd / std::sqrt(2.0));
  }
  // The arrangements of m and n samples with U = k are the coefficients of
  // q^k in the Gaussian binomial [m+n choose n]_q, the product over i = 1..n
  // of (1 - q^(m+i)) / (1 - q^i). After step i the polynomial is
  // [m+i choose i]_q (non-negative, at most C(60, 30) < 2^63): exact in
  // 64-bit integers.
  const auto width = static_cast<std::size_t>(mn) + 1;
  std::vector<std::int64_t> c(width, 0);
  c[0] = 1;
  for (int i = 1; i <= n; ++i) {
    const auto up = static_cast<std::size_t>(m + i);
    const auto down = static_cast<std::size_t>(i);
    for (std::size_t k = width; k-- > up;) // times (1 - q^(m+i))
      c[k] -= c[k - up];
    for (std::size_t k = down; k < width; ++k) // divided by (1 - q^i)
      c[k] += c[k - down];
  }
  // Ties are counted as halves: the tail from floor(u) errs on the safe side.
  std::int64_t total = 0, tail = 0;
  const auto from = static_cast<std::size_t>(std::floor(u));
  for (std::size_t k = 0; k < width; ++k) {
    total += c[k];
    if (k >= from) tail += c[k];
  }
  return static_cast<double>(tail) / static_cast<double>(total);
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
  r.z = signed_rank_z(d);

  if (r.pairs >= config.early_pairs) {
    const double margin = std::log1p(config.early_margin);
    if (std::all_of(d.begin(), d.end(), [&](double x) { return x > margin; })) {
      r.verdict = Verdict::rejected;
      r.early_stop = true;
      return r;
    }
  }
  // Fast path: the arms' whole distributions against each other, the
  // candidate handicapped by the smallest effect acted on.
  const int n = r.pairs;
  r.p_faster =
      rank_sum_tail(n, n, faster_pairs(candidate_, incumbent_, pairs, 1.0 + config.min_effect));
  r.p_slower =
      rank_sum_tail(n, n, faster_pairs(incumbent_, candidate_, pairs, 1.0 + config.min_effect));
  if (r.p_slower <= config.rank_p && r.ratio > 1.0 + config.min_effect) {
    r.verdict = Verdict::rejected;
    return r;
  }
  if (r.p_faster <= config.rank_p && r.ratio < 1.0 / (1.0 + config.min_effect)) {
    r.verdict = Verdict::accepted;
    return r;
  }
  if (r.pairs >= config.min_pairs) {
    if (r.z >= config.reject_z && r.ratio > 1.0 + config.min_effect) {
      r.verdict = Verdict::rejected;
      return r;
    }
    if (r.z <= -config.accept_z && r.ratio < 1.0 - config.min_effect) {
      r.verdict = Verdict::accepted;
      return r;
    }
  }
  if (r.pairs >= config.max_pairs) r.verdict = Verdict::no_difference;
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

} // namespace fdo::daemon
