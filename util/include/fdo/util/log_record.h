// Structured log records: a message with named fields (journald's
// FDO_PROGRAM=..., FDO_PROFILE_KEY=..., FDO_TENANT_UID=...), so an operator
// can select one program's or one tenant's records (journalctl
// FDO_PROGRAM=<id>). Part of the logger (log.h), the project's one global.
// fdod installs a sink that sends records to journald (sd_journal_sendv)
// when it runs under systemd; without a sink, or when the sink cannot
// deliver, a record is one ordinary log line with the fields appended as
// NAME=value, so nothing is lost and nothing is unattributed.
#pragma once

#include "fdo/util/log.h"

#include <initializer_list>
#include <span>
#include <string>
#include <string_view>

namespace fdo::log {

// NAME: upper-case letters, digits and '_' (journald's rule), e.g. FDO_PROGRAM.
struct Field {
  std::string_view name;
  std::string_view value;
};

// Delivers one record (already past the level filter); false when it could
// not, and the record is then written as a line.
using RecordSink = bool (*)(Level level, std::string_view message, std::span<const Field> fields);
// nullptr: records are lines. Installed once at start, before threads.
void set_record_sink(RecordSink sink);

void record(Level level, std::string_view message, std::span<const Field> fields);
inline void record(Level level, std::string_view message, std::initializer_list<Field> fields) {
  record(level, message, std::span<const Field>(fields.begin(), fields.size()));
}

// The line form: "message [NAME=value NAME=value]" (fields with an empty
// value left out).
std::string with_fields(std::string_view message, std::span<const Field> fields);

} // namespace fdo::log
