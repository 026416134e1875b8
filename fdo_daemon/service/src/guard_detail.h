// What guard.cpp (planning and recording stages) and guard_writes.cpp
// (what the guard writes into the profile) share. Private to the service.
#pragma once

#include "fdo/daemon/guard.h"

#include <cstdint>
#include <string>

namespace fdo::daemon::guard_detail {

// A stored profile's digest: the store's, checked against its body when it
// was decoded (a document built in memory, without one, is hashed).
std::string digest_of(const profile_store::StoredProfile& sp);
// "v3 profiled O2" for the profiled build of version 3; the plain build has no version.
std::string named(const Variant& v, std::int64_t version);
// "4+4 stages, candidate 3.1% faster so far": a running trial, for people.
std::string progress(const Trial& t, const TrialConfig& c);

} // namespace fdo::daemon::guard_detail
