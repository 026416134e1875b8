// The guard's decision logic (docs/guard.md): one live A/B trial between the
// incumbent output of a program and a candidate, over the execution times of
// comparable stages. Pure: no clock, no I/O, no locks; the guard (guard.h)
// feeds it the stages it routed and acts on the verdict.
//
// Stages alternate between the arms; the k-th incumbent time is paired with
// the k-th candidate time (neighbours in time, so slow machine drift hits both
// halves of a pair alike). Two sequential tests run after every pair, each
// with an effect threshold (guard.min_effect):
//  - fast path: an exact two-sample rank test (Mann-Whitney U) of every
//    candidate stage against every incumbent stage, the candidate's times
//    scaled by 1 + min_effect; it uses how far apart the arms are, not only
//    the pairs' signs, so a large effect is decided within five or six pairs;
//  - paired path: a Wilcoxon signed-rank test on the pairs' log ratios
//    (normal approximation) from min_pairs on, which keeps small effects
//    decidable on a drifting machine.
// The error rates that result are measured in
// tests/fdo_daemon/service/trial_test.cpp and stated in docs/guard.md.
#pragma once

#include "fdo/daemon/guard_config.h"

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace fdo::daemon {

enum class Arm { incumbent, candidate };
std::string_view to_string(Arm a);

enum class Verdict {
  undecided,     // keep alternating
  accepted,      // the candidate is faster: it becomes the incumbent
  rejected,      // the candidate is slower (or clearly slower: early stop)
  no_difference, // budget spent without a difference: keep the incumbent
};
std::string_view to_string(Verdict v);

struct TrialResult {
  Verdict verdict = Verdict::undecided;
  int pairs = 0;
  // Candidate time / incumbent time: exp of the median pair log ratio
  // (1.07 = the candidate is 7% slower). 1 with no pairs.
  double ratio = 1.0;
  double z = 0.0; // signed-rank statistic, > 0 when the candidate is slower
  // Exact one-sided p-values of the rank test: that the candidate is faster
  // (resp. slower) by more than min_effect. 1 with no pairs.
  double p_faster = 1.0;
  double p_slower = 1.0;
  bool early_stop = false;
};

class Trial {
public:
  // Which arm the next comparable stage should run: the one behind; on a tie
  // the incumbent for even pairs and the candidate for odd ones.
  Arm next_arm() const;
  // One comparable stage's execution time (any unit, > 0; others are ignored).
  void add(Arm arm, double exec_time);
  TrialResult evaluate(const TrialConfig& config) const;

  std::size_t samples(Arm arm) const {
    return arm == Arm::incumbent ? incumbent_.size() : candidate_.size();
  }
  // One arm's times, in the order they were added.
  const std::vector<double>& times(Arm arm) const {
    return arm == Arm::incumbent ? incumbent_ : candidate_;
  }

private:
  std::vector<double> incumbent_, candidate_;
};

// P(U >= u) for the Mann-Whitney count U of m against n exchangeable samples
// (no ties): exact up to 30 samples an arm, normal approximation beyond.
double rank_sum_tail(int m, int n, double u);

// "1.07x slower" / "1.05x faster" / "no faster or slower (1.00x)".
std::string describe_ratio(double ratio);

} // namespace fdo::daemon
