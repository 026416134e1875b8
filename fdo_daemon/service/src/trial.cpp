#include "fdo/daemon/trial.h"

#include "fdo/util/enum_names.h"

#include <algorithm>
#include <cmath>
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

} // namespace

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
