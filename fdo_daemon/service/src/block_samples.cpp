#include "fdo/daemon/block_samples.h"

#include <algorithm>
#include <cctype>

namespace fdo::daemon {

using nlohmann::json;

bool is_branch_miss_event(std::string_view event) {
  if (event == "branch-misses") return true;
  std::string upper(event);
  std::transform(upper.begin(), upper.end(), upper.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return upper.find("BR_MISP") != std::string::npos ||
         upper.find("MISPREDICT") != std::string::npos;
}

bool has_branch_misses(const BlockTallies& tallies) {
  for (const auto& [fn, brs] : tallies.branches)
    for (const auto& [index, events] : brs)
      for (const auto& entry : events)
        if (is_branch_miss_event(entry.first)) return true;
  return false;
}

std::map<std::string, std::vector<BranchStat>>
branch_stats(const std::map<std::string, std::vector<BranchStat>>& weights,
             const BlockTallies& tallies) {
  std::map<std::string, std::map<std::uint32_t, BranchStat>> merged;
  for (const auto& [fn, list] : weights)
    for (const BranchStat& w : list) {
      BranchStat& b = merged[fn][w.index];
      b.index = w.index;
      b.taken = w.taken;
      b.not_taken = w.not_taken;
    }
  for (const auto& [fn, brs] : tallies.branches)
    for (const auto& [index, events] : brs)
      for (const auto& [event, n] : events)
        if (is_branch_miss_event(event)) {
          BranchStat& b = merged[fn][index];
          b.index = index;
          b.misses += n;
        }
  std::map<std::string, std::vector<BranchStat>> out;
  for (auto& [fn, brs] : merged)
    for (auto& [index, b] : brs)
      out[fn].push_back(b);
  return out;
}

json blocks_record(const BlockTallies& tallies) {
  json out = json::object();
  for (const auto& [event, fns] : tallies.blocks)
    for (const auto& [fn, bs] : fns)
      for (const auto& [b, n] : bs)
        out[event][fn][std::to_string(b)] = n;
  return out;
}

json branches_record(const BlockTallies& tallies,
                     const std::map<std::string, std::vector<BranchStat>>& weights) {
  json out = json::object();
  for (const auto& [fn, brs] : tallies.branches)
    for (const auto& [b, events] : brs) {
      json misses = json::object();
      for (const auto& [event, n] : events)
        if (event != "cpu-clock" && event != "task-clock") misses[event] = n;
      if (misses.empty()) continue;
      json entry = {{"misses", std::move(misses)}};
      if (auto w = weights.find(fn); w != weights.end())
        for (const BranchStat& s : w->second)
          if (s.index == b) {
            entry["taken"] = s.taken;
            entry["not_taken"] = s.not_taken;
          }
      out[fn][std::to_string(b)] = std::move(entry);
    }
  return out;
}

} // namespace fdo::daemon
