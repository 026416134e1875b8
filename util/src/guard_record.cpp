#include "fdo/util/guard_record.h"

#include "fdo/util/enum_names.h"
#include "fdo/util/profile.h"

#include <cmath>
#include <limits>

namespace fdo {

using nlohmann::json;

namespace {
constexpr EnumNames<VariantBase, 2> kBaseNames{
    {{{VariantBase::plain, "plain"}, {VariantBase::profiled, "profiled"}}}};
constexpr EnumNames<TrialVerdict, 3> kVerdictNames{
    {{{TrialVerdict::accepted, "accepted"},
      {TrialVerdict::rejected, "rejected"},
      {TrialVerdict::no_difference, "no_difference"}}}};

Error guard_error(const std::string& path, const std::string& what) {
  return make_error(Errc::invalid_argument, "profile field 'guard" + path + "': " + what);
}

Status read_string(const json& obj, const char* key, const std::string& path, std::string& out) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return ok();
  if (!it->is_string()) return guard_error(path + "." + key, "must be a string");
  out = it->get<std::string>();
  return ok();
}

Status read_int(const json& obj, const char* key, const std::string& path, long long lo,
                long long hi, long long& out) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return ok();
  if (!it->is_number_integer() || it->get<long long>() < lo || it->get<long long>() > hi)
    return guard_error(path + "." + key, "must be an integer in [" + std::to_string(lo) + ", " +
                                             std::to_string(hi) + "]");
  out = it->get<long long>();
  return ok();
}

Expected<TrialRecord> trial_from_json(const json& j, const std::string& path) {
  if (!j.is_object()) return guard_error(path, "must be an object");
  TrialRecord t;
  FDO_TRY_STATUS(read_string(j, "candidate", path, t.candidate));
  FDO_TRY_STATUS(read_string(j, "incumbent", path, t.incumbent));
  std::string verdict;
  FDO_TRY_STATUS(read_string(j, "verdict", path, verdict));
  auto v = kVerdictNames.parse(verdict);
  if (!v) return guard_error(path + ".verdict", "must be one of " + kVerdictNames.alternatives());
  t.verdict = *v;
  if (auto r = j.find("ratio"); r != j.end()) {
    if (!r->is_number() || !std::isfinite(r->get<double>()) || r->get<double>() <= 0)
      return guard_error(path + ".ratio", "must be a positive number");
    t.ratio = r->get<double>();
  }
  long long n = 0;
  FDO_TRY_STATUS(read_int(j, "candidate_stages", path, 0, 1 << 30, n));
  t.candidate_stages = static_cast<int>(n);
  n = 0;
  FDO_TRY_STATUS(read_int(j, "incumbent_stages", path, 0, 1 << 30, n));
  t.incumbent_stages = static_cast<int>(n);
  n = 0;
  FDO_TRY_STATUS(read_int(j, "profile_version", path, 0, std::numeric_limits<long long>::max(), n));
  t.profile_version = n;
  if (auto e = j.find("early_stop"); e != j.end()) {
    if (!e->is_boolean()) return guard_error(path + ".early_stop", "must be a boolean");
    t.early_stop = e->get<bool>();
  }
  FDO_TRY_STATUS(read_string(j, "decided_at", path, t.decided_at));
  FDO_TRY_STATUS(read_string(j, "summary", path, t.summary));
  return t;
}

Status read_samples(const json& obj, const char* key, std::vector<std::uint64_t>& out) {
  const std::string path = std::string(".running.") + key;
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return ok();
  if (!it->is_array()) return guard_error(path, "must be an array");
  if (it->size() > TrialCheckpoint::kMaxSamples)
    return guard_error(path, "holds " + std::to_string(it->size()) + " samples, more than " +
                                 std::to_string(TrialCheckpoint::kMaxSamples));
  for (std::size_t i = 0; i < it->size(); ++i) {
    const json& v = (*it)[i];
    const bool positive = v.is_number_unsigned()  ? v.get<std::uint64_t>() > 0
                          : v.is_number_integer() ? v.get<std::int64_t>() > 0
                                                  : false;
    if (!positive)
      return guard_error(path + "[" + std::to_string(i) + "]",
                         "must be a positive integer (nanoseconds)");
    out.push_back(v.get<std::uint64_t>());
  }
  return ok();
}

Expected<std::optional<TrialCheckpoint>> checkpoint_from_json(const json& j) {
  if (j.is_null()) return std::optional<TrialCheckpoint>();
  if (!j.is_object()) return guard_error(".running", "must be an object or null");
  TrialCheckpoint c;
  FDO_TRY_STATUS(read_string(j, "id", ".running", c.id));
  if (c.id.empty()) return guard_error(".running.id", "must be a non-empty string");
  FDO_TRY_STATUS(read_string(j, "shape", ".running", c.shape));
  long long v = 0;
  FDO_TRY_STATUS(read_int(j, "version", ".running", 0, std::numeric_limits<long long>::max(), v));
  c.version = v;
  FDO_TRY_STATUS(read_samples(j, "incumbent_ns", c.incumbent_ns));
  FDO_TRY_STATUS(read_samples(j, "candidate_ns", c.candidate_ns));
  return std::optional<TrialCheckpoint>(std::move(c));
}
} // namespace

std::string_view to_string(VariantBase b) {
  return kBaseNames.name(b);
}

std::string_view to_string(TrialVerdict v) {
  return kVerdictNames.name(v);
}

std::optional<TrialVerdict> parse_trial_verdict(std::string_view s) {
  return kVerdictNames.parse(s);
}

std::string trial_verdict_alternatives() {
  return kVerdictNames.alternatives();
}

json to_json(const GuardRecord& g) {
  json trials = json::array();
  for (const TrialRecord& t : g.trials)
    trials.push_back({{"candidate", t.candidate},
                      {"incumbent", t.incumbent},
                      {"verdict", std::string(to_string(t.verdict))},
                      {"ratio", t.ratio},
                      {"candidate_stages", t.candidate_stages},
                      {"incumbent_stages", t.incumbent_stages},
                      {"early_stop", t.early_stop},
                      {"profile_version", t.profile_version},
                      {"decided_at", t.decided_at},
                      {"summary", t.summary}});
  json running = nullptr;
  if (g.running)
    running = {{"id", g.running->id},
               {"shape", g.running->shape},
               {"version", g.running->version},
               {"incumbent_ns", g.running->incumbent_ns},
               {"candidate_ns", g.running->candidate_ns}};
  return {{"incumbent", g.incumbent_base ? json{{"base", std::string(to_string(*g.incumbent_base))},
                                                {"knobs", g.incumbent_knobs},
                                                {"version", g.incumbent_version},
                                                {"digest", g.incumbent_digest}}
                                         : json(nullptr)},
          {"trialled_digest", g.trialled_digest},
          {"tuning_step", g.tuning_step},
          {"trials", std::move(trials)},
          {"running", std::move(running)}};
}

Expected<GuardRecord> guard_from_json(const json& j) {
  GuardRecord g;
  if (j.is_null()) return g;
  if (!j.is_object()) return guard_error("", "must be an object");
  if (auto inc = j.find("incumbent"); inc != j.end() && !inc->is_null()) {
    if (!inc->is_object()) return guard_error(".incumbent", "must be an object or null");
    std::string base;
    FDO_TRY_STATUS(read_string(*inc, "base", ".incumbent", base));
    auto b = kBaseNames.parse(base);
    if (!b) return guard_error(".incumbent.base", "must be one of " + kBaseNames.alternatives());
    g.incumbent_base = *b;
    if (auto k = inc->find("knobs"); k != inc->end() && !k->is_null()) {
      json wrapped = {{"knobs", *k}};
      auto parsed = profile_from_json(wrapped);
      if (!parsed) return guard_error(".incumbent.knobs", parsed.error().describe());
      g.incumbent_knobs = *k;
    }
    long long v = 0;
    FDO_TRY_STATUS(
        read_int(*inc, "version", ".incumbent", 0, std::numeric_limits<long long>::max(), v));
    g.incumbent_version = v;
    FDO_TRY_STATUS(read_string(*inc, "digest", ".incumbent", g.incumbent_digest));
  }
  FDO_TRY_STATUS(read_string(j, "trialled_digest", "", g.trialled_digest));
  long long step = 0;
  FDO_TRY_STATUS(read_int(j, "tuning_step", "", 0, 1000, step));
  g.tuning_step = static_cast<int>(step);
  if (auto t = j.find("trials"); t != j.end() && !t->is_null()) {
    if (!t->is_array()) return guard_error(".trials", "must be an array");
    for (std::size_t i = 0; i < t->size(); ++i) {
      FDO_TRY(TrialRecord r, trial_from_json((*t)[i], ".trials[" + std::to_string(i) + "]"));
      g.trials.push_back(std::move(r));
    }
  }
  if (auto r = j.find("running"); r != j.end()) {
    FDO_TRY(g.running, checkpoint_from_json(*r));
  }
  return g;
}

} // namespace fdo
