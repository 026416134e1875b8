// The explain log, and the spellings of what it records (Outcome, Reason).
#include "explain_log.h"

#include "fdo/util/enum_names.h"
#include "fdo/util/time.h"

namespace fdo::cache {

namespace {

constexpr EnumNames<Outcome, 8> kOutcomeNames{{{
    {Outcome::memory_hit, "memory_hit"},
    {Outcome::disk_hit, "disk_hit"},
    {Outcome::remote_hit, "remote_hit"},
    {Outcome::compiled, "compiled"},
    {Outcome::joined, "joined"},
    {Outcome::tier_up_pending, "tier_up_pending"},
    {Outcome::background_compiled, "background_compiled"},
    {Outcome::failed, "failed"},
}}};

constexpr EnumNames<Reason, 10> kReasonNames{{{
    {Reason::new_program, "new_program"},
    {Reason::compiler_identity_changed, "compiler_identity_changed"},
    {Reason::virtual_first_stage, "virtual_first_stage"},
    {Reason::virtual_key_mapping, "virtual_key_mapping"},
    {Reason::cache_key, "cache_key"},
    {Reason::profile_rewritten, "profile_rewritten"},
    {Reason::evicted, "evicted"},
    {Reason::corrupt_on_disk, "corrupt_on_disk"},
    {Reason::corrupt_in_remote, "corrupt_in_remote"},
    {Reason::not_cached, "not_cached"},
}}};

} // namespace

std::string_view to_string(Outcome o) {
  return kOutcomeNames.name(o);
}

std::string_view to_string(Reason r) {
  return kReasonNames.name(r);
}

nlohmann::json to_json(const ExplainRecord& r) {
  nlohmann::json j = {{"sequence", r.sequence},
                      {"unix_ms", r.unix_ms},
                      {"ik", r.ik},
                      {"pk", r.pk},
                      {"ck", r.ck},
                      {"vk", r.vk},
                      {"storage_key", r.storage_key},
                      {"outcome", std::string(to_string(r.outcome))},
                      {"reason", std::string(to_string(r.reason))},
                      {"text", r.text},
                      {"from_version", r.from_version},
                      {"to_version", r.to_version},
                      {"from_digest", r.from_digest},
                      {"to_digest", r.to_digest},
                      {"mode", std::string(to_string(r.mode))},
                      {"compile_ms", r.compile_ms}};
  if (!r.error.empty()) j["error"] = r.error;
  if (r.exec_ns) j["exec_ns"] = *r.exec_ns;
  if (!r.variant_role.empty()) j["variant"] = {{"role", r.variant_role}, {"name", r.variant_name}};
  return j;
}

namespace detail {

ExplainLog::ExplainLog(std::size_t records_per_program, std::size_t max_programs)
    : records_per_program_(records_per_program == 0 ? 1 : records_per_program),
      programs_(max_programs) {}

std::uint64_t ExplainLog::record(ExplainRecord r, const std::optional<Served>& now_serving) {
  std::lock_guard lock(mu_);
  const std::uint64_t sequence = ++sequence_;
  r.sequence = sequence;
  r.unix_ms = unix_ms_now();
  Program& p = programs_.get_or_create(r.ik);
  if (now_serving) p.served = now_serving;
  p.log.push_back(std::move(r));
  while (p.log.size() > records_per_program_)
    p.log.pop_front();
  return sequence;
}

void ExplainLog::update(const std::string& ik, std::uint64_t sequence,
                        const std::function<void(ExplainRecord&)>& change) {
  std::lock_guard lock(mu_);
  Program* p = programs_.find(ik);
  if (p == nullptr) return;
  // The stage's record is at (or next to) the back: search from there.
  for (auto it = p->log.rbegin(); it != p->log.rend(); ++it)
    if (it->sequence == sequence) {
      change(*it);
      return;
    }
}

void ExplainLog::set_exec_ns(const std::string& ik, std::uint64_t sequence, std::uint64_t exec_ns) {
  update(ik, sequence, [&](ExplainRecord& r) { r.exec_ns = exec_ns; });
}

void ExplainLog::set_variant(const std::string& ik, std::uint64_t sequence, std::string role,
                             std::string name) {
  update(ik, sequence, [&](ExplainRecord& r) {
    r.variant_role = std::move(role);
    r.variant_name = std::move(name);
  });
}

std::optional<Served> ExplainLog::last_served(const std::string& ik) const {
  std::lock_guard lock(mu_);
  if (const Program* p = programs_.find(ik)) return p->served;
  return std::nullopt;
}

std::vector<ExplainRecord> ExplainLog::records(const std::string& ik) const {
  std::lock_guard lock(mu_);
  const Program* p = programs_.find(ik);
  if (p == nullptr) return {};
  return {p->log.begin(), p->log.end()};
}

} // namespace detail

} // namespace fdo::cache
