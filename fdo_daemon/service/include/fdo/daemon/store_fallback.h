// Serving through a profile store outage (docs/fleet.md, "When the profile
// store is down"): a decorator over the three interfaces through which the
// service reaches the store (cache::KeyStore, FeedbackStore, ProgramIndex).
//
// While the store answers, calls pass through and their answers are
// remembered (the last good current profile per key, key mappings, program
// rows, feedback totals). When a call fails with Errc::unavailable the store
// is `down`: reads answer from what was remembered, with no store I/O, and
// every write (feedback batches, profile writes, key mappings, program rows)
// is appended to the durable StoreSpool before it is acknowledged. A profile
// write acknowledged that way returns its provisional version (expected + 1)
// and is served as the current profile until it is replayed.
//
// A replayer thread retries with backoff (250 ms doubling to 30 s) and
// replays the spool in order: feedback batches under their batch id (the
// store ignores a batch it already applied, so a crash between applying and
// dequeuing never counts rows twice), profile writes with their expected
// version. A write that conflicts on replay was overtaken by another writer
// (the fleet moved on): it is dropped, counted and logged, and the rows of
// its provisional version are dropped with it (counted) since that version
// will never exist; the rows that led to it were spooled before it and still
// arrive, so the next rewrite counts them. The store is `up` again once the
// spool is empty. A restart with a non-empty spool replays it.
#pragma once

#include "fdo/cache/interfaces.h"
#include "fdo/daemon/feedback_loop.h"
#include "fdo/daemon/program_registry.h"
#include "fdo/daemon/store_spool.h"
#include "fdo/util/enum_names.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace fdo::daemon {

enum class StoreState { connecting, up, down };
inline constexpr EnumNames<StoreState, 3> kStoreStateNames{
    {{{StoreState::connecting, "connecting"}, {StoreState::up, "up"}, {StoreState::down, "down"}}}};
std::string_view to_string(StoreState state);

// What health, capabilities and the metrics report as `profile_store`.
struct StoreHealth {
  std::string kind;     // "sqlite" or "postgresql"
  std::string location; // without any password
  StoreState state = StoreState::connecting;
  std::string last_error; // the last unavailable error ("" = none yet)
  SpoolCounts spool;
  std::uint64_t spool_max_bytes = 0;
  std::uint64_t replayed_batches = 0;
  std::uint64_t replayed_writes = 0;
  std::uint64_t replayed_other = 0;
  // Profile writes dropped on replay because another writer came first.
  std::uint64_t dropped_conflicts = 0;
  // Dropped by the spool's cap, by kind.
  std::uint64_t dropped_cap_writes = 0;
  std::uint64_t dropped_cap_feedback = 0;
  std::uint64_t dropped_cap_other = 0;
  // Feedback rows dropped because their profile version was dropped.
  std::uint64_t dropped_rows = 0;
  // Entries the store refused on replay for another reason than unavailable
  // (pinned, invalid): dropped, logged.
  std::uint64_t dropped_refused = 0;
  std::uint64_t replay_attempts = 0;
};

struct StoreFallbackOptions {
  std::string kind;
  std::string location;
  std::string spool_path;
  std::uint64_t spool_max_bytes = 256u << 20;
  std::chrono::milliseconds backoff_min{250};
  std::chrono::milliseconds backoff_max{30000};
  // Remembered entries per kind of answer (profiles, mappings, programs, totals).
  std::size_t remembered = 65536;
  // Off in tests that drive replay_now() themselves.
  enum class Replayer { thread, manual } replayer = Replayer::thread;
};

class StoreFallback {
public:
  static Expected<std::unique_ptr<StoreFallback>> create(cache::KeyStore& keys,
                                                         FeedbackStore& feedback,
                                                         ProgramIndex& programs,
                                                         StoreFallbackOptions options);
  ~StoreFallback(); // stops the replayer (what is spooled stays spooled)
  StoreFallback(const StoreFallback&) = delete;
  StoreFallback& operator=(const StoreFallback&) = delete;

  // The decorated interfaces the service's parts use.
  cache::KeyStore& keys();
  FeedbackStore& feedback();
  ProgramIndex& programs();

  StoreHealth health() const;
  // Replays the spool (or, when it is empty and the store is down, probes the
  // store) once, now: ok when the store is up and the spool empty afterwards;
  // the store's unavailable error otherwise. Run by the replayer thread, or
  // (Replayer::manual) by the owner: never by both, never concurrently.
  Status replay_now();

  class Keys;
  class Feedback;
  class Programs;

private:
  StoreFallback(cache::KeyStore& keys, FeedbackStore& feedback, ProgramIndex& programs,
                StoreSpool spool, StoreFallbackOptions options);

  // A small memory of answers, oldest forgotten first.
  template <class V> class Remembered {
  public:
    explicit Remembered(std::size_t cap) : cap_(cap) {}
    void put(const std::string& key, V value);
    const V* find(const std::string& key) const;
    void erase(const std::string& key) { map_.erase(key); }

  private:
    std::size_t cap_;
    std::map<std::string, V> map_;
    std::deque<std::string> order_;
  };

  friend class Keys;
  friend class Feedback;
  friend class Programs;

  bool routes_to_spool() const; // under mu_
  bool spooling() const;        // the same, taking mu_
  void answered();              // under mu_: a direct call succeeded
  void went_down(const Error& error);
  // Spools an entry (under order_mu_), counting and logging what the cap dropped.
  Status spool(SpoolKind kind, std::string_view key, const nlohmann::json& body);
  void handle_dropped(const SpoolEntry& entry);
  Expected<profile_store::SharedProfile> current(std::string_view pk);
  void load_overlay();

  enum class Applied { done, unavailable };
  Expected<Applied> apply(const SpoolEntry& entry, Error* unavailable);
  Expected<Applied> apply_entry(const SpoolEntry& entry, Error* unavailable);
  Expected<Applied> apply_write(const SpoolEntry& entry, Error* unavailable);
  Expected<Applied> apply_feedback(const SpoolEntry& entry, Error* unavailable);
  void replayer_main();

  cache::KeyStore& inner_keys_;
  FeedbackStore& inner_feedback_;
  ProgramIndex& inner_programs_;
  StoreSpool spool_;
  StoreFallbackOptions options_;

  std::unique_ptr<Keys> keys_;
  std::unique_ptr<Feedback> feedback_;
  std::unique_ptr<Programs> programs_;

  // The spool's order: held by a write from its decision to spool until
  // its entry is appended, and by the replayer while it finds the spool
  // empty and turns the store up, so nothing goes straight to the store
  // while an earlier write waits in the spool. Taken before mu_.
  std::mutex order_mu_;
  // Routing and the memories; never held across store or spool I/O (reads
  // answered from memory while the store is down do not wait for appends).
  mutable std::mutex mu_;
  std::atomic<StoreState> state_{StoreState::connecting}; // written under mu_
  mutable std::mutex stats_mu_; // last_error_, counters_: never held across I/O
  std::string last_error_;
  StoreHealth counters_;
  Remembered<profile_store::SharedProfile> profiles_;
  // Spooled profile writes not yet replayed, by key: the provisional current profile.
  std::map<std::string, profile_store::StoredProfile> overlay_;
  Remembered<std::string> profile_keys_;
  Remembered<std::string> virtual_keys_;
  Remembered<profile_store::ProgramInfo> program_rows_;
  std::map<std::int64_t, std::int64_t> owned_; // programs per owner, last known
  Remembered<profile_store::FeedbackTotals> totals_;

  // The replayer's schedule (stop_, backoff_, next_attempt_); never held across I/O.
  std::mutex replay_mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::chrono::milliseconds backoff_;
  std::chrono::steady_clock::time_point next_attempt_{};
  std::thread replayer_;
};

} // namespace fdo::daemon
