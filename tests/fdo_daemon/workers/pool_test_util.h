// A WorkerPool of fdo_test_worker processes for the pool's tests, with short
// respawn backoffs and shutdown grace.
#pragma once

#include "fdo/daemon/worker_pool.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <memory>

namespace fdo::daemon::testing {

inline PoolOptions test_options(int size = 1) {
  using namespace std::chrono_literals;
  PoolOptions o;
  o.worker_path = FDO_TEST_WORKER;
  o.worker_args = {"--role", "exec"};
  o.size = size;
  o.name = "exec";
  o.defaults.wall = 20s;
  o.respawn_backoff_initial = 20ms;
  o.respawn_backoff_max = 100ms;
  o.shutdown_grace = 1s;
  return o;
}

inline std::unique_ptr<WorkerPool> make_pool(const PoolOptions& o) {
  auto pool = WorkerPool::create(o);
  if (!pool) FAIL(pool.error().describe());
  return std::move(*pool);
}

} // namespace fdo::daemon::testing
