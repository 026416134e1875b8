// Builds ahead of need a stage may come to wait for (Orchestrator::Impl):
// each queued or running one has an Urgency, handed to Compiler::compile,
// raised when a stage asks for the same CK (joins the compile, or schedules
// the build the queue then moves up). fdod then runs the compile job as a
// stage's: continued if stopped, never preempted (docs/workers.md,
// "Background jobs"). An entry lives while its job holds the Urgency.
#pragma once

#include "fdo/util/urgency.h"

#include <iterator>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

namespace fdo::cache::detail {

class AheadBuilds {
public:
  std::shared_ptr<Urgency> add(const std::string& ck) {
    auto u = std::make_shared<Urgency>();
    std::lock_guard lk(mu_);
    for (auto it = by_ck_.begin(); it != by_ck_.end();)
      it = it->second.expired() ? by_ck_.erase(it) : std::next(it);
    by_ck_[ck] = u;
    return u;
  }

  // A stage waits for `ck`'s build: raised if one is ahead of need.
  void raise(const std::string& ck) {
    std::shared_ptr<Urgency> u;
    {
      std::lock_guard lk(mu_);
      if (auto it = by_ck_.find(ck); it != by_ck_.end()) u = it->second.lock();
    }
    if (u) u->raise(); // outside the lock: the compiler's hook takes its own
  }

private:
  std::mutex mu_;
  std::unordered_map<std::string, std::weak_ptr<Urgency>> by_ck_;
};

} // namespace fdo::cache::detail
