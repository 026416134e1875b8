// Feedback per host (with idempotent batch ids) and export/import bundles on
// PostgreSQL.
#include "../bundle_format.h"
#include "../feedback_rows.h"
#include "internal.h"

#include <algorithm>
#include <map>
#include <set>

namespace fdo::profile_store {

using detail::as_i64;
using detail::as_u64;
using detail::check_key;
using detail::describe_profile;
using detail::now_ms;
using detail::sat_add;
using nlohmann::json;
using pg::p;

// --- feedback ---

namespace {

// INSERT INTO `into` VALUES ($1, $2, $3, $a, $b<cast>), ... ON CONFLICT
// `on_conflict`: the three key params shared by every row, two of each row's
// own; in statements of at most kRowsPerStatement rows (PostgreSQL takes at
// most 65535 parameters per statement).
Status upsert(pg::Conn& c, std::string_view into, std::string_view cast,
              std::string_view on_conflict, const std::vector<pg::Param>& key,
              const std::vector<std::pair<pg::Param, pg::Param>>& rows) {
  constexpr std::size_t kRowsPerStatement = 1000;
  for (std::size_t first = 0; first < rows.size(); first += kRowsPerStatement) {
    const std::size_t last = std::min(rows.size(), first + kRowsPerStatement);
    std::vector<pg::Param> params = key;
    std::string sql = "INSERT INTO " + std::string(into) + " VALUES ";
    for (std::size_t i = first; i < last; ++i) {
      const std::string a = std::to_string(params.size() + 1);
      const std::string b = std::to_string(params.size() + 2);
      sql += (i == first ? "" : ", ") + std::string("($1, $2, $3, $") + a + ", $" + b +
             std::string(cast) + ")";
      params.push_back(rows[i].first);
      params.push_back(rows[i].second);
    }
    sql += " ON CONFLICT " + std::string(on_conflict);
    FDO_TRY_STATUS(c.exec(sql, params));
  }
  return ok();
}

} // namespace

Expected<AppendResult> PgBackend::append_feedback(std::span<const FeedbackRow> rows,
                                                  std::string_view batch_id) {
  if (!batch_id.empty()) FDO_TRY_STATUS(detail::check_batch_id(batch_id));
  FDO_TRY(auto merged, detail::merge_feedback(rows));
  FDO_TRY_STATUS(impl_->writable());
  FDO_TRY(auto lease, impl_->pool.acquire());
  pg::Conn& c = lease.conn();
  FDO_TRY(pg::Tx tx, pg::Tx::begin(c));
  const std::int64_t now = now_ms();
  AppendResult result;
  if (!batch_id.empty()) {
    FDO_TRY_STATUS(
        c.exec("DELETE FROM feedback_batches WHERE applied_at < $1",
               {p(now - std::chrono::milliseconds(ProfileStore::kBatchIdRetention).count())}));
    // A second host replaying the same id waits here for the first to commit.
    FDO_TRY(pg::Result claimed, c.exec("INSERT INTO feedback_batches (batch_id, applied_at) "
                                       "VALUES ($1, $2) ON CONFLICT (batch_id) DO NOTHING",
                                       {p(batch_id), p(now)}));
    if (claimed.affected() == 0) {
      result.duplicate = true;
      return result; // rolls back: nothing changed
    }
  }
  std::set<std::pair<std::string, std::int64_t>> skipped;
  for (auto& [key, m] : merged) {
    const auto& [pk, version, host] = key;
    std::string what = "feedback for " + describe_profile(pk, version);
    FDO_TRY(pg::Result exists,
            c.exec("SELECT 1 FROM profile_versions WHERE pk = $1 AND version = $2",
                   {p(pk), p(version)}));
    if (exists.rows() == 0) {
      if (skipped.emplace(pk, version).second) result.skipped.emplace_back(pk, version);
      continue;
    }
    // The host's row, created if needed and locked (the upsert locks it):
    // appenders of one (pk, version, host) take turns, so no sum is lost.
    FDO_TRY(pg::Result old,
            c.exec("INSERT INTO feedback (pk, version, host, stages, exec_ns, updated_at) "
                   "VALUES ($1, $2, $3, 0, 0, $4) ON CONFLICT (pk, version, host) DO UPDATE "
                   "SET updated_at = excluded.updated_at RETURNING stages, exec_ns",
                   {p(pk), p(version), p(host), p(now)}));
    FDO_TRY_STATUS(c.exec("UPDATE feedback SET stages = $4, exec_ns = $5, updated_at = $6 WHERE "
                          "pk = $1 AND version = $2 AND host = $3",
                          {p(pk), p(version), p(host),
                           p(as_i64(sat_add(as_u64(old.i64(0, 0)), m.totals.stages))),
                           p(as_i64(sat_add(as_u64(old.i64(0, 1)), m.totals.exec_ns))), p(now)}));
    // Counters and function counts: one read and one multi-row upsert each
    // (the sums are made here, saturating, as on SQLite), not two statements
    // per counter and per function.
    if (!m.totals.counters.empty()) {
      FDO_TRY(pg::Result cur, c.exec("SELECT name, value FROM feedback_counters WHERE pk = $1 "
                                     "AND version = $2 AND host = $3",
                                     {p(pk), p(version), p(host)}));
      std::map<std::string, std::uint64_t> before;
      for (int i = 0; i < cur.rows(); ++i)
        before[cur.text(i, 0)] = as_u64(cur.i64(i, 1));
      std::vector<std::pair<pg::Param, pg::Param>> values;
      for (const auto& [name, value] : m.totals.counters)
        values.emplace_back(p(name), p(as_i64(sat_add(before[name], value))));
      FDO_TRY_STATUS(upsert(c, "feedback_counters (pk, version, host, name, value)", "",
                            "(pk, version, host, name) DO UPDATE SET value = excluded.value",
                            {p(pk), p(version), p(host)}, values));
    }
    if (!m.totals.function_counts.empty()) {
      // Every host's row of each function, for the length check; this host's to sum.
      FDO_TRY(pg::Result cur, c.exec("SELECT host, function, counts FROM "
                                     "feedback_function_counts WHERE pk = $1 AND version = $2",
                                     {p(pk), p(version)}));
      // This call's own merge, used once: summed in place, not copied.
      auto& sums = m.totals.function_counts;
      for (int i = 0; i < cur.rows(); ++i) {
        const std::string fn = cur.text(i, 1);
        auto it = sums.find(fn);
        if (it == sums.end()) continue;
        FDO_TRY(auto stored, pg::parse_counts(cur.text(i, 2), what + " function " + fn));
        if (stored.size() != it->second.size())
          return make_error(Errc::invalid_argument,
                            detail::length_mismatch(what, fn, it->second.size(), stored.size()));
        if (cur.text(i, 0) != host) continue;
        for (size_t k = 0; k < stored.size(); ++k)
          it->second[k] = sat_add(stored[k], it->second[k]);
      }
      std::vector<std::pair<pg::Param, pg::Param>> values;
      for (const auto& [fn, sum] : sums)
        values.emplace_back(p(fn), p(pg::counts_literal(sum)));
      FDO_TRY_STATUS(upsert(c, "feedback_function_counts (pk, version, host, function, counts)",
                            "::bigint[]",
                            "(pk, version, host, function) DO UPDATE SET counts = excluded.counts",
                            {p(pk), p(version), p(host)}, values));
    }
    result.applied += m.rows;
  }
  FDO_TRY_STATUS(tx.commit());
  return result;
}

Expected<std::optional<FeedbackTotals>> PgBackend::feedback(std::string_view pk,
                                                            std::int64_t version) const {
  FDO_TRY_STATUS(check_key("profile key", pk));
  FDO_TRY(auto lease, impl_->pool.acquire());
  pg::Conn& c = lease.conn();
  // One snapshot for the totals and their details.
  FDO_TRY(pg::Tx tx, pg::Tx::begin(c));
  FDO_TRY_STATUS(c.exec_script("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY"));
  FeedbackTotals t;
  t.pk = std::string(pk);
  t.version = version;
  std::string what = "feedback for " + describe_profile(pk, version);
  FDO_TRY(pg::Result hosts, c.exec("SELECT host, stages, exec_ns, updated_at FROM feedback "
                                   "WHERE pk = $1 AND version = $2",
                                   {p(pk), p(version)}));
  if (hosts.rows() == 0) return std::optional<FeedbackTotals>();
  for (int i = 0; i < hosts.rows(); ++i)
    FDO_TRY_STATUS(detail::add_host_totals(t, hosts.text(i, 0), as_u64(hosts.i64(i, 1)),
                                           as_u64(hosts.i64(i, 2)), hosts.i64(i, 3)));
  FDO_TRY(pg::Result counters, c.exec("SELECT name, value FROM feedback_counters WHERE pk = $1 "
                                      "AND version = $2",
                                      {p(pk), p(version)}));
  for (int i = 0; i < counters.rows(); ++i)
    detail::add_counter(t, counters.text(i, 0), as_u64(counters.i64(i, 1)));
  FDO_TRY(pg::Result fns, c.exec("SELECT function, counts FROM feedback_function_counts WHERE "
                                 "pk = $1 AND version = $2",
                                 {p(pk), p(version)}));
  for (int i = 0; i < fns.rows(); ++i) {
    std::string fn = fns.text(i, 0);
    FDO_TRY(auto counts, pg::parse_counts(fns.text(i, 1), what + " function " + fn));
    FDO_TRY_STATUS(detail::add_function_counts(t, fn, counts, what));
  }
  FDO_TRY_STATUS(tx.commit());
  return std::optional<FeedbackTotals>(std::move(t));
}

// --- export / import ---

namespace {

// Inside a REPEATABLE READ transaction: one snapshot for the whole bundle.
Expected<json> export_snapshot(PgBackend::Impl& impl, pg::Conn& c,
                               const std::vector<std::string>& pks, ExportHistory history) {
  json profiles = json::array();
  std::set<std::string> seen;
  for (const std::string& pk : pks) {
    if (!seen.insert(pk).second) continue;
    FDO_TRY_STATUS(check_key("profile key", pk));
    FDO_TRY(auto state, impl.state(c, pk, false));
    if (!state) return make_error(Errc::not_found, "export: no profile " + pk);
    FDO_TRY(auto current, impl.current(c, pk));
    std::optional<std::vector<StoredProfile>> versions;
    if (history == ExportHistory::full) {
      FDO_TRY(versions, impl.history(c, pk));
    }
    profiles.push_back(detail::bundle_entry(pk, state->owner, state->pinned, state->last, current,
                                            versions ? &*versions : nullptr));
  }
  return detail::bundle_envelope(std::move(profiles), history);
}

Status begin_snapshot(pg::Conn& c) {
  return c.exec_script("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY");
}

} // namespace

Expected<json> PgBackend::export_bundle(std::span<const std::string> pks,
                                        ExportHistory history) const {
  FDO_TRY(auto lease, impl_->pool.acquire());
  FDO_TRY(pg::Tx tx, pg::Tx::begin(lease.conn()));
  FDO_TRY_STATUS(begin_snapshot(lease.conn()));
  FDO_TRY(json bundle, export_snapshot(*impl_, lease.conn(),
                                       std::vector<std::string>(pks.begin(), pks.end()), history));
  FDO_TRY_STATUS(tx.commit());
  return bundle;
}

Expected<json> PgBackend::export_all(ExportHistory history) const {
  FDO_TRY(auto lease, impl_->pool.acquire());
  pg::Conn& c = lease.conn();
  FDO_TRY(pg::Tx tx, pg::Tx::begin(c));
  FDO_TRY_STATUS(begin_snapshot(c));
  FDO_TRY(pg::Result r, c.exec("SELECT pk FROM profiles ORDER BY pk"));
  std::vector<std::string> pks;
  for (int i = 0; i < r.rows(); ++i)
    pks.push_back(r.text(i, 0));
  FDO_TRY(json bundle, export_snapshot(*impl_, c, pks, history));
  FDO_TRY_STATUS(tx.commit());
  return bundle;
}

namespace {

// Import on a leased connection, inside the import's transaction; every
// key it reads is locked until the commit.
class PgImportTarget final : public detail::ImportTarget {
public:
  PgImportTarget(PgBackend::Impl& impl, pg::Conn& c) : impl_(impl), c_(c) {}
  Expected<std::optional<detail::ProfileState>> state(const std::string& pk) override {
    return impl_.state(c_, pk, /*for_update=*/true);
  }
  Expected<std::optional<std::string>> current_digest(const std::string& pk) override {
    FDO_TRY(auto cur, impl_.current(c_, pk));
    if (!cur) return std::optional<std::string>();
    return std::optional<std::string>(std::move(cur->digest));
  }
  Expected<bool> owns_program_with_pk(std::int64_t owner, const std::string& pk) override {
    FDO_TRY(pg::Result r, c_.exec("SELECT 1 FROM programs WHERE pk = $1 AND owner = $2 LIMIT 1",
                                  {p(pk), p(owner)}));
    return r.rows() > 0;
  }
  Expected<std::int64_t> write(const WriteRequest& req, std::int64_t now) override {
    FDO_TRY(detail::PreparedWrite w, detail::prepare_write(req, now));
    return impl_.write_profile(c_, std::move(w), now);
  }
  Status set_pinned(const std::string& pk) override {
    FDO_TRY_STATUS(c_.exec("UPDATE profiles SET pinned = true WHERE pk = $1", {p(pk)}));
    return pg::notify(c_, pk);
  }

private:
  PgBackend::Impl& impl_;
  pg::Conn& c_;
};

} // namespace

Expected<std::vector<ImportedProfile>>
PgBackend::import_bundle(const json& bundle, std::int64_t owner, ImportConflict policy,
                         ActingOwner acting_owner, ImportNewKeys new_keys) {
  FDO_TRY_STATUS(detail::check_import_request(new_keys, acting_owner));
  FDO_TRY(std::vector<detail::Incoming> incoming, detail::parse_bundle(bundle));
  FDO_TRY_STATUS(impl_->writable());
  FDO_TRY(auto lease, impl_->pool.acquire());
  pg::Conn& c = lease.conn();
  std::vector<ImportedProfile> out;
  {
    FDO_TRY(pg::Tx tx, pg::Tx::begin(c));
    PgImportTarget target(*impl_, c);
    FDO_TRY(out,
            detail::import_into(target, incoming, owner, policy, acting_owner, new_keys, now_ms()));
    FDO_TRY_STATUS(tx.commit());
  }
  for (const ImportedProfile& r : out)
    impl_->changed(r.pk);
  return out;
}

} // namespace fdo::profile_store
