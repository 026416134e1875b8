#include "fdo/daemon/audit.h"

#include "fdo/util/log_record.h"

namespace fdo::daemon {

std::string describe(const AuditRecord& r) {
  std::string m = "audit: uid " + std::to_string(r.tenant) + " " + r.action;
  if (!r.profile_key.empty()) m += " profile " + r.profile_key;
  if (!r.program.empty()) m += " program " + r.program;
  m += ": " + r.outcome;
  if (!r.detail.empty()) m += " (" + r.detail + ")";
  return m;
}

namespace {

class JournalAuditSink final : public AuditSink {
public:
  void record(const AuditRecord& r) override {
    const std::string tenant = std::to_string(r.tenant);
    log::record(log::Level::notice, describe(r),
                {{"FDO_AUDIT", "1"},
                 {"FDO_ACTION", r.action},
                 {"FDO_TENANT_UID", tenant},
                 {"FDO_PROFILE_KEY", r.profile_key},
                 {"FDO_PROGRAM", r.program},
                 {"FDO_OUTCOME", r.outcome},
                 {"FDO_DETAIL", r.detail}});
  }
};

} // namespace

std::shared_ptr<AuditSink> journal_audit_sink() {
  return std::make_shared<JournalAuditSink>();
}

} // namespace fdo::daemon
