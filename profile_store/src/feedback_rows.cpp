#include "feedback_rows.h"

#include "internal.h"

namespace fdo::profile_store::detail {

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

Expected<std::map<FeedbackKey, MergedFeedback>> merge_feedback(std::span<const FeedbackRow> rows) {
  std::map<FeedbackKey, MergedFeedback> merged;
  // Count lengths must agree per (pk, version, function) across hosts too.
  std::map<std::tuple<std::string, std::int64_t, std::string>, std::size_t> lengths;
  for (size_t i = 0; i < rows.size(); ++i) {
    const FeedbackRow& r = rows[i];
    std::string where = "feedback row " + std::to_string(i + 1);
    if (auto s = check_key("profile key", r.pk); !s) return std::move(s).error().context(where);
    if (r.version <= 0)
      return make_error(Errc::invalid_argument,
                        where + ": version must be > 0 (got " + std::to_string(r.version) + ")");
    if (r.host.size() > kMaxKeyBytes)
      return make_error(Errc::invalid_argument, where + ": host name is " +
                                                    std::to_string(r.host.size()) + " bytes (max " +
                                                    std::to_string(kMaxKeyBytes) + ")");
    MergedFeedback& m = merged[{r.pk, r.version, r.host}];
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
      auto [len, first] = lengths.try_emplace({r.pk, r.version, fn}, counts.size());
      if (!first && len->second != counts.size())
        return make_error(Errc::invalid_argument,
                          where + ": function " + fn + " has " + std::to_string(counts.size()) +
                              " counts but an earlier row of the batch for " +
                              describe_profile(r.pk, r.version) + " has " +
                              std::to_string(len->second));
      auto [it, inserted] = m.totals.function_counts.try_emplace(fn, counts);
      if (inserted) continue;
      for (size_t k = 0; k < counts.size(); ++k)
        it->second[k] = sat_add(it->second[k], counts[k]);
    }
  }
  return merged;
}

Status check_batch_id(std::string_view batch_id) {
  return check_key("feedback batch id", batch_id);
}

Status add_host_totals(FeedbackTotals& into, const std::string& host, std::uint64_t stages,
                       std::uint64_t exec_ns, std::int64_t updated_at) {
  into.stages = sat_add(into.stages, stages);
  into.exec_ns = sat_add(into.exec_ns, exec_ns);
  into.updated_at = std::max(into.updated_at, updated_at);
  into.host_stages[host] = sat_add(into.host_stages[host], stages);
  return ok();
}

Status add_function_counts(FeedbackTotals& into, const std::string& fn,
                           const std::vector<std::uint64_t>& counts, const std::string& what) {
  auto [it, inserted] = into.function_counts.try_emplace(fn, counts);
  if (inserted) return ok();
  if (it->second.size() != counts.size())
    return make_error(Errc::corrupt, what + ": function " + fn + " has " +
                                         std::to_string(counts.size()) +
                                         " counts on one host and " +
                                         std::to_string(it->second.size()) + " on another");
  for (size_t k = 0; k < counts.size(); ++k)
    it->second[k] = sat_add(it->second[k], counts[k]);
  return ok();
}

std::string length_mismatch(const std::string& what, const std::string& fn, std::size_t got,
                            std::size_t stored) {
  return what + ": function " + fn + " has " + std::to_string(got) + " counts but " +
         std::to_string(stored) + " are stored (nothing of the batch applied)";
}

} // namespace fdo::profile_store::detail
