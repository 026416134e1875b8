// Launch-configuration tuning (gpu/tune.h) on synthetic timings.
#include "fdo/gpu/tune.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <map>
#include <random>

using namespace fdo;
using namespace fdo::gpu;

namespace {

GpuInfo h100() {
  GpuInfo g;
  g.multiprocessors = 132;
  g.max_threads_per_block = 1024;
  return g;
}

} // namespace

TEST_CASE("tune: grid-stride candidates cover blocks and grids, none oversized", "[tune]") {
  auto c = grid_stride_candidates(1 << 24, h100(), 1024);
  // Blocks 64..1024 (5), each with 6 distinct grids.
  CHECK(c.size() == 30);
  for (const LaunchConfig& l : c) {
    CHECK(l.block.x >= 64);
    CHECK(l.block.x <= 1024);
    CHECK(std::uint64_t{l.grid.x} * l.block.x <= (std::uint64_t{1} << 24) + l.block.x);
  }
  // A small problem gets no grid larger than one thread per item.
  auto small = grid_stride_candidates(1000, h100(), 256);
  for (const LaunchConfig& l : small)
    CHECK(l.grid.x == (1000 + l.block.x - 1) / l.block.x);
  CHECK(small.size() == 3); // blocks 64, 128, 256
  CHECK(LaunchConfig{{528}, {256}}.describe() == "grid 528x1x1 block 256x1x1");
}

TEST_CASE("tune: finds the fastest configuration under noise", "[tune]") {
  auto candidates = grid_stride_candidates(1 << 24, h100(), 1024);
  // A bowl around block 256, grid 528 (4 per SM): 1 ms, others slower by up to 2x.
  auto cost = [](const LaunchConfig& l) {
    return 1.0 + 0.15 * std::abs(std::log2(l.block.x / 256.0)) +
           0.1 * std::abs(std::log2(l.grid.x / 528.0));
  };
  int found = 0;
  for (std::uint64_t seed = 1; seed <= 50; ++seed) {
    std::mt19937_64 rng(seed * 7919);
    std::lognormal_distribution<double> noise(0.0, 0.05);
    auto r = tune(
        candidates, [&](const LaunchConfig& l) -> Expected<double> { return cost(l) * noise(rng); },
        TuneOptions{3, seed});
    REQUIRE(r);
    found += r->best == LaunchConfig{{528}, {256}} ? 1 : 0;
    // Never worse than 5% above the optimum.
    CHECK(cost(r->best) <= 1.05);
    // Successive halving: far fewer launches than timing everything each round.
    CHECK(r->launches < 3 * 30 * 5);
  }
  CHECK(found >= 40);
}

TEST_CASE("tune: interleaving keeps a load burst from crowning a slow candidate", "[tune]") {
  // Two candidates, B 10% faster; launches 10..40 run under a 3x load burst.
  std::vector<LaunchConfig> c{{{1}, {64}}, {{1}, {128}}};
  int launch = 0;
  auto r = tune(
      c,
      [&](const LaunchConfig& l) -> Expected<double> {
        double t = l.block.x == 128 ? 0.9 : 1.0;
        ++launch;
        return launch >= 10 && launch < 40 ? 3 * t : t;
      },
      TuneOptions{25, 3});
  REQUIRE(r);
  CHECK(r->best.block.x == 128);
}

TEST_CASE("tune: errors and degenerate input", "[tune]") {
  CHECK_FALSE(tune({}, [](const LaunchConfig&) -> Expected<double> { return 1.0; }));
  auto failing = tune({{{1}, {64}}, {{2}, {64}}}, [](const LaunchConfig&) -> Expected<double> {
    return make_error(Errc::crashed, "kernel fault");
  });
  REQUIRE_FALSE(failing);
  CHECK(failing.error().code() == Errc::crashed);
  auto one = tune({{{1}, {64}}}, [](const LaunchConfig&) -> Expected<double> { return 2.0; });
  REQUIRE(one);
  CHECK(one->launches == 3);
  CHECK(median({3, 1, 2}) == 2);
  CHECK(median({4, 1, 2, 3}) == 2.5);
}
