// The remote object tier: a shared store of compiled outputs that several
// hosts read and write (docs/fleet.md), consulted after the memory and disk
// tiers miss and before a compile. The orchestrator sees only this interface;
// redis_tier.h is the one back end. A remote tier never fails a stage: an
// unreachable, slow or corrupt store is a miss, reported in its stats.
#pragma once

#include "fdo/cache/entry.h"

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace fdo::cache {

enum class RemoteFetchStatus {
  hit,
  miss,              // no entry under the key
  corrupt,           // an entry that failed its checksum, framing or key check
  identity_mismatch, // an intact entry compiled under another compiler identity
  too_large,         // an entry over the size cap (not read past the cap)
  unavailable,       // the server could not be reached in time (or is backing off)
};
std::string_view to_string(RemoteFetchStatus s);

struct RemoteFetch {
  RemoteFetchStatus status = RemoteFetchStatus::miss;
  std::shared_ptr<const Entry> entry; // set on hit
  std::string problem;                // why, for anything but hit and miss
};

// Connection state as reported in health, capabilities and metrics.
enum class RemoteState {
  connecting, // not yet tried
  up,         // the last command succeeded
  down,       // the last attempt failed; retried after a backoff
};
std::string_view to_string(RemoteState s);

struct RemoteTierStats {
  std::string endpoint; // as configured, e.g. "redis://10.0.0.5:6379"
  RemoteState state = RemoteState::connecting;
  std::string last_error; // the most recent failure, "" when none yet
  std::uint64_t hits = 0, misses = 0;
  std::uint64_t corrupt = 0; // entries that failed validation (misses)
  std::uint64_t identity_mismatches = 0;
  std::uint64_t too_large = 0;         // entries over the cap, read or about to be written
  std::uint64_t unavailable = 0;       // lookups answered "unavailable" (timed out, down)
  std::uint64_t errors = 0;            // connect or command failures
  std::uint64_t reconnects = 0;        // connections opened after the first
  std::uint64_t stores = 0;            // entries written
  std::uint64_t store_failures = 0;    // writes that failed or were dropped
  std::uint64_t store_queue_bytes = 0; // encoded bytes waiting to be written
};
nlohmann::json to_json(const RemoteTierStats& s);

class RemoteTier {
public:
  virtual ~RemoteTier() = default;
  // The entry stored under `key`, checked like a disk file: intact, stored
  // under that key, compiled under `expected_identity`. Returns within the
  // tier's configured time bound whatever the server does.
  virtual RemoteFetch fetch(const std::string& key, const std::string& expected_identity) = 0;
  // Queues the entry for writing; never blocks on the network.
  virtual void store(std::shared_ptr<const Entry> entry) = 0;
  // Waits until every queued write has been attempted (tests, shutdown).
  virtual void flush() = 0;
  virtual RemoteTierStats stats() const = 0;
};

} // namespace fdo::cache
