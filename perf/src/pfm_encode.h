// The only door to libpfm4. Its headers ship their own copy of the perf_event
// ABI (perfmon/perf_event.h) that clashes with <linux/perf_event.h>, so only
// pfm_encode.cpp includes them and this header passes plain integers.
#pragma once

#include "fdo/util/expected.h"

#include <cstdint>
#include <string>
#include <vector>

namespace fdo::perf::detail {

struct PfmEncoding {
  std::uint32_t type = 0;
  std::uint64_t config = 0;
  std::uint64_t config1 = 0;
  std::uint64_t config2 = 0;
  std::string canonical; // libpfm4's fully qualified event string
};

// pfm_get_os_event_encoding(name, PFM_PLM3, PFM_OS_PERF_EVENT_EXT): user level.
// Errors: not_found / invalid_argument for names libpfm4 rejects,
// unsupported when the library could not initialise or has no active PMU.
Expected<PfmEncoding> pfm_encode(const std::string& name);
std::vector<std::string> pfm_active_pmus();

} // namespace fdo::perf::detail
