// Profiles: versioned reads (on borrowed read connections), the versioned
// write path (on the write connection), pin/unpin/reset/remove, listing,
// ownership; and the verified-document cache.
#include "internal.h"
#include "profile_rules.h"

#include <iterator>

namespace fdo::profile_store {

using nlohmann::json;
using sqlite::Statement;
using sqlite::Transaction;
using sqlite::TxKind;

std::string_view to_string(WriteSource source) {
  return kWriteSourceNames.name(source);
}

Expected<WriteSource> parse_write_source(std::string_view s) {
  if (auto source = kWriteSourceNames.parse(s)) return *source;
  return make_error(Errc::invalid_argument, "unknown write source '" + std::string(s) +
                                                "' (expected " + kWriteSourceNames.alternatives() +
                                                ")");
}

std::string_view to_string(ExportHistory history) {
  return kExportHistoryNames.name(history);
}

std::string_view to_string(ImportConflict policy) {
  return kImportConflictNames.name(policy);
}

std::string_view to_string(ImportAction action) {
  return kImportActionNames.name(action);
}

namespace detail {

Status check_key(std::string_view what, std::string_view key) {
  if (key.empty())
    return make_error(Errc::invalid_argument, std::string(what) + " must not be empty");
  if (key.size() > kMaxKeyBytes)
    return make_error(Errc::invalid_argument, std::string(what) + " is " +
                                                  std::to_string(key.size()) + " bytes (max " +
                                                  std::to_string(kMaxKeyBytes) + ")");
  return ok();
}

Error no_profile(std::string_view pk) {
  return make_error(Errc::not_found, "no profile " + std::string(pk));
}

std::string describe_profile(std::string_view pk, std::int64_t version) {
  return "profile " + std::string(pk) + " version " + std::to_string(version);
}

} // namespace detail

using detail::check_key;
using detail::describe_profile;
using detail::no_profile;
using detail::now_ms;

namespace {

constexpr const char* kProfileColumns =
    "SELECT v.pk, v.version, v.digest, v.body, p.pinned, p.owner, v.author, v.source, "
    "v.created_at, v.reason, v.host, v.stage, v.program "
    "FROM profile_versions v JOIN profiles p ON p.pk = v.pk ";

} // namespace

// --- verified-document cache ---

std::string DocCache::key_of(const std::string& pk, std::int64_t version) {
  std::string key = pk;
  key += '\0';
  key += std::to_string(version);
  return key;
}

std::optional<ProfileDoc> DocCache::find(const std::string& pk, std::int64_t version,
                                         const std::string& body, const std::string& digest) {
  std::lock_guard lock(mu_);
  auto it = index_.find(key_of(pk, version));
  if (it == index_.end() || it->second->record->body != body ||
      it->second->record->digest != digest)
    return std::nullopt;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->record->doc;
}

void DocCache::erase(std::list<Entry>::iterator it) {
  bytes_ -= it->record->body.size();
  index_.erase(it->key);
  lru_.erase(it);
}

void DocCache::insert(SharedProfile record) {
  std::string key = key_of(record->pk, record->version);
  const std::size_t bytes = record->body.size();
  std::lock_guard lock(mu_);
  if (auto it = index_.find(key); it != index_.end()) erase(it->second);
  if (bytes > budget_ / 4) return;
  lru_.push_front(Entry{key, std::move(record)});
  index_[key] = lru_.begin();
  bytes_ += bytes;
  while (bytes_ > budget_)
    erase(std::prev(lru_.end()));
}

// --- reads on a given connection ---

Expected<StoredProfile> SqliteBackend::Impl::read_profile_row(const Statement& st) {
  StoredProfile p;
  p.pk = st.column_text(0);
  p.version = st.column_int64(1);
  p.digest = st.column_text(2);
  p.body = st.column_text(3);
  p.pinned = st.column_int64(4) != 0;
  p.owner = st.column_int64(5);
  p.author = st.column_int64(6);
  auto source = parse_write_source(st.column_text(7));
  if (!source)
    return make_error(Errc::corrupt,
                      describe_profile(p.pk, p.version) + ": " + source.error().message());
  p.source = *source;
  p.created_at = st.column_int64(8);
  p.reason = st.column_text(9);
  p.host = st.column_text(10);
  p.stage = st.column_int64(11);
  p.program = st.column_text(12);
  FDO_TRY_STATUS(detail::decode_body(p, docs));
  return p;
}

Expected<std::optional<SqliteBackend::Impl::State>>
SqliteBackend::Impl::state(sqlite::Connection& db, std::string_view pk) {
  FDO_TRY(auto st, db.cached("SELECT owner, current_version, last_version, pinned FROM profiles "
                             "WHERE pk = ?1"));
  st->bind(1, pk);
  FDO_TRY(bool row, st->step());
  if (!row) return std::optional<State>();
  State s;
  s.owner = st->column_int64(0);
  s.current = st->column_is_null(1) ? 0 : st->column_int64(1);
  s.last = st->column_int64(2);
  s.pinned = st->column_int64(3) != 0;
  return std::optional<State>(s);
}

Expected<std::optional<StoredProfile>> SqliteBackend::Impl::current(sqlite::Connection& db,
                                                                    std::string_view pk) {
  FDO_TRY(auto st, db.cached(std::string(kProfileColumns) +
                             "WHERE v.pk = ?1 AND v.version = p.current_version"));
  st->bind(1, pk);
  FDO_TRY(bool row, st->step());
  if (!row) return std::optional<StoredProfile>();
  FDO_TRY(StoredProfile p, read_profile_row(*st));
  return std::optional<StoredProfile>(std::move(p));
}

Expected<std::optional<StoredProfile>>
SqliteBackend::Impl::get(sqlite::Connection& db, std::string_view pk, std::int64_t version) {
  FDO_TRY(auto st, db.cached(std::string(kProfileColumns) + "WHERE v.pk = ?1 AND v.version = ?2"));
  st->bind(1, pk).bind(2, version);
  FDO_TRY(bool row, st->step());
  if (!row) return std::optional<StoredProfile>();
  FDO_TRY(StoredProfile p, read_profile_row(*st));
  return std::optional<StoredProfile>(std::move(p));
}

Expected<std::vector<StoredProfile>> SqliteBackend::Impl::history(sqlite::Connection& db,
                                                                  std::string_view pk) {
  FDO_TRY(auto st, db.cached(std::string(kProfileColumns) + "WHERE v.pk = ?1 ORDER BY v.version"));
  st->bind(1, pk);
  std::vector<StoredProfile> out;
  while (true) {
    FDO_TRY(bool row, st->step());
    if (!row) break;
    FDO_TRY(StoredProfile p, read_profile_row(*st));
    out.push_back(std::move(p));
  }
  return out;
}

// --- public reads (each one statement, so one snapshot) ---

Expected<std::optional<StoredProfile>> SqliteBackend::current(std::string_view pk) const {
  FDO_TRY_STATUS(check_key("profile key", pk));
  FDO_TRY(auto lease, impl_->readers.acquire());
  return impl_->current(lease.db(), pk);
}

std::optional<std::uint64_t> SqliteBackend::database_reads() const {
  return impl_->readers.leases();
}

Expected<std::optional<StoredProfile>> SqliteBackend::get(std::string_view pk,
                                                          std::int64_t version) const {
  FDO_TRY_STATUS(check_key("profile key", pk));
  FDO_TRY(auto lease, impl_->readers.acquire());
  return impl_->get(lease.db(), pk, version);
}

Expected<std::vector<StoredProfile>> SqliteBackend::history(std::string_view pk) const {
  FDO_TRY_STATUS(check_key("profile key", pk));
  FDO_TRY(auto lease, impl_->readers.acquire());
  FDO_TRY(auto out, impl_->history(lease.db(), pk));
  // Retention keeps at least the newest version and reset keeps history, so
  // a known key always has rows.
  if (out.empty()) return no_profile(pk);
  return out;
}

Expected<std::optional<std::int64_t>> SqliteBackend::owner(std::string_view pk) const {
  FDO_TRY_STATUS(check_key("profile key", pk));
  FDO_TRY(auto lease, impl_->readers.acquire());
  FDO_TRY(auto st, lease.db().cached("SELECT owner FROM profiles WHERE pk = ?1"));
  st->bind(1, pk);
  FDO_TRY(bool row, st->step());
  if (!row) return std::optional<std::int64_t>();
  return std::optional<std::int64_t>(st->column_int64(0));
}

namespace {

constexpr const char* kSummaryColumns =
    "SELECT p.pk, p.current_version, p.last_version, v.digest, p.pinned, p.owner, p.updated_at, "
    "v.functions FROM profiles p LEFT JOIN profile_versions v "
    "ON v.pk = p.pk AND v.version = p.current_version ";

ProfileSummary read_summary_row(const Statement& st) {
  ProfileSummary s;
  s.pk = st.column_text(0);
  s.version = st.column_is_null(1) ? 0 : st.column_int64(1);
  s.last_version = st.column_int64(2);
  s.digest = st.column_is_null(3) ? std::string(no_profile_digest()) : st.column_text(3);
  s.pinned = st.column_int64(4) != 0;
  s.owner = st.column_int64(5);
  s.updated_at = st.column_int64(6);
  s.functions = st.column_is_null(7) ? 0 : st.column_int64(7);
  return s;
}

} // namespace

Expected<std::optional<ProfileSummary>> SqliteBackend::summary(std::string_view pk) const {
  FDO_TRY_STATUS(check_key("profile key", pk));
  FDO_TRY(auto lease, impl_->readers.acquire());
  FDO_TRY(auto st, lease.db().cached(std::string(kSummaryColumns) + "WHERE p.pk = ?1"));
  st->bind(1, pk);
  FDO_TRY(bool row, st->step());
  if (!row) return std::optional<ProfileSummary>();
  return std::optional<ProfileSummary>(read_summary_row(*st));
}

Expected<std::vector<ProfileSummary>> SqliteBackend::list(std::optional<std::int64_t> owner) const {
  FDO_TRY(auto lease, impl_->readers.acquire());
  FDO_TRY(auto st, lease.db().cached(std::string(kSummaryColumns) +
                                     "WHERE ?1 IS NULL OR p.owner = ?1 ORDER BY p.pk"));
  if (owner)
    st->bind(1, *owner);
  else
    st->bind_null(1);
  std::vector<ProfileSummary> out;
  while (true) {
    FDO_TRY(bool row, st->step());
    if (!row) break;
    out.push_back(read_summary_row(*st));
  }
  return out;
}

// --- writes ---

Expected<std::int64_t> SqliteBackend::Impl::write_profile(detail::PreparedWrite&& w,
                                                          std::int64_t now, SharedProfile* stored) {
  const detail::PreparedWrite& req = w;
  FDO_TRY(auto st, state(writer, req.pk));
  FDO_TRY(std::int64_t new_version, detail::check_write(req, st));
  if (!st) {
    FDO_TRY(auto ins,
            writer.cached("INSERT INTO profiles (pk, owner, current_version, last_version, "
                          "pinned, updated_at) VALUES (?1, ?2, 1, 1, 0, ?3)"));
    ins->bind(1, req.pk).bind(2, req.info.owner).bind(3, now);
    FDO_TRY_STATUS(ins->run());
  } else {
    FDO_TRY(auto upd, writer.cached("UPDATE profiles SET current_version = ?2, last_version = ?2, "
                                    "updated_at = ?3 WHERE pk = ?1"));
    upd->bind(1, req.pk).bind(2, new_version).bind(3, now);
    FDO_TRY_STATUS(upd->run());
  }
  {
    FDO_TRY(auto ins,
            writer.cached("INSERT INTO profile_versions (pk, version, digest, body, functions, "
                          "source, reason, author, host, stage, program, created_at) "
                          "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)"));
    ins->bind(1, req.pk)
        .bind(2, new_version)
        .bind(3, w.digest)
        .bind_in_place(4, w.body) // ~400 KB for 1,000 functions: no copy
        .bind(5, w.functions)
        .bind(6, to_string(req.info.source))
        .bind(7, req.info.reason)
        .bind(8, req.info.owner)
        .bind(9, req.info.host)
        .bind(10, req.info.stage)
        .bind(11, req.info.program)
        .bind(12, now);
    FDO_TRY_STATUS(ins->run());
  }
  {
    // Versions are contiguous per key, so "keep the newest N" is a range.
    // Feedback of pruned versions goes with them (ON DELETE CASCADE).
    FDO_TRY(auto del,
            writer.cached("DELETE FROM profile_versions WHERE pk = ?1 AND version <= ?2"));
    del->bind(1, req.pk).bind(2, new_version - retention.load(std::memory_order_relaxed));
    FDO_TRY_STATUS(del->run());
  }
  if (req.info.digest_out != nullptr) *req.info.digest_out = w.digest;
  SharedProfile record = detail::stored_record(std::move(w), new_version, now, st);
  // A later read of this version that the read view does not answer skips
  // the parse. Harmless if the transaction rolls back: hits compare the
  // stored bytes.
  docs.insert(record);
  if (stored != nullptr) *stored = std::move(record);
  return new_version;
}

Expected<std::int64_t> SqliteBackend::write(std::string_view pk, std::int64_t expected_version,
                                            const ProfileDoc& doc, const WriteInfo& info) {
  // Prepared before the writer's lock: its CPU does not hold up the other
  // writers (the feedback flusher).
  const std::int64_t now = now_ms();
  FDO_TRY(detail::PreparedWrite w, detail::prepare_write(pk, expected_version, doc, info, now));
  SharedProfile stored;
  FDO_TRY(auto lock, impl_->lock_writer());
  FDO_TRY(auto tx, Transaction::begin(impl_->writer, TxKind::immediate));
  FDO_TRY(std::int64_t version,
          impl_->write_profile(std::move(w), now, info.stored_out != nullptr ? &stored : nullptr));
  FDO_TRY_STATUS(tx.commit());
  if (info.stored_out != nullptr) *info.stored_out = std::move(stored);
  return version;
}

Expected<std::vector<std::int64_t>>
SqliteBackend::write_batch(std::span<const WriteRequest> requests) {
  const std::int64_t now = now_ms();
  auto batch_error = [&](std::size_t i, Error e) {
    return std::move(e).context("batch write " + std::to_string(i + 1) + " of " +
                                std::to_string(requests.size()) + " (nothing written)");
  };
  std::vector<detail::PreparedWrite> prepared;
  prepared.reserve(requests.size());
  for (std::size_t i = 0; i < requests.size(); ++i) {
    auto w = detail::prepare_write(requests[i], now);
    if (!w) return batch_error(i, std::move(w).error());
    prepared.push_back(std::move(*w));
  }
  FDO_TRY(auto lock, impl_->lock_writer());
  FDO_TRY(auto tx, Transaction::begin(impl_->writer, TxKind::immediate));
  std::vector<std::int64_t> versions;
  versions.reserve(requests.size());
  std::vector<SharedProfile> stored(requests.size());
  for (std::size_t i = 0; i < requests.size(); ++i) {
    auto v = impl_->write_profile(std::move(prepared[i]), now,
                                  requests[i].info.stored_out != nullptr ? &stored[i] : nullptr);
    if (!v) return batch_error(i, std::move(v).error());
    versions.push_back(*v);
  }
  FDO_TRY_STATUS(tx.commit());
  for (std::size_t i = 0; i < requests.size(); ++i)
    if (requests[i].info.stored_out != nullptr) *requests[i].info.stored_out = std::move(stored[i]);
  return versions;
}

namespace {

// One UPDATE of the key's profiles row (?1 pk, ?2 now, ?3 value, ?4 acting
// owner or NULL): the owner test is part of the statement that changes the
// row, so it cannot go stale between check and change.
Status update_profile_row(SqliteBackend::Impl& impl, std::string_view pk, std::string_view set,
                          std::optional<std::int64_t> value, const ActingOwner& acting) {
  FDO_TRY_STATUS(check_key("profile key", pk));
  FDO_TRY(auto lock, impl.lock_writer());
  FDO_TRY(auto st, impl.writer.cached("UPDATE profiles SET " + std::string(set) +
                                      ", updated_at = ?2 WHERE pk = ?1 AND "
                                      "(?4 IS NULL OR owner = ?4)"));
  st->bind(1, pk).bind(2, now_ms());
  if (value) st->bind(3, *value);
  if (acting) st->bind(4, *acting);
  FDO_TRY_STATUS(st->run());
  if (impl.writer.changes() == 0) return no_profile(pk);
  return ok();
}

} // namespace

Status SqliteBackend::pin(std::string_view pk, ActingOwner acting_owner) {
  return update_profile_row(*impl_, pk, "pinned = ?3", 1, acting_owner);
}

Status SqliteBackend::unpin(std::string_view pk, ActingOwner acting_owner) {
  return update_profile_row(*impl_, pk, "pinned = ?3", 0, acting_owner);
}

Status SqliteBackend::reset(std::string_view pk, ActingOwner acting_owner) {
  return update_profile_row(*impl_, pk, "current_version = NULL", std::nullopt, acting_owner);
}

Expected<RemoveSummary> SqliteBackend::remove(std::string_view pk, ActingOwner acting_owner) {
  FDO_TRY_STATUS(check_key("profile key", pk));
  FDO_TRY(auto lock, impl_->lock_writer());
  sqlite::Connection& db = impl_->writer;
  FDO_TRY(auto tx, Transaction::begin(db, TxKind::immediate));
  FDO_TRY(auto state, impl_->state(db, pk));
  if (acting_owner && state && state->owner != *acting_owner) return no_profile(pk);
  // Mappings to a key without a profile row belong to no one in particular:
  // a tenant may drop only those of programs registered to it.
  std::optional<std::int64_t> programs_of;
  if (acting_owner && !state) programs_of = acting_owner;
  RemoveSummary out;
  {
    FDO_TRY(auto st, db.cached("SELECT count(*) FROM profile_versions WHERE pk = ?1"));
    st->bind(1, pk);
    FDO_TRY_STATUS(st->step());
    out.versions = st->column_int64(0);
  }
  {
    FDO_TRY(auto st, db.cached("SELECT count(DISTINCT version) FROM feedback WHERE pk = ?1"));
    st->bind(1, pk);
    FDO_TRY_STATUS(st->step());
    out.feedback_rows = st->column_int64(0);
  }
  constexpr const char* kMappedPrograms =
      "SELECT ik FROM profile_keys WHERE pk = ?1 AND "
      "(?2 IS NULL OR ik IN (SELECT ik FROM programs WHERE owner = ?2))";
  {
    FDO_TRY(auto st, db.cached(std::string("DELETE FROM virtual_keys WHERE ik IN (") +
                               kMappedPrograms + ")"));
    st->bind(1, pk);
    if (programs_of) st->bind(2, *programs_of);
    FDO_TRY_STATUS(st->run());
    out.virtual_keys = db.changes();
  }
  {
    FDO_TRY(auto st, db.cached(std::string("DELETE FROM profile_keys WHERE ik IN (") +
                               kMappedPrograms + ")"));
    st->bind(1, pk);
    if (programs_of) st->bind(2, *programs_of);
    FDO_TRY_STATUS(st->run());
    out.profile_keys = db.changes();
  }
  std::int64_t profiles = 0;
  {
    // Cascades to profile_versions, feedback and its detail tables.
    FDO_TRY(auto st, db.cached("DELETE FROM profiles WHERE pk = ?1"));
    st->bind(1, pk);
    FDO_TRY_STATUS(st->run());
    profiles = db.changes();
  }
  if (profiles == 0 && out.profile_keys == 0) return no_profile(pk);
  FDO_TRY_STATUS(tx.commit());
  return out;
}

} // namespace fdo::profile_store
