// The i-cache rule (docs/perf.md, "i-cache layout"): where sampled L1
// i-cache misses concentrate in a few functions, those are laid out hot
// (together, first in the text) and the functions the profile saw never run
// are laid out cold (optimized for size, last), instead of turning the whole
// module to -Os. Pure logic, no I/O.
#pragma once

#include "fdo/daemon/policy_config.h"
#include "fdo/util/profile.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace fdo::daemon {

// Whether a sampled event counts instruction-cache misses: the generic
// `L1-icache-load-misses` or a PMU event whose name says so (ICACHE*, L1I*).
bool is_icache_miss_event(std::string_view event);

// Adds the i-cache miss samples of `misses` (event -> function -> samples)
// into `into` (function -> samples).
void add_icache_samples(std::map<std::string, std::uint64_t>& into,
                        const std::map<std::string, std::map<std::string, std::uint64_t>>& misses);

// Marks, in `next`, the functions holding at least policy.icache_hot_share of
// the i-cache miss samples `samples` (function -> samples under the current
// version) hot, and the functions whose profiled counts are all zero (and
// that took no miss sample) cold, once the samples number at least
// policy.icache_layout_min_samples and, where `mpki` (the counted misses per
// 1000 instructions) is known, it reaches policy.icache_mpki_size_threshold.
// Returns the reason when it marked a function not marked before; nullopt
// when nothing changed (so a layout already in place causes no churn).
std::optional<std::string> decide_icache_layout(const PolicyConfig& config,
                                                const std::map<std::string, std::uint64_t>& samples,
                                                std::optional<double> mpki, ProfileDoc& next);

} // namespace fdo::daemon
