// fdod's structured records in journald: the logger's record sink
// (fdo/util/log_record.h) sending each record with sd_journal_sendv, so
// audit and stage records carry FDO_PROGRAM, FDO_PROFILE_KEY,
// FDO_TENANT_UID and the rest as fields (docs/fdod.md, "Journal records").
#pragma once

#include "fdo/util/log_record.h"

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace fdo::daemon {

// The entries of one record as journald receives them: MESSAGE=,
// PRIORITY=<level>, SYSLOG_IDENTIFIER=fdod, then NAME=value for each field
// with a value.
std::vector<std::string> journal_entries(log::Level level, std::string_view message,
                                         std::span<const log::Field> fields);

// One record to journald; false when journald did not take it.
bool send_to_journal(log::Level level, std::string_view message,
                     std::span<const log::Field> fields);

// Makes send_to_journal the logger's record sink when fdod runs under
// systemd with its stderr connected to the journal ($JOURNAL_STREAM).
void use_journal_when_available();

} // namespace fdo::daemon
