// Launch-configuration tuning by successive halving (tune.h).
#include "fdo/gpu/tune.h"

#include <algorithm>
#include <numeric>
#include <random>

namespace fdo::gpu {

std::string LaunchConfig::describe() const {
  auto dims = [](const Dim3& d) {
    return std::to_string(d.x) + "x" + std::to_string(d.y) + "x" + std::to_string(d.z);
  };
  return "grid " + dims(grid) + " block " + dims(block);
}

std::vector<LaunchConfig> grid_stride_candidates(std::uint64_t items, const GpuInfo& gpu,
                                                 int max_threads) {
  std::vector<LaunchConfig> out;
  const std::uint64_t sms = std::max(1, gpu.multiprocessors);
  for (unsigned block = 64; block <= static_cast<unsigned>(max_threads); block *= 2) {
    const std::uint64_t full = std::max<std::uint64_t>(1, (items + block - 1) / block);
    std::vector<std::uint64_t> grids;
    for (std::uint64_t per_sm : {1, 2, 4, 8, 16})
      grids.push_back(std::min(full, sms * per_sm));
    grids.push_back(full);
    std::sort(grids.begin(), grids.end());
    grids.erase(std::unique(grids.begin(), grids.end()), grids.end());
    for (std::uint64_t g : grids)
      if (g <= 0x7fffffffu) out.push_back({{static_cast<unsigned>(g)}, {block}});
  }
  return out;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

Expected<TuneResult> tune(const std::vector<LaunchConfig>& candidates, const Measure& measure,
                          const TuneOptions& options) {
  if (candidates.empty())
    return make_error(Errc::invalid_argument, "no launch configuration to tune");
  if (options.launches_per_round < 1)
    return make_error(Errc::invalid_argument, "launches_per_round must be at least 1");
  TuneResult result;
  for (const LaunchConfig& c : candidates)
    result.candidates.push_back({c, {}, 0});
  std::vector<std::size_t> alive(candidates.size());
  std::iota(alive.begin(), alive.end(), 0);
  std::mt19937_64 rng(options.seed);
  while (true) {
    // Every survivor launches_per_round times, interleaved in a shuffled order.
    std::vector<std::size_t> order;
    for (int k = 0; k < options.launches_per_round; ++k)
      order.insert(order.end(), alive.begin(), alive.end());
    std::shuffle(order.begin(), order.end(), rng);
    for (std::size_t i : alive)
      ++result.candidates[i].rounds;
    for (std::size_t i : order) {
      FDO_TRY(double ms, measure(result.candidates[i].config));
      result.candidates[i].ms.push_back(ms);
      ++result.launches;
    }
    if (alive.size() == 1) break;
    // Keep the faster half by the median of every time a survivor has.
    std::stable_sort(alive.begin(), alive.end(), [&](std::size_t a, std::size_t b) {
      return median(result.candidates[a].ms) < median(result.candidates[b].ms);
    });
    alive.resize((alive.size() + 1) / 2);
  }
  result.best = result.candidates[alive.front()].config;
  return result;
}

} // namespace fdo::gpu
