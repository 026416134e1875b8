// Choosing a kernel's launch configuration by timing it, as an autotuner does
// (XLA's for GEMM tilings), but live: successive halving over candidate
// configurations, each round timing every survivor several times in an order
// shuffled by a seeded generator (interleaved, so a change of load falls on
// all candidates alike) and keeping the faster half by median, until one is
// left. Pure: the caller's `measure` runs and times one launch.
#pragma once

#include "fdo/gpu/session.h"
#include "fdo/util/expected.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace fdo::gpu {

struct LaunchConfig {
  Dim3 grid, block;
  std::string describe() const; // "grid 528x1x1 block 256x1x1"
  bool operator==(const LaunchConfig&) const = default;
};

// 1-D candidates for a grid-stride kernel over `items` elements: blocks of
// 64..max_threads (powers of two), grids of 1, 2, 4, 8 and 16 blocks per
// multiprocessor and one thread per item, none larger than that.
std::vector<LaunchConfig> grid_stride_candidates(std::uint64_t items, const GpuInfo& gpu,
                                                 int max_threads);

struct TuneOptions {
  int launches_per_round = 3;
  std::uint64_t seed = 1;
};

struct CandidateTimes {
  LaunchConfig config;
  std::vector<double> ms; // every timed launch, in the order run
  int rounds = 0;         // rounds it survived into
};

struct TuneResult {
  LaunchConfig best;
  std::vector<CandidateTimes> candidates; // in the order given
  int launches = 0;
};

// One timed launch of a configuration, in milliseconds.
using Measure = std::function<Expected<double>(const LaunchConfig&)>;

// invalid_argument without candidates; the first error `measure` returns.
Expected<TuneResult> tune(const std::vector<LaunchConfig>& candidates, const Measure& measure,
                          const TuneOptions& options = {});

double median(std::vector<double> v);

} // namespace fdo::gpu
