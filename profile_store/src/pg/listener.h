// Change notification. Every transaction that changes a profile (write, pin,
// unpin, reset, remove, import) runs pg_notify('fdo_profile_changed', pk);
// PostgreSQL delivers it to every listening session after the commit.
//
// ProfileCache: current(pk) and summary(pk) per key, filled by reads,
// dropped on a key's notification. It is used only while the listener is
// connected; while it is down every read queries, and on reconnecting the
// cache is cleared (notifications sent meanwhile are lost). An epoch counter
// makes a read that raced with a notification not cache what it read: a
// read takes the epoch before its query and stores only if no invalidation
// happened since.
//
// Listener: one dedicated connection and thread: LISTEN, then poll() on
// PQsocket (and an eventfd to stop), PQconsumeInput, PQnotifies; on a lost
// connection it marks the cache down and reconnects with backoff.
#pragma once

#include "conn.h"
#include "fdo/util/fd.h"

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>

namespace fdo::profile_store::pg {

class ProfileCache {
public:
  // Entries above this are dropped wholesale (they refill on demand).
  static constexpr std::size_t kMaxEntries = 4096;

  // The epoch to pass to store_*; nullopt while the cache is not in use.
  std::optional<std::uint64_t> begin_read() const;
  std::optional<std::optional<StoredProfile>> current(const std::string& pk) const;
  std::optional<std::optional<ProfileSummary>> summary(const std::string& pk) const;
  void store_current(const std::string& pk, std::uint64_t epoch,
                     const std::optional<StoredProfile>& value);
  void store_summary(const std::string& pk, std::uint64_t epoch,
                     const std::optional<ProfileSummary>& value);

  void invalidate(const std::string& pk);
  // Cleared and in use (listener connected), or cleared and bypassed.
  void set_live(bool live);
  bool live() const;

private:
  struct Entry {
    std::optional<std::optional<StoredProfile>> current;
    std::optional<std::optional<ProfileSummary>> summary;
  };
  Entry* slot(const std::string& pk, std::uint64_t epoch); // mu_ held

  mutable std::mutex mu_;
  bool live_ = false;
  std::uint64_t epoch_ = 0;
  std::unordered_map<std::string, Entry> entries_;
};

class Listener {
public:
  using Connect = std::function<Expected<Conn>()>;
  // Connects (failure is not an error: it retries in the background).
  Listener(Connect connect, ProfileCache& cache);
  ~Listener();
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

private:
  void run();
  // One connection's life: returns when it broke or stop was asked.
  void serve(Conn& conn);

  Connect connect_;
  ProfileCache& cache_;
  Fd wake_; // eventfd: stop
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

} // namespace fdo::profile_store::pg
