#include "fdo/daemon/audit.h"

#include "fdo/util/log.h"

#include <cstdlib>
#include <systemd/sd-journal.h>

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
    std::string message = describe(r);
    if (journal_) {
      int rc = sd_journal_send(
          "MESSAGE=%s", message.c_str(), "PRIORITY=5", "SYSLOG_IDENTIFIER=fdod", "FDO_AUDIT=1",
          "FDO_ACTION=%s", r.action.c_str(), "FDO_TENANT_UID=%u", static_cast<unsigned>(r.tenant),
          "FDO_PROFILE_KEY=%s", r.profile_key.c_str(), "FDO_PROGRAM=%s", r.program.c_str(),
          "FDO_OUTCOME=%s", r.outcome.c_str(), "FDO_DETAIL=%s", r.detail.c_str(), nullptr);
      if (rc >= 0) return;
    }
    log::notice(message);
  }

private:
  // Under systemd fdod's stderr is the journal; elsewhere (a terminal, a
  // test) the log line is the record.
  bool journal_ = std::getenv("JOURNAL_STREAM") != nullptr;
};

} // namespace

std::shared_ptr<AuditSink> journal_audit_sink() {
  return std::make_shared<JournalAuditSink>();
}

} // namespace fdo::daemon
