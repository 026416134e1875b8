#include "fdo/daemon/block_samples.h"

#include <algorithm>
#include <cctype>
#include <charconv>

namespace fdo::daemon {

using nlohmann::json;

namespace {
std::optional<std::uint64_t> count_of(const json& v) {
  if (v.is_number_unsigned()) return v.get<std::uint64_t>();
  if (v.is_number_integer() && v.get<std::int64_t>() >= 0)
    return static_cast<std::uint64_t>(v.get<std::int64_t>());
  return std::nullopt;
}

std::optional<std::uint32_t> index_of(std::string_view s) {
  std::uint32_t v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

// Calls f(key, value) for every member of j[key] that is an object.
template <typename F> void each_object(const json& j, const char* key, F&& f) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_object()) return;
  for (auto m = it->begin(); m != it->end(); ++m)
    if (m->is_object()) f(m.key(), *m);
}
} // namespace

void BlockTallies::add(const BlockTallies& other) {
  for (const auto& [event, fns] : other.blocks)
    for (const auto& [fn, bs] : fns)
      for (const auto& [b, n] : bs)
        blocks[event][fn][b] += n;
  for (const auto& [fn, brs] : other.branches)
    for (const auto& [b, events] : brs)
      for (const auto& [event, n] : events)
        branches[fn][b][event] += n;
}

BlockTallies block_tallies_from(const json& reply) {
  BlockTallies out;
  auto s = reply.find("samples");
  if (s == reply.end() || !s->is_object()) return out;
  each_object(*s, "blocks", [&](const std::string& event, const json& fns) {
    for (auto f = fns.begin(); f != fns.end(); ++f) {
      if (!f->is_object()) continue;
      for (auto b = f->begin(); b != f->end(); ++b) {
        auto index = index_of(b.key());
        auto n = count_of(*b);
        if (index && n && *n != 0) out.blocks[event][f.key()][*index] += *n;
      }
    }
  });
  each_object(*s, "branches", [&](const std::string& fn, const json& brs) {
    for (auto b = brs.begin(); b != brs.end(); ++b) {
      auto index = index_of(b.key());
      if (!index || !b->is_object()) continue;
      for (auto e = b->begin(); e != b->end(); ++e)
        if (auto n = count_of(*e); n && *n != 0) out.branches[fn][*index][e.key()] += *n;
    }
  });
  return out;
}

bool is_branch_miss_event(std::string_view event) {
  if (event == "branch-misses") return true;
  std::string upper(event);
  std::transform(upper.begin(), upper.end(), upper.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return upper.find("BR_MISP") != std::string::npos ||
         upper.find("MISPREDICT") != std::string::npos;
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
