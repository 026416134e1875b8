// The audit trail: one record for every operator-visible change to stored
// state (profile.pin, profile.unpin, profile.reset, profile.import), allowed
// or refused, with who asked (the tenant uid), what it named (profile key,
// program) and how it ended. fdod writes them to journald as structured
// records (docs/fdod.md, "Audit records"); tests install a sink of their own
// through ServiceBuilder::audit_sink().
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace fdo::daemon {

struct AuditRecord {
  std::string action;       // the method: "profile.pin", "profile.import", ...
  std::uint32_t tenant = 0; // the caller's uid (SO_PEERCRED)
  std::string profile_key;  // empty when the action named none
  std::string program;      // the program id (IK) when the action named one
  std::string outcome;      // "ok", or the error code ("not_found", "pinned", ...)
  std::string detail;       // e.g. "version 3", the error message
};

// "audit: uid 1000 profile.pin <pk>: ok" — the MESSAGE of a record.
std::string describe(const AuditRecord& r);

class AuditSink {
public:
  virtual ~AuditSink() = default;
  virtual void record(const AuditRecord& r) = 0;
};

// The logger's structured records (log_record.h), at notice, with fields
// FDO_AUDIT=1, FDO_ACTION, FDO_TENANT_UID, FDO_PROFILE_KEY, FDO_PROGRAM,
// FDO_OUTCOME, FDO_DETAIL: in journald under systemd (journal.h), else
// fdod's log line with the fields appended.
std::shared_ptr<AuditSink> journal_audit_sink();

} // namespace fdo::daemon
