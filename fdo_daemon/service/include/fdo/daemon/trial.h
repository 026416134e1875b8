// The guard's decision logic (docs/guard.md, "The test"): one live A/B trial
// between the incumbent output of a program and a candidate, over the
// execution times of comparable stages. Pure: no clock, no I/O, no locks; the
// guard (guard.h) feeds it the stages it routed and acts on the verdict.
//
// Stages run in blocks of two pairs, in the order I C C I or C I I C, chosen
// by a fair coin per block from the trial's seed (a counter-based generator:
// the order of block b is a function of the seed and b alone, so a trial
// rebuilt from a checkpoint plans exactly what it would have). A block's
// contrast is the mean log time of its two candidate stages minus that of its
// two incumbent stages: a linear drift cancels within the block, and a burst
// or any other pattern of the host's load lands on the candidate's side of a
// block as often as on the incumbent's, by the coin.
//
// Two one-sided sequential tests run over the blocks' contrasts, each a
// betting martingale (test supermartingale) on the contrast's sign: under
// "the candidate is not faster by more than min_effect" the keep process has
// expectation at most 1 at every block, whatever the noise, because the coin
// makes each contrast's sign fair given everything else; by Ville's
// inequality it ever reaches 2/keep_alpha with probability at most
// keep_alpha/2. Likewise the reject process, at 1/reject_alpha. Each block's
// bet is bounded (1 + 0.9 tanh), studentized by a scale that the coin does
// not change, and sized from the blocks before it, so an outlier weighs at
// most one bet. When the budget is spent without a verdict, one exact
// signed-rank test of all the blocks at keep_alpha/2 may still keep the
// candidate. So a keep errs with probability at most keep_alpha and a
// rejection with at most reject_alpha, over all looks; the rates measured
// under several noise models are in tests/fdo_daemon/service/trial_test.cpp
// and docs/guard.md.
#pragma once

#include "fdo/daemon/guard_config.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace fdo::daemon {

enum class Arm { incumbent, candidate };
std::string_view to_string(Arm a);

enum class Verdict {
  undecided,     // keep going
  accepted,      // shown faster by more than min_effect: it becomes the incumbent
  rejected,      // shown slower by more than min_effect: the incumbent stays
  no_difference, // budget spent (or a keep out of reach): the incumbent stays
};
std::string_view to_string(Verdict v);

struct TrialResult {
  Verdict verdict = Verdict::undecided;
  int pairs = 0;  // complete pairs (the k-th time of each arm)
  int blocks = 0; // complete blocks (two pairs each): what the test has seen
  // Candidate time / incumbent time: exp of the median pair log ratio
  // (1.07 = the candidate is 7% slower). 1 with no pairs.
  double ratio = 1.0;
  // The two test processes after the last complete block (1 at the start):
  // the trial keeps the candidate when keep_e reaches 1 / keep_alpha and
  // rejects it when reject_e reaches 1 / reject_alpha.
  double keep_e = 1.0;
  double reject_e = 1.0;
  // The final signed-rank test's one-sided p-value (1 until the budget is spent).
  double final_p = 1.0;
};

class Trial {
public:
  // `seed` fixes the blocks' orders (the guard derives it from the program
  // and the trial, so a resumed trial keeps its order).
  explicit Trial(std::uint64_t seed = 0) : seed_(seed) {}

  // Which arm the next comparable stage should run: the next slot of the
  // current block's order that the arm's count has not filled.
  Arm next_arm() const;
  // The order of block `b`: true for C I I C, false for I C C I.
  bool candidate_first(std::size_t block) const;
  // One comparable stage's execution time (any unit, > 0; others are ignored).
  void add(Arm arm, double exec_time);
  TrialResult evaluate(const TrialConfig& config) const;

  std::uint64_t seed() const { return seed_; }
  std::size_t samples(Arm arm) const {
    return arm == Arm::incumbent ? incumbent_.size() : candidate_.size();
  }
  // One arm's times, in the order they were added.
  const std::vector<double>& times(Arm arm) const {
    return arm == Arm::incumbent ? incumbent_ : candidate_;
  }

private:
  std::uint64_t seed_;
  std::vector<double> incumbent_, candidate_;
};

// The seed of a trial's block orders: FNV-1a of the profile key, the trial's
// id and the version it started under, all of which a checkpoint keeps, so a
// resumed trial plans the orders it would have.
std::uint64_t trial_seed(std::string_view pk, std::string_view id, std::int64_t version);

// "1.07x slower" / "1.05x faster" / "no faster or slower (1.00x)".
std::string describe_ratio(double ratio);

} // namespace fdo::daemon
