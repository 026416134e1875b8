// The JSON documents the web page renders, one per view, built from the read
// methods only (through a ReadOnlyBackend). No I/O of their own beyond the
// backend calls, so tests drive them with a fake backend.
#pragma once

#include "fdo/ctl/backend.h"
#include "fdo/util/expected.h"

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace fdo::ctl::web {

// Programs (daemon only: the store has no registry view) and profiles, and
// where they were read from.
Expected<nlohmann::json> overview_view(Backend& backend);

// One version of a profile (current when unset) with its functions hottest
// first: each with its total count, share of the profile's counts, counters,
// and the sampled figures (time share, misses) the profile records for it.
Expected<nlohmann::json> profile_view(Backend& backend, const std::string& pk,
                                      std::optional<std::int64_t> version);

// Every retained version with the reason for each rewrite.
Expected<nlohmann::json> history_view(Backend& backend, const std::string& pk);

// What changed between two versions (`fdoctl profile diff --json`'s shape).
Expected<nlohmann::json> diff_view(Backend& backend, const std::string& pk, std::int64_t v1,
                                   std::int64_t v2);

// A program's recorded stages (cache.explain) with its name and profile key:
// the stage timeline and the key lineage are drawn from these.
Expected<nlohmann::json> program_view(Backend& backend, const std::string& ik);

} // namespace fdo::ctl::web
