// Single flight: among concurrent callers asking for one key, the first runs
// the work and the others wait for its result (value or error). The flight is
// forgotten as soon as it finishes, so a failure is never cached: the next
// caller after a failed flight runs the work again.
#pragma once

#include "fdo/util/expected.h"

#include <cstdint>
#include <exception>
#include <future>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

namespace fdo::cache::detail {

enum class FlightRole { leader, waiter };

template <class T> class SingleFlight {
public:
  template <class Fn> std::pair<Expected<T>, FlightRole> run(const std::string& key, Fn&& work) {
    std::promise<Expected<T>> promise;
    {
      std::unique_lock lock(mu_);
      if (auto it = flights_.find(key); it != flights_.end()) {
        std::shared_future<Expected<T>> wait_on = it->second;
        waits_++;
        lock.unlock();
        return {wait_on.get(), FlightRole::waiter};
      }
      flights_.emplace(key, promise.get_future().share());
    }
    // The leader publishes before forgetting the flight; callers that arrive
    // after the erase must find the work's effect elsewhere (the caller
    // re-checks its caches inside `work`).
    try {
      Expected<T> result = work();
      finish(key, [&] { promise.set_value(result); });
      return {std::move(result), FlightRole::leader};
    } catch (...) {
      finish(key, [&] { promise.set_exception(std::current_exception()); });
      throw;
    }
  }

  // Callers that joined another's flight instead of running the work (counted
  // when they start waiting).
  std::uint64_t waits() const {
    std::lock_guard lock(mu_);
    return waits_;
  }

  bool in_flight(const std::string& key) const {
    std::lock_guard lock(mu_);
    return flights_.count(key) != 0;
  }

private:
  template <class Publish> void finish(const std::string& key, Publish&& publish) {
    std::lock_guard lock(mu_);
    flights_.erase(key);
    publish();
  }

  mutable std::mutex mu_;
  std::unordered_map<std::string, std::shared_future<Expected<T>>> flights_;
  std::uint64_t waits_ = 0;
};

} // namespace fdo::cache::detail
