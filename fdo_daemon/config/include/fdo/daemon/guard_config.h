// The live A/B guard's budgets and test thresholds (the guard.* configuration
// keys; docs/guard.md). The decision logic (trial.h) and the guard (guard.h),
// in the service, are pure logic and bookkeeping over these.
#pragma once

#include <string_view>

namespace fdo::daemon {

// The sequential test (trial.h, docs/guard.md "The test"): stages run in
// blocks of two pairs, ICCI or CIIC at random, and two betting martingales
// over the blocks' contrasts decide. Whatever the noise, and however often
// the trial is looked at, a candidate that is not faster by more than
// min_effect is kept with probability at most keep_alpha, and one that is not
// slower by more than min_effect is rejected with probability at most
// reject_alpha.
struct TrialConfig {
  // No verdict before this many pairs (two pairs make a block). At the
  // default alphas the tests cannot decide before five blocks anyway.
  int min_pairs = 10;
  int max_pairs = 64; // budget: after this many pairs, "no difference" (the incumbent stays)
  // Smallest change acted on: the candidate is kept only when shown faster
  // than the incumbent by more than this (1.01x), rejected only when shown
  // slower by more than this.
  double min_effect = 0.01;
  double keep_alpha = 0.05;   // bound on keeping a candidate that is not faster
  double reject_alpha = 0.05; // bound on rejecting a candidate that is not slower
};

enum class GuardMode { on, off };
// What a trial compares (guard.clock): the worker process's CPU time during
// the call (every thread of it; what other processes of a loaded host take is
// left out) or its wall time.
enum class GuardClock { cpu, wall };
std::string_view to_string(GuardClock clock); // "cpu", "wall"

struct GuardConfig {
  GuardMode mode = GuardMode::on;
  // Stages a program runs under a profile before the guard trials it against
  // the plain build: a program that runs fewer is served its profile as is.
  int min_stages = 20;
  // Stages under one profile before knob variants are tried (a program that
  // runs fewer is never tuned), and how many variants per profile version.
  int tune_min_stages = 200;
  int tune_max_variants = 4;
  // A running trial's samples are saved in the profile's guard record after
  // every this many pairs, so a restart continues the trial (0: never; a
  // restart starts it over). Each save is a profile version.
  int checkpoint_pairs = 4;
  GuardClock clock = GuardClock::cpu;
  TrialConfig trial;
};

} // namespace fdo::daemon
