// In-process leases (docs/runtimes.md, "In-process execution"): a runtime that
// links a program's compiled output into its own process holds a lease on it.
// The lease records what fdod handed out — which tenant and connection hold
// it, the output's profile key and version, and the counter layout of
// instrumented code — so that feedback.submit can check every number a client
// sends against it. Leases live as long as their connection: the server's
// disconnect hook drops them all.
//
// Thread-safe; one lock over the table, held only for map operations.
#pragma once

#include "fdo/daemon/block_samples.h"
#include "fdo/daemon/guard.h"
#include "fdo/daemon/lifecycle.h"
#include "fdo/daemon/program_registry.h"
#include "fdo/daemon/stage_metadata.h"
#include "fdo/util/expected.h"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <sys/types.h>
#include <unordered_map>
#include <vector>

namespace fdo::daemon {

class LeaseSampling; // lease_sampling.h

// A guarded lease (program.lease with `guard: true`, docs/runtimes.md,
// "Guarded leases"): one stage of the program's lifecycle, planned by the
// guard as an execute stage is. Its first feedback.submit is the stage's
// measurement (the mean time per call of its batches goes into the trial);
// `renew` tells the runtime to lease again after it, for the next stage's plan.
struct GuardedLease {
  GuardedLease(StagePlan p, std::shared_ptr<LifecycleTable::Entry> l, bool r)
      : plan(std::move(p)), life(std::move(l)), renew(r) {}
  const StagePlan plan;
  const std::shared_ptr<LifecycleTable::Entry> life; // null before the program's first profile
  const bool renew;
  std::atomic<bool> recorded{false}; // the guard was told of the stage
};

struct ProgramLease {
  std::uint64_t id = 0;
  uid_t uid = 0;
  std::uint64_t connection = 0;
  ProgramRef program;
  std::string pk;
  std::int64_t profile_version = 0;        // what the leased output was compiled with
  std::int64_t target_profile_version = 0; // the current version when it was leased
  // The digest the lease asked for and the one its output was compiled for
  // (they differ while a tier-up is pending), and its mode: what the
  // program's lifecycle counts its feedback for (lifecycle.h).
  std::string planned_digest, served_digest;
  CompileMode served_mode = CompileMode::plain;
  // Where the planned build's compile stood when an earlier one was served.
  CompileState compile = CompileState::none;
  std::string storage_key;
  std::string mode; // compile mode of the leased output
  std::vector<std::string> entries;
  // The output's metadata (stage_metadata.h), shared with the cached entry
  // and the exec path: its instrumented functions (PGO name -> CFG hash and
  // number of counters; feedback.submit accepts counts for exactly these, of
  // exactly these lengths), fingerprints, source names and branch weights.
  StageMetadataRef metadata;
  // The samplers on the runtime's threads (program.sample), or null where
  // fdod does not sample this lease; sampling_reason says why, or with what.
  std::shared_ptr<LeaseSampling> sampling;
  std::string sampling_reason;
  // Set for a guarded lease (null: the current profile's build, as it is).
  std::shared_ptr<GuardedLease> guarded;
};

using LeaseRef = std::shared_ptr<const ProgramLease>;

struct LeaseLimits {
  std::size_t max_per_connection = 64;
};

class LeaseTable {
public:
  // Assigns the lease its id. Errc::resource_exhausted when its connection
  // already holds max_per_connection leases.
  Expected<LeaseRef> add(ProgramLease lease, const LeaseLimits& limits);
  // The lease `id` when `uid` holds it on `connection`; Errc::not_found
  // otherwise — the same answer whether the lease does not exist or is
  // another connection's, so ids reveal nothing about other clients.
  Expected<LeaseRef> find(std::uint64_t id, uid_t uid, std::uint64_t connection) const;
  // Drops one lease (same rule as find). Returns it.
  Expected<LeaseRef> release(std::uint64_t id, uid_t uid, std::uint64_t connection);
  // Drops every lease of a closed connection; returns how many.
  std::size_t release_connection(std::uint64_t connection);

  std::size_t size() const;
  std::size_t count_for(uid_t uid) const;
  std::uint64_t granted() const; // leases ever added

private:
  mutable std::mutex mu_;
  std::uint64_t next_id_ = 1;
  std::uint64_t granted_ = 0;
  std::unordered_map<std::uint64_t, LeaseRef> leases_;
  std::unordered_map<std::uint64_t, std::size_t> per_connection_;
};

} // namespace fdo::daemon
