// Execution feedback on SQLite: batched aggregation per (pk, version, host),
// idempotent batch ids, and totals summed over hosts.
#include "feedback_rows.h"
#include "internal.h"

#include <map>
#include <set>

namespace fdo::profile_store {

using detail::as_i64;
using detail::as_u64;
using detail::check_key;
using detail::decode_counts;
using detail::describe_profile;
using detail::encode_counts;
using detail::now_ms;
using detail::sat_add;
using sqlite::Transaction;
using sqlite::TxKind;

namespace {

// Inside the batch's transaction: true when the id was applied before;
// otherwise records it (and prunes ids past their retention).
Expected<bool> claim_batch_id(sqlite::Connection& db, std::string_view batch_id, std::int64_t now) {
  {
    FDO_TRY(auto st, db.cached("DELETE FROM feedback_batches WHERE applied_at < ?1"));
    st->bind(1, now - std::chrono::milliseconds(ProfileStore::kBatchIdRetention).count());
    FDO_TRY_STATUS(st->run());
  }
  FDO_TRY(auto st, db.cached("INSERT INTO feedback_batches (batch_id, applied_at) VALUES (?1, ?2) "
                             "ON CONFLICT (batch_id) DO NOTHING"));
  st->bind(1, batch_id).bind(2, now);
  FDO_TRY_STATUS(st->run());
  return db.changes() == 0;
}

} // namespace

Expected<AppendResult> SqliteBackend::append_feedback(std::span<const FeedbackRow> rows,
                                                      std::string_view batch_id) {
  // Validate and merge in memory first: a bad row fails the batch before the
  // write lock is taken, and each (pk, version, host) is written once.
  if (!batch_id.empty()) FDO_TRY_STATUS(detail::check_batch_id(batch_id));
  FDO_TRY(auto merged, detail::merge_feedback(rows));

  FDO_TRY(auto lock, impl_->lock_writer());
  sqlite::Connection& db = impl_->writer;
  FDO_TRY(auto tx, Transaction::begin(db, TxKind::immediate));
  std::int64_t now = now_ms();
  AppendResult result;
  if (!batch_id.empty()) {
    FDO_TRY(bool seen, claim_batch_id(db, batch_id, now));
    if (seen) {
      result.duplicate = true;
      return result; // the transaction rolls back: nothing changed
    }
  }
  std::set<std::pair<std::string, std::int64_t>> skipped;
  for (auto& [key, m] : merged) {
    const auto& [pk, version, host] = key;
    std::string what = "feedback for " + describe_profile(pk, version);
    {
      FDO_TRY(auto st, db.cached("SELECT 1 FROM profile_versions WHERE pk = ?1 AND version = ?2"));
      st->bind(1, pk).bind(2, version);
      FDO_TRY(bool exists, st->step());
      if (!exists) {
        if (skipped.emplace(pk, version).second) result.skipped.emplace_back(pk, version);
        continue;
      }
    }
    std::uint64_t stages = 0, exec_ns = 0;
    {
      FDO_TRY(auto st, db.cached("SELECT stages, exec_ns FROM feedback WHERE pk = ?1 AND "
                                 "version = ?2 AND host = ?3"));
      st->bind(1, pk).bind(2, version).bind(3, host);
      FDO_TRY(bool row, st->step());
      if (row) {
        stages = as_u64(st->column_int64(0));
        exec_ns = as_u64(st->column_int64(1));
      }
    }
    {
      FDO_TRY(auto st, db.cached("INSERT INTO feedback (pk, version, host, stages, exec_ns, "
                                 "updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT "
                                 "(pk, version, host) DO UPDATE SET stages = excluded.stages, "
                                 "exec_ns = excluded.exec_ns, updated_at = excluded.updated_at"));
      st->bind(1, pk).bind(2, version).bind(3, host);
      st->bind(4, as_i64(sat_add(stages, m.totals.stages)));
      st->bind(5, as_i64(sat_add(exec_ns, m.totals.exec_ns)));
      st->bind(6, now);
      FDO_TRY_STATUS(st->run());
    }
    for (const auto& [name, value] : m.totals.counters) {
      // SQLite's integer addition overflows into REAL, so sums are done here
      // in uint64 and stored bit-for-bit.
      std::uint64_t old = 0;
      {
        FDO_TRY(auto st, db.cached("SELECT value FROM feedback_counters WHERE pk = ?1 AND "
                                   "version = ?2 AND host = ?3 AND name = ?4"));
        st->bind(1, pk).bind(2, version).bind(3, host).bind(4, name);
        FDO_TRY(bool row, st->step());
        if (row) old = as_u64(st->column_int64(0));
      }
      FDO_TRY(auto st, db.cached("INSERT INTO feedback_counters (pk, version, host, name, value) "
                                 "VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (pk, version, host, "
                                 "name) DO UPDATE SET value = excluded.value"));
      st->bind(1, pk).bind(2, version).bind(3, host).bind(4, name);
      st->bind(5, as_i64(sat_add(old, value)));
      FDO_TRY_STATUS(st->run());
    }
    if (!m.totals.function_counts.empty()) {
      // Every host's rows of the version in one scan of the key's prefix, for
      // the length check, and this host's to sum: not a statement per
      // function (the function is the key's last column, after the host, so
      // each would scan the same rows).
      // This call's own merge, used once: summed in place, not copied.
      auto& sums = m.totals.function_counts;
      {
        FDO_TRY(auto st, db.cached("SELECT host, function, counts FROM "
                                   "feedback_function_counts WHERE pk = ?1 AND version = ?2"));
        st->bind(1, pk).bind(2, version);
        while (true) {
          FDO_TRY(bool row, st->step());
          if (!row) break;
          auto it = sums.find(st->column_text(1));
          if (it == sums.end()) continue;
          const std::string& fn = it->first;
          FDO_TRY(auto old, decode_counts(st->column_blob(2), what + " function " + fn));
          // Every host's vector of this function has one length.
          if (old.size() != it->second.size())
            return make_error(Errc::invalid_argument,
                              detail::length_mismatch(what, fn, it->second.size(), old.size()));
          if (st->column_text(0) != host) continue;
          for (size_t k = 0; k < old.size(); ++k)
            it->second[k] = sat_add(old[k], it->second[k]);
        }
      }
      for (const auto& [fn, sum] : sums) {
        FDO_TRY(auto st, db.cached("INSERT INTO feedback_function_counts (pk, version, host, "
                                   "function, counts) VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT "
                                   "(pk, version, host, function) DO UPDATE SET counts = "
                                   "excluded.counts"));
        auto blob = encode_counts(sum);
        st->bind(1, pk).bind(2, version).bind(3, host).bind(4, fn).bind_blob(5, blob);
        FDO_TRY_STATUS(st->run());
      }
    }
    result.applied += m.rows;
  }
  FDO_TRY_STATUS(tx.commit());
  return result;
}

Expected<std::optional<FeedbackTotals>> SqliteBackend::feedback(std::string_view pk,
                                                                std::int64_t version) const {
  FDO_TRY_STATUS(check_key("profile key", pk));
  FDO_TRY(auto lease, impl_->readers.acquire());
  sqlite::Connection& db = lease.db();
  // One snapshot so the totals and their details come from the same batch.
  FDO_TRY(auto tx, Transaction::begin(db, TxKind::deferred));
  FeedbackTotals t;
  t.pk = std::string(pk);
  t.version = version;
  std::string what = "feedback for " + describe_profile(pk, version);
  {
    FDO_TRY(auto st, db.cached("SELECT host, stages, exec_ns, updated_at FROM feedback "
                               "WHERE pk = ?1 AND version = ?2"));
    st->bind(1, pk).bind(2, version);
    while (true) {
      FDO_TRY(bool row, st->step());
      if (!row) break;
      FDO_TRY_STATUS(detail::add_host_totals(t, st->column_text(0), as_u64(st->column_int64(1)),
                                             as_u64(st->column_int64(2)), st->column_int64(3)));
    }
    if (t.host_stages.empty()) return std::optional<FeedbackTotals>();
  }
  {
    FDO_TRY(auto st, db.cached("SELECT name, value FROM feedback_counters "
                               "WHERE pk = ?1 AND version = ?2"));
    st->bind(1, pk).bind(2, version);
    while (true) {
      FDO_TRY(bool row, st->step());
      if (!row) break;
      detail::add_counter(t, st->column_text(0), as_u64(st->column_int64(1)));
    }
  }
  {
    FDO_TRY(auto st, db.cached("SELECT function, counts FROM feedback_function_counts "
                               "WHERE pk = ?1 AND version = ?2"));
    st->bind(1, pk).bind(2, version);
    while (true) {
      FDO_TRY(bool row, st->step());
      if (!row) break;
      std::string fn = st->column_text(0);
      FDO_TRY(auto counts, decode_counts(st->column_blob(1), what + " function " + fn));
      FDO_TRY_STATUS(detail::add_function_counts(t, fn, counts, what));
    }
  }
  FDO_TRY_STATUS(tx.commit());
  return std::optional<FeedbackTotals>(std::move(t));
}

} // namespace fdo::profile_store
