// The live A/B guard's budgets and test thresholds (the guard.* configuration
// keys; docs/guard.md). The decision logic (trial.h) and the guard (guard.h),
// in the service, are pure logic and bookkeeping over these.
#pragma once

#include <string_view>

namespace fdo::daemon {

struct TrialConfig {
  int min_pairs = 6;     // no verdict from the test before this many pairs
  int max_pairs = 24;    // budget: after this many pairs, "no difference"
  double accept_z = 2.8; // signed-rank |z| needed to switch to a faster candidate
  double reject_z = 2.2; // |z| needed to reject a slower candidate
  // Smallest median pair ratio change acted on: a "significant" 0.3% is not
  // worth a switch.
  double min_effect = 0.01;
  // Early stop: from early_pairs pairs on, a candidate slower than the
  // incumbent by more than early_margin in every pair is rejected at once.
  int early_pairs = 3;
  double early_margin = 0.10;
  // Fast path: a two-sample rank test of every candidate stage against every
  // incumbent stage, beyond min_effect, decides as soon as its exact one-sided
  // p-value is at most this (a large effect: within five or six pairs).
  double rank_p = 0.002;
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
