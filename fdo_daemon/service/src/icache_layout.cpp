#include "fdo/daemon/icache_layout.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <numeric>
#include <vector>

namespace fdo::daemon {

bool is_icache_miss_event(std::string_view event) {
  if (event == "L1-icache-load-misses") return true;
  std::string upper(event);
  std::transform(upper.begin(), upper.end(), upper.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return upper.find("ICACHE") != std::string::npos || upper.starts_with("L1I");
}

void add_icache_samples(std::map<std::string, std::uint64_t>& into,
                        const std::map<std::string, std::map<std::string, std::uint64_t>>& misses) {
  for (const auto& [event, per_fn] : misses)
    if (is_icache_miss_event(event))
      for (const auto& [fn, n] : per_fn)
        into[fn] += n;
}

namespace {
std::string percent(double share) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f%%", 100.0 * share);
  return buf;
}

bool never_ran(const FunctionProfile& f) {
  return !f.counts.empty() &&
         std::all_of(f.counts.begin(), f.counts.end(), [](std::uint64_t c) { return c == 0; });
}
} // namespace

std::optional<std::string> decide_icache_layout(const PolicyConfig& config,
                                                const std::map<std::string, std::uint64_t>& samples,
                                                std::optional<double> mpki, ProfileDoc& next) {
  const std::uint64_t total =
      std::accumulate(samples.begin(), samples.end(), std::uint64_t{0},
                      [](std::uint64_t s, const auto& kv) { return s + kv.second; });
  if (total == 0 || total < config.icache_layout_min_samples) return std::nullopt;
  // Little i-cache pressure over the whole program: no layout is worth a
  // recompile, however the few misses are spread.
  if (mpki && *mpki < config.icache_mpki_size_threshold) return std::nullopt;

  std::vector<std::pair<std::uint64_t, std::string>> hot; // newly hot, most samples first
  for (const auto& [fn, n] : samples) {
    auto it = next.functions.find(fn);
    if (it == next.functions.end()) continue;
    const double share = static_cast<double>(n) / static_cast<double>(total);
    if (share < config.icache_hot_share || it->second.layout == FunctionLayout::hot) continue;
    it->second.layout = FunctionLayout::hot;
    hot.emplace_back(n, fn);
  }
  if (hot.empty()) return std::nullopt;
  std::sort(hot.begin(), hot.end(), [](const auto& a, const auto& b) { return a.first > b.first; });

  std::vector<std::string> cold;
  for (auto& [fn, f] : next.functions) {
    if (f.layout != FunctionLayout::normal || !never_ran(f) || samples.contains(fn)) continue;
    f.layout = FunctionLayout::cold;
    cold.push_back(display_name(fn, f));
  }

  std::string text =
      "i-cache misses concentrated (" + std::to_string(total) + " miss samples): laid out hot ";
  for (std::size_t i = 0; i < hot.size(); ++i)
    text += (i == 0 ? "" : ", ") + display_name(hot[i].second, next.functions.at(hot[i].second)) +
            " (" + std::to_string(hot[i].first) + " samples, " +
            percent(static_cast<double>(hot[i].first) / static_cast<double>(total)) + ")";
  if (!cold.empty()) {
    text += "; cold, for size: ";
    for (std::size_t i = 0; i < cold.size(); ++i)
      text += (i == 0 ? "" : ", ") + cold[i];
  }
  return text;
}

} // namespace fdo::daemon
