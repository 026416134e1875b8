// StoreFallback's replay (store_fallback.h): the spool, oldest first, into
// the store once it answers again; the replayer thread and its backoff.
#include "fdo/daemon/store_fallback.h"
#include "fdo/util/log.h"
#include "fdo/util/log_record.h"
#include "spool_entries.h"

namespace fdo::daemon {

namespace ps = fdo::profile_store;
using namespace spool_entries;
using nlohmann::json;

Expected<StoreFallback::Applied> StoreFallback::apply_feedback(const SpoolEntry& e,
                                                               Error* unavailable) {
  std::vector<ps::FeedbackRow> rows;
  std::size_t dead = 0;
  for (const json& j : e.body.at("rows")) {
    ps::FeedbackRow r = row_from_json(j);
    FDO_TRY(bool is_dead, spool_.is_dead(r.pk, r.version));
    if (is_dead) {
      ++dead;
      continue;
    }
    rows.push_back(std::move(r));
  }
  if (dead != 0) {
    log::warning("profile store replay: dropped " + std::to_string(dead) +
                 " feedback rows of profile versions that were dropped");
    std::lock_guard lk(stats_mu_);
    counters_.dropped_rows += dead;
  }
  if (!rows.empty()) {
    Status st = inner_feedback_.append_feedback(rows, e.key);
    if (!st) {
      if (is_unavailable(st.error())) {
        *unavailable = std::move(st).error();
        return Applied::unavailable;
      }
      log::error("profile store replay: feedback batch " + e.key +
                 " refused, dropped: " + st.error().describe());
      std::lock_guard lk(stats_mu_);
      ++counters_.dropped_refused;
      counters_.dropped_rows += rows.size();
      return Applied::done;
    }
  }
  std::lock_guard lk(stats_mu_);
  ++counters_.replayed_batches;
  return Applied::done;
}

Expected<StoreFallback::Applied> StoreFallback::apply_write(const SpoolEntry& e,
                                                            Error* unavailable) {
  const std::int64_t expected = e.body.at("expected_version").get<std::int64_t>();
  const std::int64_t version = expected + 1;
  // What is served for the key once this write is replayed or dropped: the
  // store's current profile when known (while the rest of the spool drains,
  // reads are still answered from memory).
  using Known = std::optional<ps::SharedProfile>;
  auto settle = [&](Known now) {
    std::lock_guard lk(mu_);
    if (now) profiles_.put(e.key, std::move(*now));
    if (auto it = overlay_.find(e.key); it != overlay_.end() && it->second.version <= version)
      overlay_.erase(it);
  };
  auto drop = [&](const std::string& why, std::uint64_t StoreHealth::*counter,
                  Known now) -> Status {
    FDO_TRY_STATUS(spool_.mark_dead(e.key, version));
    log::record(log::Level::warning,
                "profile store replay: spooled write of profile " + e.key.substr(0, 12) + " v" +
                    std::to_string(version) + " dropped: " + why,
                {{"FDO_PROFILE_KEY", e.key}, {"FDO_PROFILE_VERSION", std::to_string(version)}});
    settle(std::move(now));
    std::lock_guard lk(stats_mu_);
    ++(counters_.*counter);
    return ok();
  };
  FDO_TRY(bool built_on_dead, spool_.is_dead(e.key, expected));
  if (built_on_dead) {
    FDO_TRY_STATUS(
        drop("it builds on a dropped version", &StoreHealth::dropped_conflicts, std::nullopt));
    return Applied::done;
  }
  FDO_TRY(ProfileDoc doc, profile_from_json(e.body.at("doc")));
  FDO_TRY(ps::WriteInfo info, info_from_json(e.body.at("info")));
  auto r = inner_feedback_.write(e.key, expected, doc, info);
  if (r) {
    settle(ps::SharedProfile(
        std::make_shared<const ps::StoredProfile>(provisional(e.key, version, doc, info))));
    std::lock_guard lk(stats_mu_);
    ++counters_.replayed_writes;
    return Applied::done;
  }
  if (is_unavailable(r.error())) {
    *unavailable = std::move(r).error();
    return Applied::unavailable;
  }
  if (r.error().code() == Errc::conflict) {
    // Written already? (applied before a crash or a lost reply, then not dequeued)
    auto now = inner_feedback_.current(e.key);
    if (!now && is_unavailable(now.error())) {
      *unavailable = std::move(now).error();
      return Applied::unavailable;
    }
    if (now && *now && (*now)->version == version && (*now)->digest == profile_digest(doc) &&
        (*now)->host == info.host) {
      settle(*now);
      std::lock_guard lk(stats_mu_);
      ++counters_.replayed_writes;
      return Applied::done;
    }
    FDO_TRY_STATUS(drop("another writer came first (" + r.error().message() + ")",
                        &StoreHealth::dropped_conflicts, now ? Known(*now) : Known()));
    return Applied::done;
  }
  FDO_TRY_STATUS(
      drop("refused: " + r.error().describe(), &StoreHealth::dropped_refused, std::nullopt));
  return Applied::done;
}

Expected<StoreFallback::Applied> StoreFallback::apply(const SpoolEntry& e, Error* unavailable) {
  // A body without a field its kind needs (a damaged row) is unreadable, not
  // a crash of the replayer: the caller drops it, counted and logged.
  try {
    return apply_entry(e, unavailable);
  } catch (const json::exception& ex) {
    return make_error(Errc::corrupt, "spooled " + std::string(to_string(e.kind)) +
                                         " entry is missing a field: " + ex.what());
  }
}

Expected<StoreFallback::Applied> StoreFallback::apply_entry(const SpoolEntry& e,
                                                            Error* unavailable) {
  switch (e.kind) {
  case SpoolKind::feedback:
    return apply_feedback(e, unavailable);
  case SpoolKind::profile_write:
    return apply_write(e, unavailable);
  default:
    break;
  }
  Status st = ok();
  // Key entries carry {key, value}; a program entry is the program row itself.
  if (e.kind == SpoolKind::profile_key)
    st = inner_keys_.put_profile_key(e.body.at("key").get<std::string>(),
                                     e.body.at("value").get<std::string>());
  else if (e.kind == SpoolKind::virtual_key)
    st = inner_keys_.put_virtual_key(e.body.at("key").get<std::string>(),
                                     e.body.at("value").get<std::string>());
  else
    st = inner_programs_.add(program_from_json(e.body));
  if (!st) {
    if (is_unavailable(st.error())) {
      *unavailable = std::move(st).error();
      return Applied::unavailable;
    }
    log::warning("profile store replay: spooled " + std::string(to_string(e.kind)) +
                 " refused, dropped: " + st.error().describe());
    std::lock_guard lk(stats_mu_);
    ++counters_.dropped_refused;
    return Applied::done;
  }
  std::lock_guard lk(stats_mu_);
  ++counters_.replayed_other;
  return Applied::done;
}

Status StoreFallback::replay_now() {
  {
    std::lock_guard lk(stats_mu_);
    ++counters_.replay_attempts;
  }
  bool replayed_any = false;
  while (true) {
    FDO_TRY(std::optional<SpoolEntry> e, spool_.front());
    if (!e) {
      // Empty: up again, unless a write was spooled meanwhile (then loop).
      bool probe = false;
      {
        std::lock_guard lk(mu_);
        if (spool_.counts().entries() != 0) continue;
        probe = !replayed_any && state_ == StoreState::down;
      }
      if (probe) {
        // Down with nothing spooled (a read failed): ask the store something cheap.
        auto r = inner_keys_.lookup_profile_key(std::string(64, '0'));
        if (!r) {
          if (is_unavailable(r.error())) {
            std::lock_guard lk(stats_mu_);
            last_error_ = r.error().message();
          }
          return std::move(r).error();
        }
      }
      // Under the spool's order lock: no write decided to spool and not yet
      // appended, so once up, nothing goes straight to the store ahead of it.
      std::lock_guard order(order_mu_);
      if (spool_.counts().entries() != 0) continue;
      if (auto st = spool_.clear_dead(); !st) log::error(st.error().describe());
      std::lock_guard lk(mu_);
      if (state_ != StoreState::up)
        log::record(log::Level::notice,
                    "profile store " + options_.location + " is up" +
                        (replayed_any ? "; spool replayed" : ""),
                    {{"FDO_PROFILE_STORE_STATE", "up"}});
      state_ = StoreState::up;
      return ok();
    }
    Error unavailable = make_error(Errc::unavailable, "");
    auto applied = apply(*e, &unavailable);
    if (!applied) {
      // The entry itself cannot be read back: a damaged spool row. Dropping it
      // is the only way forward; say so loudly.
      log::error("profile store replay: spool entry " + std::to_string(e->seq) +
                 " unreadable, dropped: " + applied.error().describe());
      std::lock_guard lk(stats_mu_);
      ++counters_.dropped_refused;
    } else if (*applied == Applied::unavailable) {
      std::lock_guard lk(stats_mu_);
      last_error_ = unavailable.message();
      return unavailable;
    }
    FDO_TRY_STATUS(spool_.pop(e->seq));
    replayed_any = true;
  }
}

void StoreFallback::replayer_main() {
  std::unique_lock lk(replay_mu_);
  while (!stop_) {
    bool needed;
    {
      std::lock_guard state_lk(mu_);
      needed = state_ == StoreState::down;
    }
    if (!needed) {
      wake_.wait(lk, [&] {
        if (stop_) return true;
        std::lock_guard state_lk(mu_);
        return state_ == StoreState::down;
      });
      continue;
    }
    if (std::chrono::steady_clock::now() < next_attempt_) {
      wake_.wait_until(lk, next_attempt_, [&] { return stop_; });
      continue;
    }
    lk.unlock();
    Status st = replay_now();
    lk.lock();
    if (st) {
      backoff_ = options_.backoff_min;
      continue;
    }
    if (!is_unavailable(st.error())) log::error("profile store replay: " + st.error().describe());
    next_attempt_ = std::chrono::steady_clock::now() + backoff_;
    backoff_ = std::min(backoff_ * 2, options_.backoff_max);
  }
}

} // namespace fdo::daemon
