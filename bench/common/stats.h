// What the benches print: medians over interleaved rounds.
#pragma once

#include <algorithm>
#include <vector>

namespace fdo::bench {

// The median of `v` (the mean of the middle two for an even count); 0 for none.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

} // namespace fdo::bench
