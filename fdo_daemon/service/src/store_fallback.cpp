#include "fdo/daemon/store_fallback.h"

#include "adapters.h"
#include "fdo/util/log.h"
#include "fdo/util/log_record.h"
#include "spool_entries.h"

namespace fdo::daemon {

namespace ps = fdo::profile_store;
using namespace spool_entries;
using nlohmann::json;

std::string_view to_string(StoreState state) {
  return kStoreStateNames.name(state);
}

// --- Remembered ----------------------------------------------------------

template <class V> void StoreFallback::Remembered<V>::put(const std::string& key, V value) {
  auto [it, inserted] = map_.insert_or_assign(key, std::move(value));
  if (!inserted) return;
  order_.push_back(key);
  while (map_.size() > cap_ && !order_.empty()) {
    map_.erase(order_.front());
    order_.pop_front();
  }
  // Keys erased meanwhile leave stale names in order_; keep it bounded too.
  while (order_.size() > 2 * cap_ + 16)
    order_.pop_front();
}

template <class V> const V* StoreFallback::Remembered<V>::find(const std::string& key) const {
  auto it = map_.find(key);
  return it == map_.end() ? nullptr : &it->second;
}

// --- the three decorated interfaces -------------------------------------

class StoreFallback::Keys final : public cache::KeyStore {
public:
  explicit Keys(StoreFallback& f) : f_(f) {}

  Expected<std::optional<std::string>> lookup_profile_key(const std::string& ik) override {
    return lookup(ik, f_.profile_keys_, [&] { return f_.inner_keys_.lookup_profile_key(ik); });
  }
  Status put_profile_key(const std::string& ik, const std::string& pk) override {
    return put(SpoolKind::profile_key, ik, pk, f_.profile_keys_,
               [&] { return f_.inner_keys_.put_profile_key(ik, pk); });
  }
  Expected<std::optional<std::string>> lookup_virtual_key(const std::string& ck) override {
    return lookup(ck, f_.virtual_keys_, [&] { return f_.inner_keys_.lookup_virtual_key(ck); });
  }
  Status put_virtual_key(const std::string& ck, const std::string& vk) override {
    return put(SpoolKind::virtual_key, ck, vk, f_.virtual_keys_,
               [&] { return f_.inner_keys_.put_virtual_key(ck, vk); });
  }
  Expected<cache::ProfileRef> current_profile(const std::string& pk) override {
    FDO_TRY(ps::SharedProfile cur, f_.current(pk));
    return profile_ref(pk, std::move(cur));
  }

private:
  template <class Call>
  Expected<std::optional<std::string>> lookup(const std::string& key,
                                              Remembered<std::string>& memory, Call call) {
    bool direct;
    {
      std::lock_guard lk(f_.mu_);
      direct = !f_.routes_to_spool();
    }
    if (direct) {
      auto r = call();
      if (r) {
        std::lock_guard lk(f_.mu_);
        f_.answered();
        if (*r) {
          memory.put(key, **r);
          return r;
        }
        // Not in the store (yet): a mapping spooled meanwhile still counts.
        if (const std::string* known = memory.find(key)) return std::optional<std::string>(*known);
        return r;
      }
      if (!is_unavailable(r.error())) return r;
      f_.went_down(r.error());
    }
    std::lock_guard lk(f_.mu_);
    if (const std::string* known = memory.find(key)) return std::optional<std::string>(*known);
    return std::optional<std::string>();
  }

  template <class Call>
  Status put(SpoolKind kind, const std::string& key, const std::string& value,
             Remembered<std::string>& memory, Call call) {
    auto spool = [&]() -> Status { // under order_mu_
      FDO_TRY_STATUS(f_.spool(kind, key, json{{"key", key}, {"value", value}}));
      std::lock_guard lk(f_.mu_);
      memory.put(key, value);
      return ok();
    };
    {
      std::lock_guard order(f_.order_mu_);
      if (f_.spooling()) return spool();
    }
    Status st = call();
    if (st) {
      std::lock_guard lk(f_.mu_);
      memory.put(key, value);
      return st;
    }
    if (!is_unavailable(st.error())) return st;
    f_.went_down(st.error());
    std::lock_guard order(f_.order_mu_);
    return spool();
  }

  StoreFallback& f_;
};

class StoreFallback::Feedback final : public FeedbackStore {
public:
  explicit Feedback(StoreFallback& f) : f_(f) {}

  Expected<ps::SharedProfile> current(std::string_view pk) override { return f_.current(pk); }

  // A retained version (the guard's incumbent). While the store is down only
  // the remembered current version can answer; any other is the store's
  // unavailable error, so the caller does not mistake it for a pruned one.
  Expected<std::optional<ps::StoredProfile>> version(std::string_view pk,
                                                     std::int64_t version) override {
    bool direct;
    {
      std::lock_guard lk(f_.mu_);
      direct = !f_.routes_to_spool();
    }
    if (direct) {
      auto r = f_.inner_feedback_.version(pk, version);
      if (r || !is_unavailable(r.error())) return r;
      f_.went_down(r.error());
    }
    FDO_TRY(ps::SharedProfile cur, f_.current(pk));
    if (cur && cur->version == version) return std::optional<ps::StoredProfile>(*cur);
    return make_error(Errc::unavailable, "the profile store is unavailable and version " +
                                             std::to_string(version) + " of " + std::string(pk) +
                                             " is not the remembered current one");
  }

  Expected<std::optional<ps::FeedbackTotals>> feedback(std::string_view pk,
                                                       std::int64_t version) override {
    const std::string key = std::string(pk) + "@" + std::to_string(version);
    bool direct;
    {
      std::lock_guard lk(f_.mu_);
      direct = !f_.routes_to_spool();
    }
    if (direct) {
      auto r = f_.inner_feedback_.feedback(pk, version);
      if (r) {
        if (*r) {
          std::lock_guard lk(f_.mu_);
          f_.totals_.put(key, **r);
        }
        return r;
      }
      if (!is_unavailable(r.error())) return r;
      f_.went_down(r.error());
    }
    std::lock_guard lk(f_.mu_);
    if (const ps::FeedbackTotals* t = f_.totals_.find(key))
      return std::optional<ps::FeedbackTotals>(*t);
    return std::optional<ps::FeedbackTotals>();
  }

  Expected<std::int64_t> write(std::string_view pk, std::int64_t expected_version,
                               const ProfileDoc& doc, const ps::WriteInfo& info) override {
    {
      std::lock_guard order(f_.order_mu_);
      if (f_.spooling()) return spool_write(pk, expected_version, doc, info);
    }
    // What the store wrote, remembered for an outage: the store's own record
    // where it builds one (shared with its read view, no copy), else a
    // provisional copy with the store's digest (not hashed again).
    std::string digest;
    ps::SharedProfile stored;
    ps::WriteInfo with = info;
    with.digest_out = &digest;
    if (with.stored_out == nullptr) with.stored_out = &stored;
    auto r = f_.inner_feedback_.write(pk, expected_version, doc, with);
    if (r) {
      if (info.digest_out != nullptr) *info.digest_out = digest;
      ps::SharedProfile remembered = *with.stored_out;
      if (!remembered)
        remembered =
            std::make_shared<const ps::StoredProfile>(provisional(pk, *r, doc, info, digest));
      std::lock_guard lk(f_.mu_);
      f_.profiles_.put(std::string(pk), std::move(remembered));
      return r;
    }
    if (!is_unavailable(r.error())) return r;
    f_.went_down(r.error());
    std::lock_guard order(f_.order_mu_);
    return spool_write(pk, expected_version, doc, info);
  }

  Status append_feedback(std::span<const ps::FeedbackRow> rows,
                         std::string_view batch_id) override {
    const std::string id = batch_id.empty() ? new_batch_id() : std::string(batch_id);
    {
      std::lock_guard order(f_.order_mu_);
      if (f_.spooling()) return spool_rows(rows, id);
    }
    Status st = f_.inner_feedback_.append_feedback(rows, id);
    if (st || !is_unavailable(st.error())) return st;
    f_.went_down(st.error());
    std::lock_guard order(f_.order_mu_);
    return spool_rows(rows, id);
  }

private:
  // Under order_mu_ (the spool's order), not mu_: reads are answered meanwhile.
  Expected<std::int64_t> spool_write(std::string_view pk, std::int64_t expected,
                                     const ProfileDoc& doc, const ps::WriteInfo& info) {
    json body = {{"pk", std::string(pk)},
                 {"expected_version", expected},
                 {"doc", to_json(doc)},
                 {"info", info_to_json(info)}};
    FDO_TRY_STATUS(f_.spool(SpoolKind::profile_write, pk, body));
    ps::StoredProfile p = provisional(pk, expected + 1, doc, info);
    if (info.digest_out != nullptr) *info.digest_out = p.digest;
    std::lock_guard lk(f_.mu_);
    f_.overlay_[std::string(pk)] = std::move(p);
    return expected + 1;
  }
  Status spool_rows(std::span<const ps::FeedbackRow> rows, const std::string& id) {
    json list = json::array();
    for (const ps::FeedbackRow& r : rows)
      list.push_back(row_to_json(r));
    return f_.spool(SpoolKind::feedback, id, json{{"rows", std::move(list)}});
  }

  StoreFallback& f_;
};

class StoreFallback::Programs final : public ProgramIndex {
public:
  explicit Programs(StoreFallback& f) : f_(f) {}

  Status add(const ps::ProgramInfo& info) override {
    {
      std::lock_guard order(f_.order_mu_);
      if (f_.spooling()) return spool_add(info);
    }
    Status st = f_.inner_programs_.add(info);
    if (st) {
      std::lock_guard lk(f_.mu_);
      f_.program_rows_.put(info.ik, info);
      return st;
    }
    if (!is_unavailable(st.error())) return st;
    f_.went_down(st.error());
    std::lock_guard order(f_.order_mu_);
    return spool_add(info);
  }

  Expected<std::optional<ps::ProgramInfo>> find(std::string_view ik) override {
    bool direct;
    {
      std::lock_guard lk(f_.mu_);
      direct = !f_.routes_to_spool();
    }
    if (direct) {
      auto r = f_.inner_programs_.find(ik);
      if (r) {
        std::lock_guard lk(f_.mu_);
        if (*r) {
          f_.program_rows_.put(std::string(ik), **r);
          return r;
        }
        if (const ps::ProgramInfo* known = f_.program_rows_.find(std::string(ik)))
          return std::optional<ps::ProgramInfo>(*known);
        return r;
      }
      if (!is_unavailable(r.error())) return r;
      f_.went_down(r.error());
    }
    std::lock_guard lk(f_.mu_);
    if (const ps::ProgramInfo* known = f_.program_rows_.find(std::string(ik)))
      return std::optional<ps::ProgramInfo>(*known);
    return std::optional<ps::ProgramInfo>();
  }

  // A bump of last_used only: while the store is down it is skipped (the
  // next use after the outage bumps it), never spooled.
  Status touch(std::string_view ik) override {
    {
      std::lock_guard lk(f_.mu_);
      if (f_.routes_to_spool()) return ok();
    }
    Status st = f_.inner_programs_.touch(ik);
    if (st || !is_unavailable(st.error())) return st;
    f_.went_down(st.error());
    return ok();
  }

  Expected<std::int64_t> count_owned(std::int64_t owner) override {
    bool direct;
    {
      std::lock_guard lk(f_.mu_);
      direct = !f_.routes_to_spool();
    }
    if (direct) {
      auto r = f_.inner_programs_.count_owned(owner);
      if (r) {
        std::lock_guard lk(f_.mu_);
        f_.owned_[owner] = *r;
        return r;
      }
      if (!is_unavailable(r.error())) return r;
      f_.went_down(r.error());
    }
    std::lock_guard lk(f_.mu_);
    auto it = f_.owned_.find(owner);
    return it == f_.owned_.end() ? std::int64_t{0} : it->second;
  }

private:
  // Under order_mu_.
  Status spool_add(const ps::ProgramInfo& info) {
    FDO_TRY_STATUS(f_.spool(SpoolKind::program, info.ik, program_to_json(info)));
    std::lock_guard lk(f_.mu_);
    if (f_.program_rows_.find(info.ik) == nullptr) ++f_.owned_[info.owner];
    f_.program_rows_.put(info.ik, info);
    return ok();
  }

  StoreFallback& f_;
};

// --- StoreFallback -------------------------------------------------------

Expected<std::unique_ptr<StoreFallback>> StoreFallback::create(cache::KeyStore& keys,
                                                               FeedbackStore& feedback,
                                                               ProgramIndex& programs,
                                                               StoreFallbackOptions options) {
  FDO_TRY(StoreSpool spool, StoreSpool::open(options.spool_path, options.spool_max_bytes));
  std::unique_ptr<StoreFallback> f(
      new StoreFallback(keys, feedback, programs, std::move(spool), std::move(options)));
  f->load_overlay();
  if (f->options_.replayer == StoreFallbackOptions::Replayer::thread)
    f->replayer_ = std::thread([raw = f.get()] { raw->replayer_main(); });
  return f;
}

StoreFallback::StoreFallback(cache::KeyStore& keys, FeedbackStore& feedback, ProgramIndex& programs,
                             StoreSpool spool, StoreFallbackOptions options)
    : inner_keys_(keys), inner_feedback_(feedback), inner_programs_(programs),
      spool_(std::move(spool)), options_(std::move(options)), keys_(std::make_unique<Keys>(*this)),
      feedback_(std::make_unique<Feedback>(*this)), programs_(std::make_unique<Programs>(*this)),
      profiles_(options_.remembered), profile_keys_(options_.remembered),
      virtual_keys_(options_.remembered), program_rows_(options_.remembered),
      totals_(options_.remembered), backoff_(options_.backoff_min) {
  // A spool left by an earlier run: everything waits behind it, in order.
  if (spool_.counts().entries() != 0) {
    state_ = StoreState::down;
    last_error_ = "replaying the spool left by the previous run";
  }
}

cache::KeyStore& StoreFallback::keys() {
  return *keys_;
}
FeedbackStore& StoreFallback::feedback() {
  return *feedback_;
}
ProgramIndex& StoreFallback::programs() {
  return *programs_;
}

StoreFallback::~StoreFallback() {
  {
    std::lock_guard lk(replay_mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (replayer_.joinable()) replayer_.join();
}

// What was spooled but not replayed is served as the current profile.
void StoreFallback::load_overlay() {
  auto writes = spool_.all(SpoolKind::profile_write);
  if (!writes) {
    log::error("profile store spool: " + writes.error().describe());
    return;
  }
  std::lock_guard lk(mu_);
  for (const SpoolEntry& e : *writes) {
    auto doc = profile_from_json(e.body.at("doc"));
    auto info = info_from_json(e.body.at("info"));
    if (!doc || !info) continue;
    overlay_[e.key] =
        provisional(e.key, e.body.at("expected_version").get<std::int64_t>() + 1, *doc, *info);
  }
}

bool StoreFallback::routes_to_spool() const {
  return state_ == StoreState::down;
}

bool StoreFallback::spooling() const {
  std::lock_guard lk(mu_);
  return routes_to_spool();
}

void StoreFallback::answered() {
  if (state_ != StoreState::connecting) return;
  state_ = StoreState::up;
  log::info("profile store " + options_.location + " is up");
}

void StoreFallback::went_down(const Error& error) {
  bool was_down;
  {
    std::lock_guard lk(mu_);
    was_down = state_ == StoreState::down;
    state_ = StoreState::down;
    std::lock_guard slk(stats_mu_);
    last_error_ = error.message();
  }
  if (!was_down) {
    log::record(log::Level::warning,
                "profile store " + options_.location + " unavailable (" + error.message() +
                    "); serving last known profiles and spooling writes to " + spool_.path(),
                {{"FDO_PROFILE_STORE_STATE", "down"}});
    {
      std::lock_guard lk(replay_mu_);
      backoff_ = options_.backoff_min;
      next_attempt_ = std::chrono::steady_clock::now() + backoff_;
    }
    wake_.notify_all();
  }
}

Status StoreFallback::spool(SpoolKind kind, std::string_view key, const json& body) {
  auto dropped = spool_.push(kind, key, body);
  if (!dropped) {
    log::error("profile store spool: cannot keep a " + std::string(to_string(kind)) +
               " entry: " + dropped.error().describe());
    return std::move(dropped).error().context("profile store unavailable and spool refused");
  }
  for (const SpoolEntry& e : *dropped)
    handle_dropped(e);
  // The replayer may have found the store up between this write's failed
  // call and its append: down again, so the entry is replayed before any
  // later write goes straight to the store.
  bool reopened = false;
  {
    std::lock_guard lk(mu_);
    reopened = state_ != StoreState::down;
    state_ = StoreState::down;
  }
  if (reopened) {
    {
      std::lock_guard lk(replay_mu_);
      next_attempt_ = std::chrono::steady_clock::now();
    }
    wake_.notify_all();
  }
  return ok();
}

// Under order_mu_: an entry the cap dropped.
void StoreFallback::handle_dropped(const SpoolEntry& e) {
  switch (e.kind) {
  case SpoolKind::profile_write: {
    const std::int64_t version = e.body.at("expected_version").get<std::int64_t>() + 1;
    // Nothing may build on a version that will never be written.
    if (auto st = spool_.mark_dead(e.key, version); !st) log::error(st.error().describe());
    {
      std::lock_guard lk(mu_);
      if (auto it = overlay_.find(e.key); it != overlay_.end() && it->second.version == version)
        overlay_.erase(it);
    }
    {
      std::lock_guard slk(stats_mu_);
      ++counters_.dropped_cap_writes;
    }
    log::warning("profile store spool full: dropped the spooled write of profile " +
                 e.key.substr(0, 12) + " v" + std::to_string(version));
    break;
  }
  case SpoolKind::feedback: {
    {
      std::lock_guard slk(stats_mu_);
      ++counters_.dropped_cap_feedback;
      counters_.dropped_rows += e.body.at("rows").size();
    }
    log::error("profile store spool full of feedback: dropped the oldest batch (" +
               std::to_string(e.body.at("rows").size()) + " rows)");
    break;
  }
  default: {
    std::lock_guard slk(stats_mu_);
    ++counters_.dropped_cap_other;
  }
    log::warning("profile store spool full: dropped a spooled " + std::string(to_string(e.kind)));
    break;
  }
}

Expected<ps::SharedProfile> StoreFallback::current(std::string_view pk) {
  const std::string key(pk);
  bool direct;
  {
    std::lock_guard lk(mu_);
    direct = !routes_to_spool();
  }
  if (direct) {
    auto r = inner_feedback_.current(pk);
    if (r) {
      std::lock_guard lk(mu_);
      answered();
      profiles_.put(key, *r);
      if (auto it = overlay_.find(key);
          it != overlay_.end() && (!*r || (*r)->version < it->second.version))
        return ps::SharedProfile(std::make_shared<const ps::StoredProfile>(it->second));
      return r;
    }
    if (!is_unavailable(r.error())) return r;
    went_down(r.error());
  }
  std::lock_guard lk(mu_);
  if (auto it = overlay_.find(key); it != overlay_.end())
    return ps::SharedProfile(std::make_shared<const ps::StoredProfile>(it->second));
  if (const auto* known = profiles_.find(key)) return *known;
  return ps::SharedProfile();
}

// Never waits for store or spool I/O: health is answered on the I/O thread.
StoreHealth StoreFallback::health() const {
  std::lock_guard lk(stats_mu_);
  StoreHealth h = counters_;
  h.kind = options_.kind;
  h.location = options_.location;
  h.state = state_;
  h.last_error = last_error_;
  h.spool = spool_.counts();
  h.spool_max_bytes = options_.spool_max_bytes;
  return h;
}

} // namespace fdo::daemon
