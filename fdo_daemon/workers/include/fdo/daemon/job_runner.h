// Something that runs worker jobs: the supervised WorkerPool in fdod, a fake
// in the service's unit tests.
#pragma once

#include "fdo/daemon/ipc.h"
#include "fdo/daemon/worker_stats.h"
#include "fdo/util/expected.h"

namespace fdo::daemon {

class JobRunner {
public:
  virtual ~JobRunner() = default;
  // Runs one job to completion under `limits`; thread-safe.
  virtual Expected<Message> run(const Message& request, const JobLimits& limits) = 0;
  virtual PoolStats stats() const = 0;
};

} // namespace fdo::daemon
