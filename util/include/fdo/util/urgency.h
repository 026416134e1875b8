// How urgent work done for nobody yet is: background until someone comes to
// wait for it (raise()), then as urgent as what they wait for. Whoever does
// the work hooks raise() to act at once (fdod's compile pool continues a
// stopped background job and stops treating it as one: docs/workers.md,
// "Background jobs"); raised() is for checks made before the hook is set.
// Thread-safe.
#pragma once

#include <atomic>
#include <functional>
#include <mutex>
#include <utility>

namespace fdo {

class Urgency {
public:
  // Idempotent: only the first call runs the hook.
  void raise() {
    if (raised_.exchange(true)) return;
    std::lock_guard lk(mu_);
    if (hook_) hook_();
  }
  bool raised() const { return raised_.load(); }

  // The hook, while this object lives. Its destructor waits for a call of the
  // hook under way, so the hook may refer to what outlives only the Hook. The
  // hook runs with the Urgency's lock held: it must not take a lock under
  // which raise() is called.
  class Hook {
  public:
    Hook(Urgency& u, std::function<void()> hook) : u_(u) {
      std::lock_guard lk(u_.mu_);
      u_.hook_ = std::move(hook);
    }
    ~Hook() {
      std::lock_guard lk(u_.mu_);
      u_.hook_ = nullptr;
    }
    Hook(const Hook&) = delete;
    Hook& operator=(const Hook&) = delete;

  private:
    Urgency& u_;
  };

private:
  std::atomic<bool> raised_{false};
  std::mutex mu_;
  std::function<void()> hook_;
};

} // namespace fdo
