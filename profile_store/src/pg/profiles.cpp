// Profiles on PostgreSQL: reads (through the coherent cache for current and
// summary), the versioned write path with row locks for optimistic
// concurrency across hosts, pin/unpin/reset/remove, listing.
#include "internal.h"

namespace fdo::profile_store {

using detail::check_key;
using detail::no_profile;
using detail::now_ms;
using pg::p;

namespace {

constexpr const char* kProfileColumns =
    "SELECT v.pk, v.version, v.digest, v.body, p.pinned, p.owner, v.author, v.source, "
    "v.created_at, v.reason, v.host, v.stage, v.program "
    "FROM profile_versions v JOIN profiles p ON p.pk = v.pk ";

constexpr const char* kSummaryColumns =
    "SELECT p.pk, p.current_version, p.last_version, v.digest, p.pinned, p.owner, p.updated_at, "
    "v.functions FROM profiles p LEFT JOIN profile_versions v "
    "ON v.pk = p.pk AND v.version = p.current_version ";

ProfileSummary read_summary(const pg::Result& r, int row) {
  ProfileSummary s;
  s.pk = r.text(row, 0);
  s.version = r.i64(row, 1);
  s.last_version = r.i64(row, 2);
  s.digest = r.null(row, 3) ? std::string(no_profile_digest()) : r.text(row, 3);
  s.pinned = r.boolean(row, 4);
  s.owner = r.i64(row, 5);
  s.updated_at = r.i64(row, 6);
  s.functions = r.i64(row, 7);
  return s;
}

} // namespace

Expected<StoredProfile> PgBackend::Impl::read_row(const pg::Result& r, int row) {
  StoredProfile sp;
  sp.pk = r.text(row, 0);
  sp.version = r.i64(row, 1);
  sp.digest = r.text(row, 2);
  sp.body = r.text(row, 3);
  sp.pinned = r.boolean(row, 4);
  sp.owner = r.i64(row, 5);
  sp.author = r.i64(row, 6);
  auto source = parse_write_source(r.text(row, 7));
  if (!source)
    return make_error(Errc::corrupt, detail::describe_profile(sp.pk, sp.version) + ": " +
                                         source.error().message());
  sp.source = *source;
  sp.created_at = r.i64(row, 8);
  sp.reason = r.text(row, 9);
  sp.host = r.text(row, 10);
  sp.stage = r.i64(row, 11);
  sp.program = r.text(row, 12);
  FDO_TRY_STATUS(detail::decode_body(sp, docs));
  return sp;
}

Expected<std::optional<detail::ProfileState>>
PgBackend::Impl::state(pg::Conn& c, std::string_view pk, bool for_update) {
  FDO_TRY(pg::Result r, c.exec(std::string("SELECT owner, current_version, last_version, pinned "
                                           "FROM profiles WHERE pk = $1") +
                                   (for_update ? " FOR UPDATE" : ""),
                               {p(pk)}));
  if (r.rows() == 0) return std::optional<detail::ProfileState>();
  detail::ProfileState s;
  s.owner = r.i64(0, 0);
  s.current = r.i64(0, 1);
  s.last = r.i64(0, 2);
  s.pinned = r.boolean(0, 3);
  return std::optional<detail::ProfileState>(s);
}

Expected<std::optional<StoredProfile>> PgBackend::Impl::current(pg::Conn& c, std::string_view pk) {
  FDO_TRY(pg::Result r,
          c.exec(std::string(kProfileColumns) + "WHERE v.pk = $1 AND v.version = p.current_version",
                 {p(pk)}));
  if (r.rows() == 0) return std::optional<StoredProfile>();
  FDO_TRY(StoredProfile sp, read_row(r, 0));
  return std::optional<StoredProfile>(std::move(sp));
}

Expected<std::optional<StoredProfile>> PgBackend::Impl::get(pg::Conn& c, std::string_view pk,
                                                            std::int64_t version) {
  FDO_TRY(pg::Result r, c.exec(std::string(kProfileColumns) + "WHERE v.pk = $1 AND v.version = $2",
                               {p(pk), p(version)}));
  if (r.rows() == 0) return std::optional<StoredProfile>();
  FDO_TRY(StoredProfile sp, read_row(r, 0));
  return std::optional<StoredProfile>(std::move(sp));
}

Expected<std::vector<StoredProfile>> PgBackend::Impl::history(pg::Conn& c, std::string_view pk) {
  FDO_TRY(pg::Result r,
          c.exec(std::string(kProfileColumns) + "WHERE v.pk = $1 ORDER BY v.version", {p(pk)}));
  std::vector<StoredProfile> out;
  for (int i = 0; i < r.rows(); ++i) {
    FDO_TRY(StoredProfile sp, read_row(r, i));
    out.push_back(std::move(sp));
  }
  return out;
}

// --- public reads ---

Expected<std::optional<StoredProfile>> PgBackend::current(std::string_view pk) const {
  FDO_TRY_STATUS(check_key("profile key", pk));
  const std::string key(pk);
  if (auto hit = impl_->cache.current(key)) return std::move(*hit);
  std::optional<std::uint64_t> epoch = impl_->cache.begin_read();
  FDO_TRY(auto lease, impl_->pool.acquire());
  FDO_TRY(auto cur, impl_->current(lease.conn(), pk));
  if (epoch) impl_->cache.store_current(key, *epoch, cur);
  return cur;
}

Expected<std::optional<StoredProfile>> PgBackend::get(std::string_view pk,
                                                      std::int64_t version) const {
  FDO_TRY_STATUS(check_key("profile key", pk));
  FDO_TRY(auto lease, impl_->pool.acquire());
  return impl_->get(lease.conn(), pk, version);
}

Expected<std::vector<StoredProfile>> PgBackend::history(std::string_view pk) const {
  FDO_TRY_STATUS(check_key("profile key", pk));
  FDO_TRY(auto lease, impl_->pool.acquire());
  FDO_TRY(auto out, impl_->history(lease.conn(), pk));
  if (out.empty()) return no_profile(pk);
  return out;
}

Expected<std::optional<std::int64_t>> PgBackend::owner(std::string_view pk) const {
  FDO_TRY_STATUS(check_key("profile key", pk));
  FDO_TRY(auto lease, impl_->pool.acquire());
  FDO_TRY(pg::Result r, lease.conn().exec("SELECT owner FROM profiles WHERE pk = $1", {p(pk)}));
  if (r.rows() == 0) return std::optional<std::int64_t>();
  return std::optional<std::int64_t>(r.i64(0, 0));
}

Expected<std::optional<ProfileSummary>> PgBackend::summary(std::string_view pk) const {
  FDO_TRY_STATUS(check_key("profile key", pk));
  const std::string key(pk);
  if (auto hit = impl_->cache.summary(key)) return std::move(*hit);
  std::optional<std::uint64_t> epoch = impl_->cache.begin_read();
  FDO_TRY(auto lease, impl_->pool.acquire());
  FDO_TRY(pg::Result r,
          lease.conn().exec(std::string(kSummaryColumns) + "WHERE p.pk = $1", {p(pk)}));
  std::optional<ProfileSummary> out;
  if (r.rows() > 0) out = read_summary(r, 0);
  if (epoch) impl_->cache.store_summary(key, *epoch, out);
  return out;
}

Expected<std::vector<ProfileSummary>> PgBackend::list(std::optional<std::int64_t> owner) const {
  FDO_TRY(auto lease, impl_->pool.acquire());
  FDO_TRY(pg::Result r,
          lease.conn().exec(std::string(kSummaryColumns) +
                                "WHERE $1::bigint IS NULL OR p.owner = $1 ORDER BY p.pk",
                            {pg::p_or_null(owner)}));
  std::vector<ProfileSummary> out;
  for (int i = 0; i < r.rows(); ++i)
    out.push_back(read_summary(r, i));
  return out;
}

// --- writes ---

Expected<std::int64_t> PgBackend::Impl::write_profile(pg::Conn& c, detail::PreparedWrite&& w,
                                                      std::int64_t now) {
  const detail::PreparedWrite& req = w;
  // The row lock makes "write v+1 only over v" hold across hosts: a second
  // writer of the key waits here until the first commits, then sees its
  // version and gets conflict.
  FDO_TRY(auto st, state(c, req.pk, /*for_update=*/true));
  if (!st && req.expected_version == 0) {
    // Two hosts creating the key at once: one insert wins, the other waits
    // for it and then finds the row (and its version) below.
    FDO_TRY(pg::Result ins,
            c.exec("INSERT INTO profiles (pk, owner, current_version, last_version, pinned, "
                   "updated_at) VALUES ($1, $2, NULL, 0, false, $3) ON CONFLICT (pk) DO NOTHING",
                   {p(req.pk), p(req.info.owner), p(now)}));
    (void)ins;
    FDO_TRY(st, state(c, req.pk, true));
  }
  // A row this write just created counts as "no profile" for the checks.
  std::optional<detail::ProfileState> seen = st;
  if (seen && seen->last == 0) seen.reset();
  FDO_TRY(std::int64_t new_version, detail::check_write(req, seen));
  if (seen) new_version = seen->last + 1;
  FDO_TRY_STATUS(c.exec("UPDATE profiles SET current_version = $2, last_version = $2, "
                        "updated_at = $3 WHERE pk = $1",
                        {p(req.pk), p(new_version), p(now)}));
  FDO_TRY_STATUS(c.exec("INSERT INTO profile_versions (pk, version, digest, body, functions, "
                        "source, reason, author, host, stage, program, created_at) VALUES "
                        "($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
                        {p(req.pk), p(new_version), p(w.digest), p(w.body), p(w.functions),
                         p(to_string(req.info.source)), p(req.info.reason), p(req.info.owner),
                         p(req.info.host), p(req.info.stage), p(req.info.program), p(now)}));
  FDO_TRY_STATUS(c.exec("DELETE FROM profile_versions WHERE pk = $1 AND version <= $2",
                        {p(req.pk), p(new_version - retention.load(std::memory_order_relaxed))}));
  FDO_TRY_STATUS(pg::notify(c, req.pk));
  if (req.info.digest_out != nullptr) *req.info.digest_out = w.digest;
  docs.insert(detail::stored_record(std::move(w), new_version, now, st));
  return new_version;
}

Expected<std::int64_t> PgBackend::write(std::string_view pk, std::int64_t expected_version,
                                        const ProfileDoc& doc, const WriteInfo& info) {
  const std::int64_t now = now_ms();
  FDO_TRY(detail::PreparedWrite w, detail::prepare_write(pk, expected_version, doc, info, now));
  std::vector<detail::PreparedWrite> one;
  one.push_back(std::move(w));
  FDO_TRY(std::vector<std::int64_t> versions, impl_->write_prepared(std::move(one), now));
  return versions.front();
}

Expected<std::vector<std::int64_t>> PgBackend::write_batch(std::span<const WriteRequest> requests) {
  const std::int64_t now = now_ms();
  std::vector<detail::PreparedWrite> prepared;
  prepared.reserve(requests.size());
  for (std::size_t i = 0; i < requests.size(); ++i) {
    auto w = detail::prepare_write(requests[i], now);
    if (!w) return impl_->batch_error(i, requests.size(), std::move(w).error());
    prepared.push_back(std::move(*w));
  }
  return impl_->write_prepared(std::move(prepared), now);
}

Error PgBackend::Impl::batch_error(std::size_t i, std::size_t n, Error e) {
  if (n == 1) return e;
  return std::move(e).context("batch write " + std::to_string(i + 1) + " of " + std::to_string(n) +
                              " (nothing written)");
}

Expected<std::vector<std::int64_t>>
PgBackend::Impl::write_prepared(std::vector<detail::PreparedWrite>&& writes, std::int64_t now) {
  FDO_TRY_STATUS(writable());
  FDO_TRY(auto lease, pool.acquire());
  pg::Conn& c = lease.conn();
  std::vector<std::string> keys;
  keys.reserve(writes.size());
  for (const detail::PreparedWrite& w : writes)
    keys.push_back(w.pk);
  std::vector<std::int64_t> versions;
  versions.reserve(writes.size());
  {
    FDO_TRY(pg::Tx tx, pg::Tx::begin(c));
    for (std::size_t i = 0; i < writes.size(); ++i) {
      auto v = write_profile(c, std::move(writes[i]), now);
      if (!v) return batch_error(i, writes.size(), std::move(v).error());
      versions.push_back(*v);
    }
    FDO_TRY_STATUS(tx.commit());
  }
  for (const std::string& pk : keys)
    changed(pk);
  return versions;
}

namespace {

// One UPDATE of the key's row with the owner test in the statement, and the
// notification, in one statement (one transaction).
Status update_profile_row(PgBackend::Impl& impl, std::string_view pk, const std::string& set,
                          const ActingOwner& acting) {
  FDO_TRY_STATUS(check_key("profile key", pk));
  FDO_TRY_STATUS(impl.writable());
  FDO_TRY(auto lease, impl.pool.acquire());
  FDO_TRY(pg::Result r,
          lease.conn().exec("WITH u AS (UPDATE profiles SET " + set +
                                ", updated_at = $2 WHERE pk = $1 AND ($3::bigint IS NULL OR "
                                "owner = $3) RETURNING pk) SELECT pg_notify('" +
                                std::string(pg::kChannel) + "', pk) FROM u",
                            {p(pk), p(now_ms()), pg::p_or_null(acting)}));
  if (r.rows() == 0) return no_profile(pk);
  impl.changed(std::string(pk));
  return ok();
}

} // namespace

Status PgBackend::pin(std::string_view pk, ActingOwner acting_owner) {
  return update_profile_row(*impl_, pk, "pinned = true", acting_owner);
}

Status PgBackend::unpin(std::string_view pk, ActingOwner acting_owner) {
  return update_profile_row(*impl_, pk, "pinned = false", acting_owner);
}

Status PgBackend::reset(std::string_view pk, ActingOwner acting_owner) {
  return update_profile_row(*impl_, pk, "current_version = NULL", acting_owner);
}

Expected<RemoveSummary> PgBackend::remove(std::string_view pk, ActingOwner acting_owner) {
  FDO_TRY_STATUS(check_key("profile key", pk));
  FDO_TRY_STATUS(impl_->writable());
  FDO_TRY(auto lease, impl_->pool.acquire());
  pg::Conn& c = lease.conn();
  RemoveSummary out;
  {
    FDO_TRY(pg::Tx tx, pg::Tx::begin(c));
    FDO_TRY(auto state, impl_->state(c, pk, true));
    if (acting_owner && state && state->owner != *acting_owner) return no_profile(pk);
    std::optional<std::int64_t> programs_of;
    if (acting_owner && !state) programs_of = acting_owner;
    FDO_TRY(pg::Result counts,
            c.exec("SELECT (SELECT count(*) FROM profile_versions WHERE pk = $1), "
                   "(SELECT count(DISTINCT version) FROM feedback WHERE pk = $1)",
                   {p(pk)}));
    out.versions = counts.i64(0, 0);
    out.feedback_rows = counts.i64(0, 1);
    const std::string mapped = "SELECT ik FROM profile_keys WHERE pk = $1 AND ($2::bigint IS "
                               "NULL OR ik IN (SELECT ik FROM programs WHERE owner = $2))";
    FDO_TRY(pg::Result vk, c.exec("DELETE FROM virtual_keys WHERE ik IN (" + mapped + ")",
                                  {p(pk), pg::p_or_null(programs_of)}));
    out.virtual_keys = vk.affected();
    FDO_TRY(pg::Result ik, c.exec("DELETE FROM profile_keys WHERE ik IN (" + mapped + ")",
                                  {p(pk), pg::p_or_null(programs_of)}));
    out.profile_keys = ik.affected();
    FDO_TRY(pg::Result gone, c.exec("DELETE FROM profiles WHERE pk = $1", {p(pk)}));
    if (gone.affected() == 0 && out.profile_keys == 0) return no_profile(pk);
    FDO_TRY_STATUS(pg::notify(c, pk));
    FDO_TRY_STATUS(tx.commit());
  }
  impl_->changed(std::string(pk));
  return out;
}

} // namespace fdo::profile_store
