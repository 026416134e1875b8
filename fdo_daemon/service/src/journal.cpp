#include "fdo/daemon/journal.h"

#include <cstdlib>
#include <sys/uio.h>
#include <systemd/sd-journal.h>

namespace fdo::daemon {

std::vector<std::string> journal_entries(log::Level level, std::string_view message,
                                         std::span<const log::Field> fields) {
  std::vector<std::string> out;
  out.reserve(fields.size() + 3);
  out.push_back("MESSAGE=" + std::string(message));
  out.push_back("PRIORITY=" + std::to_string(static_cast<int>(level)));
  out.push_back("SYSLOG_IDENTIFIER=fdod");
  for (const log::Field& f : fields)
    if (!f.value.empty()) out.push_back(std::string(f.name) + "=" + std::string(f.value));
  return out;
}

bool send_to_journal(log::Level level, std::string_view message,
                     std::span<const log::Field> fields) {
  std::vector<std::string> entries = journal_entries(level, message, fields);
  std::vector<iovec> iov;
  iov.reserve(entries.size());
  for (std::string& e : entries)
    iov.push_back(iovec{e.data(), e.size()});
  return sd_journal_sendv(iov.data(), static_cast<int>(iov.size())) >= 0;
}

void use_journal_when_available() {
  if (std::getenv("JOURNAL_STREAM") != nullptr) log::set_record_sink(send_to_journal);
}

} // namespace fdo::daemon
