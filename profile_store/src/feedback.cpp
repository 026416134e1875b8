// Execution feedback: batched aggregation per (pk, version) and its totals.
#include "internal.h"

#include <limits>
#include <map>

namespace fdo::profile_store {

using detail::check_key;
using detail::describe_profile;
using detail::now_ms;
using sqlite::Transaction;
using sqlite::TxKind;

namespace {

std::int64_t as_i64(std::uint64_t v) {
  return static_cast<std::int64_t>(v);
}
std::uint64_t as_u64(std::int64_t v) {
  return static_cast<std::uint64_t>(v);
}

std::uint64_t sat_add(std::uint64_t a, std::uint64_t b) {
  return b > std::numeric_limits<std::uint64_t>::max() - a
             ? std::numeric_limits<std::uint64_t>::max()
             : a + b;
}

std::vector<std::uint8_t> encode_counts(const std::vector<std::uint64_t>& counts) {
  std::vector<std::uint8_t> out(counts.size() * 8);
  for (size_t i = 0; i < counts.size(); ++i)
    for (int b = 0; b < 8; ++b)
      out[i * 8 + b] = static_cast<std::uint8_t>(counts[i] >> (8 * b));
  return out;
}

Expected<std::vector<std::uint64_t>> decode_counts(const std::vector<std::uint8_t>& bytes,
                                                   const std::string& what) {
  if (bytes.size() % 8 != 0)
    return make_error(Errc::corrupt, what + ": counts blob of " + std::to_string(bytes.size()) +
                                         " bytes is not a whole number of uint64");
  std::vector<std::uint64_t> out(bytes.size() / 8);
  for (size_t i = 0; i < out.size(); ++i)
    for (int b = 0; b < 8; ++b)
      out[i] |= std::uint64_t(bytes[i * 8 + b]) << (8 * b);
  return out;
}

} // namespace

Expected<AppendResult> ProfileStore::append_feedback(std::span<const FeedbackRow> rows) {
  // Validate and merge in memory first: a bad row fails the batch before the
  // write lock is taken, and each (pk, version) is written once.
  struct Merged {
    std::size_t rows = 0;
    FeedbackTotals totals;
  };
  std::map<std::pair<std::string, std::int64_t>, Merged> merged;
  for (size_t i = 0; i < rows.size(); ++i) {
    const FeedbackRow& r = rows[i];
    std::string where = "feedback row " + std::to_string(i + 1);
    if (auto s = check_key("profile key", r.pk); !s) return std::move(s).error().context(where);
    if (r.version <= 0)
      return make_error(Errc::invalid_argument,
                        where + ": version must be > 0 (got " + std::to_string(r.version) + ")");
    Merged& m = merged[{r.pk, r.version}];
    m.rows++;
    m.totals.stages = sat_add(m.totals.stages, r.stages);
    m.totals.exec_ns = sat_add(m.totals.exec_ns, r.exec_ns);
    for (const auto& [name, value] : r.counters) {
      if (name.empty())
        return make_error(Errc::invalid_argument, where + ": counter name must not be empty");
      m.totals.counters[name] = sat_add(m.totals.counters[name], value);
    }
    for (const auto& [fn, counts] : r.function_counts) {
      if (fn.empty())
        return make_error(Errc::invalid_argument, where + ": function name must not be empty");
      auto [it, inserted] = m.totals.function_counts.try_emplace(fn, counts);
      if (inserted) continue;
      if (it->second.size() != counts.size())
        return make_error(Errc::invalid_argument,
                          where + ": function " + fn + " has " + std::to_string(counts.size()) +
                              " counts but an earlier row of the batch for " +
                              describe_profile(r.pk, r.version) + " has " +
                              std::to_string(it->second.size()));
      for (size_t k = 0; k < counts.size(); ++k)
        it->second[k] = sat_add(it->second[k], counts[k]);
    }
  }

  FDO_TRY(auto lock, impl_->lock_writer());
  sqlite::Connection& db = impl_->writer;
  FDO_TRY(auto tx, Transaction::begin(db, TxKind::immediate));
  std::int64_t now = now_ms();
  AppendResult result;
  for (auto& [key, m] : merged) {
    const auto& [pk, version] = key;
    std::string what = "feedback for " + describe_profile(pk, version);
    {
      FDO_TRY(auto st, db.cached("SELECT 1 FROM profile_versions WHERE pk = ?1 AND version = ?2"));
      st->bind(1, pk).bind(2, version);
      FDO_TRY(bool exists, st->step());
      if (!exists) {
        result.skipped.emplace_back(pk, version);
        continue;
      }
    }
    std::uint64_t stages = 0, exec_ns = 0;
    {
      FDO_TRY(auto st,
              db.cached("SELECT stages, exec_ns FROM feedback WHERE pk = ?1 AND version = ?2"));
      st->bind(1, pk).bind(2, version);
      FDO_TRY(bool row, st->step());
      if (row) {
        stages = as_u64(st->column_int64(0));
        exec_ns = as_u64(st->column_int64(1));
      }
    }
    {
      FDO_TRY(auto st, db.cached("INSERT INTO feedback (pk, version, stages, exec_ns, "
                                 "updated_at) VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT "
                                 "(pk, version) DO UPDATE SET stages = excluded.stages, "
                                 "exec_ns = excluded.exec_ns, updated_at = excluded.updated_at"));
      st->bind(1, pk).bind(2, version);
      st->bind(3, as_i64(sat_add(stages, m.totals.stages)));
      st->bind(4, as_i64(sat_add(exec_ns, m.totals.exec_ns)));
      st->bind(5, now);
      FDO_TRY_STATUS(st->run());
    }
    for (const auto& [name, value] : m.totals.counters) {
      // SQLite's integer addition overflows into REAL, so sums are done here
      // in uint64 and stored bit-for-bit.
      std::uint64_t old = 0;
      {
        FDO_TRY(auto st, db.cached("SELECT value FROM feedback_counters WHERE pk = ?1 AND "
                                   "version = ?2 AND name = ?3"));
        st->bind(1, pk).bind(2, version).bind(3, name);
        FDO_TRY(bool row, st->step());
        if (row) old = as_u64(st->column_int64(0));
      }
      FDO_TRY(auto st, db.cached("INSERT INTO feedback_counters (pk, version, name, value) "
                                 "VALUES (?1, ?2, ?3, ?4) ON CONFLICT (pk, version, name) "
                                 "DO UPDATE SET value = excluded.value"));
      st->bind(1, pk).bind(2, version).bind(3, name).bind(4, as_i64(sat_add(old, value)));
      FDO_TRY_STATUS(st->run());
    }
    for (const auto& [fn, counts] : m.totals.function_counts) {
      std::vector<std::uint64_t> sum = counts;
      {
        FDO_TRY(auto st, db.cached("SELECT counts FROM feedback_function_counts WHERE pk = ?1 "
                                   "AND version = ?2 AND function = ?3"));
        st->bind(1, pk).bind(2, version).bind(3, fn);
        FDO_TRY(bool row, st->step());
        if (row) {
          FDO_TRY(auto old, decode_counts(st->column_blob(0), what + " function " + fn));
          if (old.size() != counts.size())
            return make_error(Errc::invalid_argument,
                              what + ": function " + fn + " has " + std::to_string(counts.size()) +
                                  " counts but " + std::to_string(old.size()) +
                                  " are stored (nothing of the batch applied)");
          for (size_t k = 0; k < sum.size(); ++k)
            sum[k] = sat_add(old[k], sum[k]);
        }
      }
      FDO_TRY(auto st, db.cached("INSERT INTO feedback_function_counts (pk, version, function, "
                                 "counts) VALUES (?1, ?2, ?3, ?4) ON CONFLICT "
                                 "(pk, version, function) DO UPDATE SET counts = excluded.counts"));
      auto blob = encode_counts(sum);
      st->bind(1, pk).bind(2, version).bind(3, fn).bind_blob(4, blob);
      FDO_TRY_STATUS(st->run());
    }
    result.applied += m.rows;
  }
  FDO_TRY_STATUS(tx.commit());
  return result;
}

Expected<std::optional<FeedbackTotals>> ProfileStore::feedback(std::string_view pk,
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
    FDO_TRY(auto st, db.cached("SELECT stages, exec_ns, updated_at FROM feedback "
                               "WHERE pk = ?1 AND version = ?2"));
    st->bind(1, pk).bind(2, version);
    FDO_TRY(bool row, st->step());
    if (!row) return std::optional<FeedbackTotals>();
    t.stages = as_u64(st->column_int64(0));
    t.exec_ns = as_u64(st->column_int64(1));
    t.updated_at = st->column_int64(2);
  }
  {
    FDO_TRY(auto st, db.cached("SELECT name, value FROM feedback_counters "
                               "WHERE pk = ?1 AND version = ?2"));
    st->bind(1, pk).bind(2, version);
    while (true) {
      FDO_TRY(bool row, st->step());
      if (!row) break;
      t.counters[st->column_text(0)] = as_u64(st->column_int64(1));
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
      t.function_counts[fn] = std::move(counts);
    }
  }
  FDO_TRY_STATUS(tx.commit());
  return std::optional<FeedbackTotals>(std::move(t));
}

} // namespace fdo::profile_store
