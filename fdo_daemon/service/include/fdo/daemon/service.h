// The fdod service: everything behind the socket. It owns the profile store,
// the compile and exec worker pools and the cache orchestrator, registers the
// JSON-RPC methods (docs/fdod.md, schemas/methods/) and runs the feedback loop
// that rewrites profiles (policy.h).
//
// Tenancy: the peer's uid is the tenant. Unless share_profiles_across_tenants
// is set, a program's bytes are scoped by its tenant before they are keyed, so
// its initial key and its profile key differ from another tenant's for the
// same IR, and every method checks that the caller owns what it names.
#pragma once

#include "fdo/daemon/config.h"
#include "fdo/daemon/jsonrpc.h"
#include "fdo/util/expected.h"

#include <memory>
#include <string>

namespace fdo::daemon {

struct ServiceOptions {
  Config config;
  std::string worker_path; // the fdo-worker executable
};

class Service {
public:
  static Expected<std::unique_ptr<Service>> create(ServiceOptions options);
  // Flushes pending feedback, stops the pools.
  ~Service();
  Service(const Service&) = delete;
  Service& operator=(const Service&) = delete;

  void register_methods(Dispatcher& dispatcher);
  // Writes batched feedback rows to the store (one transaction).
  Status flush_feedback();
  // Applies the runtime-changeable keys of a reloaded configuration.
  void reconfigure(const Config& config);

  struct Impl;

private:
  explicit Service(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

} // namespace fdo::daemon
