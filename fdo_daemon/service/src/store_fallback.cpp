#include "fdo/daemon/store_fallback.h"

#include "adapters.h"
#include "fdo/util/log.h"
#include "fdo/util/log_record.h"

#include <cstdio>
#include <random>

namespace fdo::daemon {

namespace ps = fdo::profile_store;
using nlohmann::json;

std::string_view to_string(StoreState state) {
  return kStoreStateNames.name(state);
}

namespace {

bool is_unavailable(const Error& e) {
  return e.code() == Errc::unavailable;
}

// 128 random bits, hex: unique across hosts and restarts.
std::string new_batch_id() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(rng()));
  return buf;
}

// --- the spool's entry bodies ---

json row_to_json(const ps::FeedbackRow& r) {
  return json{
      {"pk", r.pk},           {"version", r.version},   {"stages", r.stages},
      {"exec_ns", r.exec_ns}, {"counters", r.counters}, {"function_counts", r.function_counts}};
}

ps::FeedbackRow row_from_json(const json& j) {
  ps::FeedbackRow r;
  r.pk = j.at("pk").get<std::string>();
  r.version = j.at("version").get<std::int64_t>();
  r.stages = j.at("stages").get<std::uint64_t>();
  r.exec_ns = j.at("exec_ns").get<std::uint64_t>();
  r.counters = j.at("counters").get<std::map<std::string, std::uint64_t>>();
  r.function_counts =
      j.at("function_counts").get<std::map<std::string, std::vector<std::uint64_t>>>();
  r.host = j.value("host", "");
  return r;
}

json info_to_json(const ps::WriteInfo& info) {
  json j = {{"source", std::string(ps::to_string(info.source))},
            {"reason", info.reason},
            {"owner", info.owner},
            {"host", info.host},
            {"stage", info.stage},
            {"program", info.program}};
  if (info.acting_owner) j["acting_owner"] = *info.acting_owner;
  return j;
}

Expected<ps::WriteInfo> info_from_json(const json& j) {
  ps::WriteInfo info;
  FDO_TRY(info.source, ps::parse_write_source(j.at("source").get<std::string>()));
  info.reason = j.at("reason").get<std::string>();
  info.owner = j.at("owner").get<std::int64_t>();
  info.host = j.at("host").get<std::string>();
  info.stage = j.at("stage").get<std::int64_t>();
  info.program = j.at("program").get<std::string>();
  if (j.contains("acting_owner")) info.acting_owner = j.at("acting_owner").get<std::int64_t>();
  return info;
}

json program_to_json(const ps::ProgramInfo& p) {
  return json{{"ik", p.ik},       {"name", p.name}, {"size", p.size},
              {"owner", p.owner}, {"pk", p.pk},     {"program_hash", p.program_hash}};
}

ps::ProgramInfo program_from_json(const json& j) {
  ps::ProgramInfo p;
  p.ik = j.at("ik").get<std::string>();
  p.name = j.at("name").get<std::string>();
  p.size = j.at("size").get<std::int64_t>();
  p.owner = j.at("owner").get<std::int64_t>();
  p.pk = j.at("pk").get<std::string>();
  p.program_hash = j.at("program_hash").get<std::string>();
  return p;
}

// The provisional current profile a spooled write stands for.
ps::StoredProfile provisional(std::string_view pk, std::int64_t version, const ProfileDoc& doc,
                              const ps::WriteInfo& info) {
  ps::StoredProfile p;
  p.pk = std::string(pk);
  p.version = version;
  p.doc = doc;
  p.digest = profile_digest(doc);
  p.owner = info.owner;
  p.author = info.owner;
  p.source = info.source;
  p.reason = info.reason;
  p.host = info.host;
  p.stage = info.stage;
  p.program = info.program;
  return p;
}

} // namespace

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
    FDO_TRY(std::optional<ps::StoredProfile> cur, f_.current(pk));
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
    auto spool = [&]() -> Status {
      FDO_TRY_STATUS(f_.spool(kind, key, json{{"key", key}, {"value", value}}));
      memory.put(key, value);
      return ok();
    };
    {
      std::lock_guard lk(f_.mu_);
      if (f_.routes_to_spool()) return spool();
    }
    Status st = call();
    if (st) {
      std::lock_guard lk(f_.mu_);
      memory.put(key, value);
      return st;
    }
    if (!is_unavailable(st.error())) return st;
    f_.went_down(st.error());
    std::lock_guard lk(f_.mu_);
    return spool();
  }

  StoreFallback& f_;
};

class StoreFallback::Feedback final : public FeedbackStore {
public:
  explicit Feedback(StoreFallback& f) : f_(f) {}

  Expected<std::optional<ps::StoredProfile>> current(std::string_view pk) override {
    return f_.current(pk);
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
      std::lock_guard lk(f_.mu_);
      if (f_.routes_to_spool()) return spool_write(pk, expected_version, doc, info);
    }
    auto r = f_.inner_feedback_.write(pk, expected_version, doc, info);
    if (r) {
      std::lock_guard lk(f_.mu_);
      f_.profiles_.put(std::string(pk), provisional(pk, *r, doc, info));
      return r;
    }
    if (!is_unavailable(r.error())) return r;
    f_.went_down(r.error());
    std::lock_guard lk(f_.mu_);
    return spool_write(pk, expected_version, doc, info);
  }

  Status append_feedback(std::span<const ps::FeedbackRow> rows,
                         std::string_view batch_id) override {
    const std::string id = batch_id.empty() ? new_batch_id() : std::string(batch_id);
    {
      std::lock_guard lk(f_.mu_);
      if (f_.routes_to_spool()) return spool_rows(rows, id);
    }
    Status st = f_.inner_feedback_.append_feedback(rows, id);
    if (st || !is_unavailable(st.error())) return st;
    f_.went_down(st.error());
    std::lock_guard lk(f_.mu_);
    return spool_rows(rows, id);
  }

private:
  // Under mu_.
  Expected<std::int64_t> spool_write(std::string_view pk, std::int64_t expected,
                                     const ProfileDoc& doc, const ps::WriteInfo& info) {
    json body = {{"pk", std::string(pk)},
                 {"expected_version", expected},
                 {"doc", to_json(doc)},
                 {"info", info_to_json(info)}};
    FDO_TRY_STATUS(f_.spool(SpoolKind::profile_write, pk, body));
    f_.overlay_[std::string(pk)] = provisional(pk, expected + 1, doc, info);
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
    bool known;
    {
      std::lock_guard lk(f_.mu_);
      known = f_.program_rows_.find(info.ik) != nullptr;
      if (f_.routes_to_spool()) return spool_add(info, known);
    }
    Status st = f_.inner_programs_.add(info);
    if (st) {
      std::lock_guard lk(f_.mu_);
      f_.program_rows_.put(info.ik, info);
      return st;
    }
    if (!is_unavailable(st.error())) return st;
    f_.went_down(st.error());
    std::lock_guard lk(f_.mu_);
    return spool_add(info, known);
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
  // Under mu_.
  Status spool_add(const ps::ProgramInfo& info, bool known) {
    FDO_TRY_STATUS(f_.spool(SpoolKind::program, info.ik, program_to_json(info)));
    f_.program_rows_.put(info.ik, info);
    if (!known) ++f_.owned_[info.owner];
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
  return ok();
}

// Under mu_: an entry the cap dropped.
void StoreFallback::handle_dropped(const SpoolEntry& e) {
  std::lock_guard slk(stats_mu_);
  switch (e.kind) {
  case SpoolKind::profile_write: {
    ++counters_.dropped_cap_writes;
    const std::int64_t version = e.body.at("expected_version").get<std::int64_t>() + 1;
    // Nothing may build on a version that will never be written.
    if (auto st = spool_.mark_dead(e.key, version); !st) log::error(st.error().describe());
    if (auto it = overlay_.find(e.key); it != overlay_.end() && it->second.version == version)
      overlay_.erase(it);
    log::warning("profile store spool full: dropped the spooled write of profile " +
                 e.key.substr(0, 12) + " v" + std::to_string(version));
    break;
  }
  case SpoolKind::feedback:
    ++counters_.dropped_cap_feedback;
    counters_.dropped_rows += e.body.at("rows").size();
    log::error("profile store spool full of feedback: dropped the oldest batch (" +
               std::to_string(e.body.at("rows").size()) + " rows)");
    break;
  default:
    ++counters_.dropped_cap_other;
    log::warning("profile store spool full: dropped a spooled " + std::string(to_string(e.kind)));
    break;
  }
}

Expected<std::optional<ps::StoredProfile>> StoreFallback::current(std::string_view pk) {
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
        return std::optional<ps::StoredProfile>(it->second);
      return r;
    }
    if (!is_unavailable(r.error())) return r;
    went_down(r.error());
  }
  std::lock_guard lk(mu_);
  if (auto it = overlay_.find(key); it != overlay_.end())
    return std::optional<ps::StoredProfile>(it->second);
  if (const auto* known = profiles_.find(key)) return *known;
  return std::optional<ps::StoredProfile>();
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

// --- replay --------------------------------------------------------------

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
  using Known = std::optional<std::optional<ps::StoredProfile>>;
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
    settle(std::optional<ps::StoredProfile>(provisional(e.key, version, doc, info)));
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
  switch (e.kind) {
  case SpoolKind::feedback:
    return apply_feedback(e, unavailable);
  case SpoolKind::profile_write:
    return apply_write(e, unavailable);
  default:
    break;
  }
  Status st = ok();
  const std::string key = e.body.at("key").is_string() ? e.body.at("key").get<std::string>() : "";
  if (e.kind == SpoolKind::profile_key)
    st = inner_keys_.put_profile_key(key, e.body.at("value").get<std::string>());
  else if (e.kind == SpoolKind::virtual_key)
    st = inner_keys_.put_virtual_key(key, e.body.at("value").get<std::string>());
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
      std::lock_guard lk(mu_);
      if (spool_.counts().entries() != 0) continue;
      if (auto st = spool_.clear_dead(); !st) log::error(st.error().describe());
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
