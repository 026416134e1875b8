#include "fdo/profile_store/json_view.h"

#include "fdo/util/time.h"

namespace fdo::profile_store {

nlohmann::json summary_to_json(const ProfileSummary& s) {
  return {{"profile_key", s.pk},
          {"version", s.version},
          {"digest", s.digest},
          {"pinned", s.pinned},
          {"owner", s.owner},
          {"functions", s.functions},
          {"updated_at", rfc3339_ms(s.updated_at)}};
}

nlohmann::json version_to_json(const StoredProfile& p) {
  return {{"version", p.version}, {"digest", p.digest},
          {"reason", p.reason},   {"created_at", rfc3339_ms(p.created_at)},
          {"stage", p.stage},     {"host", p.host},
          {"program", p.program}, {"source", std::string(to_string(p.source))}};
}

nlohmann::json program_to_json(const ProgramInfo& p) {
  return {{"program", p.ik},
          {"name", p.name},
          {"size", p.size},
          {"profile_key", p.pk.empty() ? nlohmann::json(nullptr) : nlohmann::json(p.pk)},
          {"first_seen", rfc3339_ms(p.first_seen)},
          {"last_used", rfc3339_ms(p.last_used)}};
}

} // namespace fdo::profile_store
